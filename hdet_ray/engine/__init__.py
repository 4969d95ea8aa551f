"""The engine: torch and torch.distributed only. `HDETOneCycleLR` and what it is built from.

Names load on first use (PEP 562), so `hdet_ray.engine.options` (plain data, read by the job spec) costs
no torch.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "HDETOptions": "hdet_ray.engine.options",
    "HDETDivergedError": "hdet_ray.engine.scheduler",
    "HDETOneCycleLR": "hdet_ray.engine.scheduler",
}
__all__ = list(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'hdet_ray.engine' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
