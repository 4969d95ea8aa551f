"""hdet-ray: Hyperparameter-Divergent Ensemble Training (arXiv 2604.24708) on PyTorch and Ray.

`import hdet_ray` loads nothing heavy (its names import torch when first used); the Ray layer (`hdet_ray.ray`) and the service import Ray/FastAPI
themselves, when used.
"""

from importlib import import_module
from typing import TYPE_CHECKING

# Names are imported when first used (PEP 562), so `import hdet_ray.core...` or `import hdet_ray.spec`
# (the service's request models) does not load torch; `from hdet_ray import HDETOneCycleLR` does.
_HOMES = {
    "Controller": "hdet_ray.core.controller", "ControllerState": "hdet_ray.core.controller",
    "Decision": "hdet_ray.core.controller", "PaperController": "hdet_ray.core.controller",
    "SlopeController": "hdet_ray.core.controller", "Window": "hdet_ray.core.controller",
    "make_controller": "hdet_ray.core.controller", "HealthConfig": "hdet_ray.core.health",
    "HyperParam": "hdet_ray.core.hyperparams", "learning_rate": "hdet_ray.core.hyperparams",
    "WindowRecord": "hdet_ray.core.records", "linear_spread": "hdet_ray.core.spread",
    "log_spread": "hdet_ray.core.spread", "register_applier": "hdet_ray.engine.appliers",
    "HDETDivergedError": "hdet_ray.engine.scheduler", "HDETOneCycleLR": "hdet_ray.engine.scheduler",
}

if TYPE_CHECKING:
    from hdet_ray.core.controller import (
        Controller,
        ControllerState,
        Decision,
        PaperController,
        SlopeController,
        Window,
        make_controller,
    )
    from hdet_ray.core.health import HealthConfig
    from hdet_ray.core.hyperparams import HyperParam, learning_rate
    from hdet_ray.core.records import WindowRecord
    from hdet_ray.core.spread import linear_spread, log_spread
    from hdet_ray.engine.appliers import register_applier
    from hdet_ray.engine.scheduler import HDETDivergedError, HDETOneCycleLR


def __getattr__(name: str):
    if name not in _HOMES:
        raise AttributeError(f"module 'hdet_ray' has no attribute {name!r}")
    value = getattr(import_module(_HOMES[name]), name)
    globals()[name] = value
    return value


__version__ = "0.1.0"

__all__ = [
    "Controller", "ControllerState", "Decision", "HDETDivergedError", "HDETOneCycleLR", "HealthConfig",
    "HyperParam", "PaperController", "SlopeController", "Window", "WindowRecord", "learning_rate",
    "linear_spread", "log_spread", "make_controller", "register_applier",
]
