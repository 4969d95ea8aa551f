"""What to explore: one `HyperParam` per scalar hyperparameter, as plain data.

How a value reaches the model (an optimizer param-group key, a module attribute, a user callback) is the
engine's business (`hdet_ray.engine.appliers`); here a hyperparameter is a name, a target string, a spread
and the axis the controller moves it on.

Effective value of replica r at step t (the paper's eta_r = rho_r * eta(t), plus the controller's offset o):
    scale 'log':    value_r = base(t) * exp(o) * rho_r
    scale 'linear': value_r = (base(t) + o) * rho_r
then clamped to `bounds`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hdet_ray.core.spread import SPREAD_KINDS

SCALES = ("log", "linear")


@dataclass(frozen=True, kw_only=True, slots=True)
class HyperParam:
    """One explored scalar hyperparameter."""

    name: str
    """Name used in records and decisions ('lr', 'weight_decay', 'dropout', ...)."""
    target: str = "lr"
    """Where the value goes: 'lr' (the scheduled rate), 'group:<key>' (an optimizer param-group key such as
    'group:weight_decay'; 'group:betas[0]' for a tuple entry), 'module:<Class>.<attr>' (that attribute on
    every submodule of that class name, e.g. 'module:Dropout.p'), or a name registered with
    `hdet_ray.engine.appliers.register_applier`."""
    spread: str = "log_mean1"
    """'log_mean1' (the ratios of 'log', scaled to arithmetic mean 1: the averaged model moves as plain data
    parallel at the base value does), 'log_below' (the same ratios with the top replica at the base: no
    replica runs above the value set), 'log' (multipliers size**z, z evenly in [-1, 1]) or 'linear' (the
    paper's 1 +/- alpha)."""
    size: float = 1.25
    """The log spreads' factor (>= 1) or the linear spread's alpha (in [0, 1)). 1.0 / 0.0: not spread.
    1.25 by default (replicas at 0.81x .. 1.24x for N = 4): the best rate often sits just below the edge of
    stability, and on the benchmark's MLP the spread costs 7% to 9% there (factor 1: nothing), while its top
    replica, failing first, is what brings a 10x too-high rate down on the MLP and the CNN. With 2 or 3
    replicas the engine narrows it to the spread variance 4 replicas have (`core.spread.replica_width`:
    on 2 processes factor 1.25 acts as 1.18)."""
    scale: str = "log"
    """Axis the controller's offset lives on: 'log' (multiplicative) or 'linear' (additive)."""
    bounds: tuple[float, float] | None = None
    """Clamp for every applied value, e.g. (0.0, 0.9) for dropout. None: no clamp."""
    offset_bounds: tuple[float, float] = (-math.log(1000.0), math.log(1000.0))
    """Limits of the controller's total offset (log units for scale 'log')."""
    groups: tuple[int, ...] | None = None
    """Optimizer param-group indices this applies to (None: all). Per-group rates are separate specs."""

    def __post_init__(self) -> None:
        if not self.name or not isinstance(self.name, str):
            raise ValueError(f"HyperParam.name must be a non-empty string, got {self.name!r}")
        if self.spread not in SPREAD_KINDS:
            raise ValueError(
                f"HyperParam {self.name!r}: spread must be one of {SPREAD_KINDS}, got {self.spread!r}"
            )
        if self.scale not in SCALES:
            raise ValueError(f"HyperParam {self.name!r}: scale must be one of {SCALES}, got {self.scale!r}")
        if self.spread != "linear" and not (self.size >= 1.0 and math.isfinite(self.size)):
            raise ValueError(
                f"HyperParam {self.name!r}: log spread size (factor) must be >= 1, got {self.size}"
            )
        if self.spread == "linear" and not 0.0 <= self.size < 1.0:
            raise ValueError(
                f"HyperParam {self.name!r}: linear spread size (alpha) must be in [0, 1), got {self.size}"
            )
        if self.bounds is not None and not self.bounds[0] <= self.bounds[1]:
            raise ValueError(
                f"HyperParam {self.name!r}: bounds must be (low, high) with low <= high, got {self.bounds}"
            )
        lo, hi = self.offset_bounds
        if not lo <= 0.0 <= hi:
            raise ValueError(
                f"HyperParam {self.name!r}: offset_bounds must contain 0, got {self.offset_bounds}"
            )

    @property
    def explored(self) -> bool:
        return self.size != (0.0 if self.spread == "linear" else 1.0)

    def size_at(self, width: float) -> float:
        """The spread's size at `width`, a fraction of `size` in log units for the log spreads (size**width)
        and of alpha for the linear one (0: no spread; 1: `size`)."""
        return self.size * width if self.spread == "linear" else self.size**width

    def value(self, base: float, offset: float, multiplier: float) -> float:
        """The applied value for one replica (see the module docstring), clamped to `bounds`."""
        v = base * math.exp(offset) * multiplier if self.scale == "log" else (base + offset) * multiplier
        if self.bounds is not None:
            v = min(max(v, self.bounds[0]), self.bounds[1])
        return v

    def effective_base(self, base: float, offset: float) -> float:
        """The centre the replicas spread around: base*exp(o) or base + o."""
        return base * math.exp(offset) if self.scale == "log" else base + offset

    def offset_for(self, base: float, offset: float, new_center: float) -> float:
        """The offset that moves the centre to `new_center` (clamped to `offset_bounds`)."""
        if self.scale == "log":
            new = offset if base <= 0.0 or new_center <= 0.0 else math.log(new_center / base)
        else:
            new = new_center - base
        return min(max(new, self.offset_bounds[0]), self.offset_bounds[1])


def learning_rate(spread: str = "log_mean1", size: float = 1.25, **kwargs) -> HyperParam:
    """The learning rate over all param groups (the paper's explored hyperparameter)."""
    return HyperParam(name=kwargs.pop("name", "lr"), target="lr", spread=spread, size=size, **kwargs)
