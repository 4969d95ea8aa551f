"""The names of the registered tasks, without torch: what a spec's `task` field is checked against.

Validating a spec happens in processes that never train (the controller actor, the service's request
models), so the names live here; `hdet_ray.tasks` holds the tasks themselves, and tests/test_tasks.py
checks that its built-in table has exactly `BUILTIN` as keys.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import sys
from functools import lru_cache

BUILTIN = ("bytelm", "digits")
"""The tasks shipped in `hdet_ray.tasks`."""
ENTRY_POINT_GROUP = "hdet_ray.tasks"


def entry_points() -> dict[str, importlib.metadata.EntryPoint]:
    """The group's entry points (a built-in name wins over a plugin's). Scanning every installed
    distribution costs ~30 ms, so the answer is kept per `sys.path`: a package installed into a
    directory already on the path is seen after a restart, one put on the path at once."""
    return dict(_scan(tuple(sys.path)))


@lru_cache(maxsize=8)
def _scan(path: tuple[str, ...]) -> tuple[tuple[str, importlib.metadata.EntryPoint], ...]:
    importlib.invalidate_caches()
    found = importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
    return tuple((ep.name, ep) for ep in found if ep.name not in BUILTIN)


def registered_names() -> list[str]:
    """Every registered task's name, without importing any plugin (or torch)."""
    return sorted([*BUILTIN, *entry_points()])
