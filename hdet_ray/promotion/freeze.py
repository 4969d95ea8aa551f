"""Frozen by construction: a study's definition is hashed and recorded before stage 1 starts.

`fingerprint(definition)` is the SHA-256 of its canonical JSON. `check_unchanged(recorded, now)` raises
`StudyChanged` naming every changed field ("gates.0.margin: 0.01 -> 0.02"); to change a study after its
first run, declare a new one (a new `name`, hence a new record).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any


class StudyChanged(ValueError):
    """The study file differs from the definition frozen in its record."""

    def __init__(self, name: str, changes: list[str]) -> None:
        self.changes = changes
        listed = "\n".join(f"  {c}" for c in changes)
        super().__init__(
            f"study {name!r} was frozen before its first stage and cannot change; changed:\n{listed}\n"
            f"Revert the change, or declare a new study (give it a new name) to run the changed protocol."
        )


def canonical(definition: dict[str, Any]) -> str:
    return json.dumps(definition, sort_keys=True, separators=(",", ":"), allow_nan=False)


def fingerprint(definition: dict[str, Any]) -> str:
    return hashlib.sha256(canonical(definition).encode()).hexdigest()


def changes(old: Any, new: Any, path: str = "") -> list[str]:
    """Every path where `new` differs from `old`, as 'path: old -> new' lines."""
    here = path or "(study)"
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for key in sorted(set(old) | set(new), key=str):
            sub = f"{path}.{key}" if path else str(key)
            if key not in new:
                out.append(f"{sub}: removed (was {_show(old[key])})")
            elif key not in old:
                out.append(f"{sub}: added ({_show(new[key])})")
            else:
                out += changes(old[key], new[key], sub)
        return out
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        return [
            c for i, (a, b) in enumerate(zip(old, new, strict=True)) for c in changes(a, b, f"{path}.{i}")
        ]
    return [] if old == new else [f"{here}: {_show(old)} -> {_show(new)}"]


def check_unchanged(name: str, recorded: dict[str, Any], now: dict[str, Any]) -> None:
    if fingerprint(recorded) != fingerprint(now):
        raise StudyChanged(name, changes(recorded, now) or ["(canonical form differs)"])


def _show(value: Any) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= 80 else text[:77] + "..."
