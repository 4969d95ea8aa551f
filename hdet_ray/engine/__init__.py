"""The engine: torch and torch.distributed only. `HDETOneCycleLR` and what it is built from."""

from hdet_ray.engine.options import HDETOptions
from hdet_ray.engine.scheduler import HDETDivergedError, HDETOneCycleLR

__all__ = ["HDETDivergedError", "HDETOneCycleLR", "HDETOptions"]
