"""Auto-LR controllers: pure functions (state, window) -> (state, Decision), and their registry.

The contract every controller meets (`Window` in, `Decision` out, `ControllerState` between windows) and the
frame they share (rollback, the opening range test, the holds; `Controller.decide`) are in
`hdet_ray.core.frame`; the default controller, `evidence`, is in `hdet_ray.core.evidence`. This module holds
the paper's rule and the rank-slope rule beside them, and `make_controller`, which builds any of them by
name. Its names are the ones to import: it re-exports the contract and the evidence controller.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import Any

from hdet_ray.core.evidence import HELD_UP, SIGN_POOL, SIGNALS, EvidenceConfig, EvidenceController
from hdet_ray.core.frame import (
    CONVERGE_POLICIES,
    Controller,
    ControllerConfig,
    ControllerState,
    Decision,
    ParamWindow,
    Window,
    centered_ranks,
    clamp,
    ls_slope,
    rank_correlation,
    sign,
)

__all__ = [
    "CONTROLLERS",
    "CONVERGE_POLICIES",
    "DEFAULT_CONTROLLER",
    "HELD_UP",
    "SIGNALS",
    "SIGN_POOL",
    "Controller",
    "ControllerConfig",
    "ControllerState",
    "Decision",
    "EvidenceConfig",
    "EvidenceController",
    "PaperConfig",
    "PaperController",
    "ParamWindow",
    "SlopeConfig",
    "SlopeController",
    "Window",
    "centered_ranks",
    "clamp",
    "ls_slope",
    "make_controller",
    "rank_correlation",
]


@dataclass(frozen=True, kw_only=True, slots=True)
class PaperConfig(ControllerConfig):
    """The paper's settings: beta 0.9, sigma 0.1, lambda 0.5."""

    momentum: float = 0.9
    """beta."""
    temperature: float = 0.1
    """sigma, the softmax temperature on loss differences."""
    step_size: float = 0.5
    """lambda."""

    def __post_init__(self) -> None:
        ControllerConfig.__post_init__(self)
        if not 0.0 <= self.momentum < 1.0:
            raise ValueError(f"momentum must be in [0, 1), got {self.momentum}")
        if not self.temperature > 0:
            raise ValueError(f"temperature must be > 0, got {self.temperature}")
        if not self.step_size >= 0:
            raise ValueError(f"step_size must be >= 0, got {self.step_size}")


class PaperController(Controller):
    """The paper's auto-LR rule, moved onto an offset and made relative to the current centre.

        s_r = (mean(L) - L_r) / sigma,   w = softmax(s)
        Delta = (sum_r w_r * eta_r - mean_r(eta_r)) / centre  (zero-order hypergradient, relative)
        v <- beta * v + (1 - beta) * Delta
        centre <- centre * (1 + lambda * v)                    (the paper: base <- base*(1-gamma) + lambda*v)

    eta_r are the values applied at the window's end; non-finite losses get weight 0. The paper's update is
    additive in absolute units; under an annealing base that makes the same absolute step a growing
    multiple of the rate (the offset ran into its bound at the end of every run in the benchmarks), so
    Delta and v are kept in units of the centre. For the first window the two are identical.
    """

    name = "paper"
    Config = PaperConfig

    def _move(self, state, window):
        cfg: PaperConfig = self.config  # type: ignore[assignment]
        finite = [x for x in window.losses if math.isfinite(x)]
        mean_loss = sum(finite) / len(finite)
        scores = [
            ((mean_loss - x) / cfg.temperature) if math.isfinite(x) else -math.inf for x in window.losses
        ]
        top = max(scores)
        raw = [math.exp(s - top) for s in scores]
        total = sum(raw)
        w = [x / total for x in raw]
        offsets, velocity, signal = dict(state.offsets), dict(state.velocity), {}
        for name, p in window.params.items():
            centre = p.center
            if centre == 0:
                offsets[name] = p.offset
                continue
            delta = (
                sum(wi * v for wi, v in zip(w, p.values, strict=True)) - sum(p.values) / len(p.values)
            ) / centre
            v = cfg.momentum * velocity.get(name, 0.0) + (1 - cfg.momentum) * delta
            signal[name], velocity[name] = delta, v
            offsets[name] = p.offset_for(centre * max(1.0 + cfg.step_size * v, 1e-3))
        return replace(state, velocity=velocity), offsets, signal, "paper softmax update"


@dataclass(frozen=True, kw_only=True, slots=True)
class SlopeConfig(ControllerConfig):
    """Rank-fitness slope with momentum, a per-window clip and a trust region (DESIGN.md section 5)."""

    momentum: float = 0.9
    step_size: float = 0.5
    """Offset change per unit of smoothed slope (log units for log-scale hyperparameters). 0.1 (DESIGN.md's
    first simulation) could not move the rate more than ~1.3x in a 12-window run; 0.5 did better or equal in
    every start on digits and bytelm (`python -m benchmarks.controller_step`)."""
    clip: float = 0.5
    """Largest offset change in one window."""
    trust_windows: int = 3
    """Move only when the slope's sign agreed over this many windows (1: always move)."""
    urgent: bool = True
    """When a replica was excluded as unhealthy, move now, without waiting for the trust region."""

    def __post_init__(self) -> None:
        ControllerConfig.__post_init__(self)
        if not 0.0 <= self.momentum < 1.0:
            raise ValueError(f"momentum must be in [0, 1), got {self.momentum}")
        if not self.step_size >= 0:
            raise ValueError(f"step_size must be >= 0, got {self.step_size}")
        if not self.clip > 0:
            raise ValueError(f"clip must be > 0, got {self.clip}")
        if self.trust_windows < 1:
            raise ValueError(f"trust_windows must be >= 1, got {self.trust_windows}")


class SlopeController(Controller):
    """Least-squares slope of centered-rank fitness against each replica's coordinate.

    f = centered_ranks(-L)                       (non-finite losses rank worst)
    b = slope of f on x (x = log rho or rho - 1)
    v <- beta * v + (1 - beta) * b               (v reset to 0 first when sign(b) flips)
    o <- clamp(o + clip(step_size * v, +-clip), offset_bounds)   only if sign(b) agreed k windows
                                                                (or, if `urgent`, a replica was unhealthy)
    """

    name = "slope"
    Config = SlopeConfig

    def _move(self, state, window):
        cfg: SlopeConfig = self.config  # type: ignore[assignment]
        fit = centered_ranks(list(window.losses))
        offsets, velocity, signs, signal = dict(state.offsets), dict(state.velocity), dict(state.signs), {}
        notes = []
        for name, p in window.params.items():
            b = ls_slope(p.coords, fit)
            s = sign(b)
            history = signs.get(name, ())
            v = velocity.get(name, 0.0)
            if history and s != 0 and history[-1] != 0 and s != history[-1]:
                v = 0.0
                notes.append(f"{name}: sign flip, momentum reset")
            v = cfg.momentum * v + (1 - cfg.momentum) * b
            history = ((*history, s))[-cfg.trust_windows :]
            signal[name], velocity[name], signs[name] = b, v, history
            agreed = len(history) == cfg.trust_windows and s != 0 and all(h == s for h in history)
            urgent = cfg.urgent and s != 0 and not all(window.healthy)
            if urgent and not agreed:
                notes.append(f"{name}: unhealthy replica, moving without the trust region")
            if agreed or urgent:
                step = clamp(cfg.step_size * v, -cfg.clip, cfg.clip)
                offsets[name] = clamp(p.offset + step, *p.offset_bounds)
            else:
                offsets[name] = p.offset
        note = "; ".join(notes) or "slope update"
        return replace(state, velocity=velocity, signs=signs), offsets, signal, note


CONTROLLERS: dict[str, type[Controller]] = {
    c.name: c for c in (Controller, PaperController, SlopeController, EvidenceController)
}


DEFAULT_CONTROLLER = "evidence"
"""The controller `HDETOneCycleLR` and job specs use when none is named (the one place this default lives)."""


def make_controller(name: str = DEFAULT_CONTROLLER, **settings: Any) -> Controller:
    """Build a registered controller by name ('evidence', 'slope', 'paper', 'hold'); unknown settings name
    themselves."""
    if name not in CONTROLLERS:
        raise ValueError(f"controller must be one of {sorted(CONTROLLERS)}, got {name!r}")
    cls = CONTROLLERS[name]
    known = {f.name for f in fields(cls.Config)}
    unknown = sorted(set(settings) - known)
    if unknown:
        raise ValueError(f"controller {name!r} has no setting(s) {unknown}; allowed: {sorted(known)}")
    return cls(**settings)
