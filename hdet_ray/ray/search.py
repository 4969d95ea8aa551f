"""Fan-out/converge across Tune trials: the pure part of `HDETSearcher` (no Ray here).

A generation is HDET's window with trials for replicas: `population` configurations at
centre_k * rho_r (a log-symmetric spread of factor `spread` per searched key, one independent
permutation per key and generation, as the engine assigns multipliers to ranks). When its results are
in, a controller turns the generation into a Decision that moves every centre, exactly as it moves the
base schedule inside a run: the same `Window`/`Decision` frame of `hdet_ray.core.controller`, so any
core controller works; the default is `VertexController`, which jumps to the vertex of a parabola fitted
to loss against log value (to the best trial when the fit is not convex), at most one spread away.
After a move that landed inside the spread the spread narrows (`shrink`), so the search refines.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from hdet_ray.core import spread as spreads
from hdet_ray.core.controller import Controller, ControllerConfig, ParamWindow, Window, clamp, make_controller


@dataclass(frozen=True, kw_only=True, slots=True)
class VertexConfig(ControllerConfig):
    extrapolate: float = 1.0
    """Largest move in one generation, in units of the spread's half-width (log rho_max)."""


class VertexController(Controller):
    """Move each centre to the vertex of the least-squares parabola of loss on coordinate.

    loss ~ a x^2 + b x + c,  x = log rho   ->   x* = -b / (2a)   if a > 0, else argmin loss
    offset <- offset + clamp(x*, +-extrapolate * max|x|)
    """

    name = "vertex"
    Config = VertexConfig

    def _move(self, state, window):
        cfg: VertexConfig = self.config  # type: ignore[assignment]
        offsets, signal = dict(state.offsets), {}
        for name, p in window.params.items():
            pts = [
                (x, y)
                for x, y, ok in zip(p.coords, window.losses, window.healthy, strict=True)
                if ok and math.isfinite(y)
            ]
            x_best = min(pts, key=lambda t: t[1])[0]
            target = x_best
            if len({round(x, 12) for x, _ in pts}) >= 3:
                a, b, _ = np.polyfit([x for x, _ in pts], [y for _, y in pts], 2)
                if a > 0:
                    target = -b / (2 * a)
            reach = cfg.extrapolate * max(abs(x) for x in p.coords)
            signal[name] = clamp(target, -reach, reach)
            offsets[name] = clamp(p.offset + signal[name], *p.offset_bounds)
        return state, offsets, signal, "vertex update"


@dataclass
class Generation:
    index: int
    multipliers: dict[str, list[float]]
    """Per key, the multiplier of each slot."""
    results: dict[int, float]
    """Slot -> loss (lower is better; inf for a failed trial)."""


class GenerationSearch:
    """The search state: centres, spread, the current generation; plain data in `to_dict()`."""

    def __init__(
        self,
        center: Mapping[str, float],
        *,
        population: int = 4,
        spread: float = 4.0,
        controller: str | Controller = "vertex",
        shrink: float = 0.5,
        min_spread: float = 1.1,
        seed: int = 0,
        **controller_settings: Any,
    ) -> None:
        if not center or any(not (v > 0 and math.isfinite(v)) for v in center.values()):
            raise ValueError(f"center: every searched value must be > 0 (log scale), got {dict(center)}")
        if population < 3:
            raise ValueError(f"population must be >= 3 (a parabola needs three points), got {population}")
        if not spread > 1:
            raise ValueError(f"spread must be > 1 (a log-spread factor), got {spread}")
        if not 0 < shrink <= 1:
            raise ValueError(f"shrink must be in (0, 1], got {shrink}")
        self.base = dict(center)
        self.population, self.spread, self.shrink, self.min_spread = population, spread, shrink, min_spread
        self.seed = seed
        if isinstance(controller, Controller):
            self.controller = controller
        elif controller == "vertex":
            self.controller = VertexController(**controller_settings)
        else:
            self.controller = make_controller(controller, **controller_settings)
        self.state = self.controller.initial_state(list(center))
        self.generation = self._new_generation(0)
        self.history: list[dict[str, Any]] = []

    @property
    def center(self) -> dict[str, float]:
        return {k: b * math.exp(self.state.offsets[k]) for k, b in self.base.items()}

    def proposal(self, slot: int) -> dict[str, float]:
        c = self.center
        return {k: c[k] * m[slot] for k, m in self.generation.multipliers.items()}

    def report(self, slot: int, loss: float) -> bool:
        """Record a slot's loss; returns True when that completed the generation (and the centre moved)."""
        self.generation.results[slot] = loss if math.isfinite(loss) else math.inf
        if len(self.generation.results) < self.population:
            return False
        self._step()
        return True

    def _new_generation(self, index: int) -> Generation:
        levels = spreads.log_spread(self.population, self.spread)
        mults = {
            k: [levels[i] for i in spreads.permutation(self.population, self.seed, index, k)]
            for k in self.base
        }
        return Generation(index=index, multipliers=mults, results={})

    def _step(self) -> None:
        g = self.generation
        losses = tuple(g.results[s] for s in range(self.population))
        center = self.center
        params = {
            k: ParamWindow(
                scale="log",
                base=self.base[k],
                offset=self.state.offsets[k],
                coords=tuple(math.log(m) for m in g.multipliers[k]),
                values=tuple(center[k] * m for m in g.multipliers[k]),
            )
            for k in self.base
        }
        window = Window(
            window=g.index,
            step=g.index + 1,
            total_steps=0,
            losses=losses,
            healthy=tuple(math.isfinite(x) for x in losses),
            params=params,
        )
        self.state, decision = self.controller.decide(self.state, window)
        half_width = math.log(self.spread)
        moved = max(abs(decision.offsets[k] - params[k].offset) for k in self.base)
        if not decision.rollback and moved < half_width * (1 - 1e-9):
            self.spread = max(math.exp(half_width * self.shrink), self.min_spread)
        self.history.append(
            {
                "generation": g.index,
                "center": center,
                "losses": list(losses),
                "new_center": self.center,
                "spread": self.spread,
                "note": decision.note,
            }
        )
        self.generation = self._new_generation(g.index + 1)

    def to_dict(self) -> dict[str, Any]:
        g = self.generation
        return {
            "base": dict(self.base),
            "spread": self.spread,
            "state": self.state.to_dict(),
            "generation": {"index": g.index, "results": dict(g.results)},
            "history": list(self.history),
        }

    def load_dict(self, d: Mapping[str, Any]) -> None:
        from hdet_ray.core.controller import ControllerState

        self.base, self.spread = dict(d["base"]), float(d["spread"])
        self.state = ControllerState.from_dict(d["state"])
        self.generation = self._new_generation(int(d["generation"]["index"]))
        self.generation.results = {int(k): float(v) for k, v in d["generation"]["results"].items()}
        self.history = list(d["history"])
