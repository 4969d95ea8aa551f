"""hdet-ray: Hyperparameter-Divergent Ensemble Training (arXiv 2604.24708) on PyTorch and Ray.

`import hdet_ray` needs torch only; the Ray layer (`hdet_ray.ray`) and the service import Ray/FastAPI
themselves, when used.
"""

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

__version__ = "0.1.0"

__all__ = [
    "Controller", "ControllerState", "Decision", "HDETDivergedError", "HDETOneCycleLR", "HealthConfig",
    "HyperParam", "PaperController", "SlopeController", "Window", "WindowRecord", "learning_rate",
    "linear_spread", "log_spread", "make_controller", "register_applier",
]
