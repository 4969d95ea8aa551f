"""hdet-ray: Hyperparameter-Divergent Ensemble Training (arXiv 2604.24708) on PyTorch and Ray.

The top-level names are loaded on first use (PEP 562), so `import hdet_ray.core.controller` costs no
torch: only names from the engine (`HDETOneCycleLR`, `register_applier`, ...) import it. The Ray layer
(`hdet_ray.ray`) and the service import Ray/FastAPI themselves, when used.
"""

from __future__ import annotations

from hdet_ray._lazy import lazy_names

__version__ = "0.1.0"

# public name -> the module that defines it
_EXPORTS = {
    "Controller": "hdet_ray.core.controller",
    "ControllerState": "hdet_ray.core.controller",
    "Decision": "hdet_ray.core.controller",
    "EvidenceController": "hdet_ray.core.controller",
    "PaperController": "hdet_ray.core.controller",
    "SlopeController": "hdet_ray.core.controller",
    "Window": "hdet_ray.core.controller",
    "make_controller": "hdet_ray.core.controller",
    "HealthConfig": "hdet_ray.core.health",
    "HyperParam": "hdet_ray.core.hyperparams",
    "learning_rate": "hdet_ray.core.hyperparams",
    "WindowRecord": "hdet_ray.core.records",
    "linear_spread": "hdet_ray.core.spread",
    "log_spread": "hdet_ray.core.spread",
    "register_applier": "hdet_ray.engine.appliers",
    "HDETDivergedError": "hdet_ray.engine.scheduler",
    "HDETOneCycleLR": "hdet_ray.engine.scheduler",
}

__all__ = list(_EXPORTS)


__getattr__, __dir__ = lazy_names(__name__, globals(), _EXPORTS)
