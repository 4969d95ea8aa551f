"""How an explored value reaches the optimizer or the model.

An applier owns a list of *slots* (param groups, modules), remembers each slot's base value, and writes
one value per slot. The learning rate is not an applier: its base is the OneCycle schedule itself, which
`HDETOneCycleLR.get_lr` computes. Users add their own with `register_applier`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Protocol

import torch

from hdet_ray.core.hyperparams import HyperParam


class Applier(Protocol):
    def bases(self) -> list[float]:
        """The base value of every slot (read fresh each step for values the schedule cycles)."""

    def apply(self, values: Sequence[float]) -> None:
        """Write one value per slot."""

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...


_GROUP_KEY = re.compile(r"^(?P<key>[A-Za-z_][A-Za-z0-9_]*)(\[(?P<index>\d+)\])?$")


class GroupKeyApplier:
    """An optimizer param-group key ('weight_decay', 'momentum', 'betas[0]'), in the selected groups.

    If the schedule cycles that key (OneCycle's momentum / beta1), the base is what the schedule just
    wrote, read each step; otherwise the value found at construction.
    """

    def __init__(
        self, optimizer: torch.optim.Optimizer, spec: str, groups: Sequence[int] | None, cycled: bool
    ) -> None:
        m = _GROUP_KEY.match(spec)
        if not m:
            raise ValueError(f"target 'group:{spec}': expected a key like 'weight_decay' or 'betas[0]'")
        self.key, self.index = m["key"], (int(m["index"]) if m["index"] is not None else None)
        self.groups = [optimizer.param_groups[i] for i in _group_indices(optimizer, groups)]
        for g in self.groups:
            if self.key not in g:
                raise ValueError(
                    f"target 'group:{spec}': optimizer {type(optimizer).__name__} has no "
                    f"param-group key {self.key!r}; keys: {sorted(k for k in g if k != 'params')}"
                )
        self.cycled = cycled
        self._bases = [self._read(g) for g in self.groups]

    def _read(self, group: dict) -> float:
        v = group[self.key]
        return float(v[self.index] if self.index is not None else v)

    def bases(self) -> list[float]:
        return [self._read(g) for g in self.groups] if self.cycled else list(self._bases)

    def apply(self, values: Sequence[float]) -> None:
        for g, v in zip(self.groups, values, strict=True):
            if self.index is None:
                g[self.key] = v
            else:
                t = list(g[self.key])
                t[self.index] = v
                g[self.key] = tuple(t)

    def state_dict(self) -> dict:
        return {"bases": list(self._bases)}

    def load_state_dict(self, state: dict) -> None:
        self._bases = [float(x) for x in state["bases"]]


class ModuleAttrApplier:
    """An attribute on every submodule of a given class name ('Dropout.p')."""

    def __init__(self, model: torch.nn.Module | None, spec: str) -> None:
        cls_name, _, attr = spec.partition(".")
        if not cls_name or not attr:
            raise ValueError(f"target 'module:{spec}': expected '<ClassName>.<attribute>', e.g. 'Dropout.p'")
        if model is None:
            raise ValueError(f"target 'module:{spec}' needs the model: pass model=... to HDETOneCycleLR")
        self.attr = attr
        self.modules = [m for m in model.modules() if type(m).__name__ == cls_name]
        if not self.modules:
            raise ValueError(f"target 'module:{spec}': the model has no submodule of class {cls_name!r}")
        for m in self.modules:
            if not isinstance(getattr(m, attr, None), (int, float)):
                raise ValueError(f"target 'module:{spec}': {cls_name}.{attr} is not a number")
        self._bases = [float(getattr(m, attr)) for m in self.modules]

    def bases(self) -> list[float]:
        return list(self._bases)

    def apply(self, values: Sequence[float]) -> None:
        for m, v in zip(self.modules, values, strict=True):
            setattr(m, self.attr, v)

    def state_dict(self) -> dict:
        return {"bases": list(self._bases)}

    def load_state_dict(self, state: dict) -> None:
        self._bases = [float(x) for x in state["bases"]]


ApplierFactory = Callable[[HyperParam, torch.optim.Optimizer, "torch.nn.Module | None"], Applier]
_REGISTRY: dict[str, ApplierFactory] = {}


def register_applier(name: str, factory: ApplierFactory) -> None:
    """Make `HyperParam(target=name)` use `factory(hyperparam, optimizer, model) -> Applier`."""
    if name in ("lr",) or ":" in name:
        raise ValueError(f"applier name {name!r} is reserved or contains ':'")
    _REGISTRY[name] = factory


def make_applier(
    hp: HyperParam,
    optimizer: torch.optim.Optimizer,
    model: torch.nn.Module | None,
    cycled_keys: Sequence[str] = (),
) -> Applier:
    kind, _, rest = hp.target.partition(":")
    if kind == "group" and rest:
        return GroupKeyApplier(optimizer, rest, hp.groups, cycled=rest in cycled_keys)
    if kind == "module" and rest:
        return ModuleAttrApplier(model, rest)
    if hp.target in _REGISTRY:
        return _REGISTRY[hp.target](hp, optimizer, model)
    raise ValueError(
        f"HyperParam {hp.name!r}: unknown target {hp.target!r}; use 'lr', 'group:<key>', "
        f"'module:<Class>.<attr>' or one of {sorted(_REGISTRY)}"
    )


def _group_indices(optimizer: torch.optim.Optimizer, groups: Sequence[int] | None) -> list[int]:
    n = len(optimizer.param_groups)
    if groups is None:
        return list(range(n))
    bad = [g for g in groups if not 0 <= g < n]
    if bad:
        raise ValueError(f"groups {bad} out of range: the optimizer has {n} param group(s)")
    return list(groups)
