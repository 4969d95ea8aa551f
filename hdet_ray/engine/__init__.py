"""The engine: torch and torch.distributed only. `HDETOneCycleLR` and what it is built from.

Names load on first use (PEP 562), so `hdet_ray.engine.options` (plain data, read by the job spec) costs
no torch.
"""

from __future__ import annotations

from hdet_ray._lazy import lazy_names

_EXPORTS = {
    "HDETOptions": "hdet_ray.engine.options",
    "HDETDivergedError": "hdet_ray.engine.scheduler",
    "HDETOneCycleLR": "hdet_ray.engine.scheduler",
}
__all__ = list(_EXPORTS)


__getattr__, __dir__ = lazy_names(__name__, globals(), _EXPORTS)
