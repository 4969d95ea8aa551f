"""PEP 562 lazy names for a package's `__init__`: a name is imported from its module on first use."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_names(
    package: str, namespace: dict[str, Any], exports: dict[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """(`__getattr__`, `__dir__`) for `package`, whose globals are `namespace`; `exports` maps each public
    name to the module that defines it. A loaded name is stored in `namespace`, so later lookups skip this."""

    def getattr_(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def dir_() -> list[str]:
        return sorted(set(namespace) | set(exports))

    return getattr_, dir_
