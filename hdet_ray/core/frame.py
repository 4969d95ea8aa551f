"""The controllers' contract and shared frame: pure functions (state, window) -> (state, Decision).

A controller moves an *offset* on top of the base schedule (see `hyperparams.HyperParam.value`), so
OneCycle's shape and momentum cycling go on after auto-LR starts; the reference code's decay factor gamma
(whose sign is wrong with PyTorch's defaults) does not exist here.

Every controller shares the same frame (`Controller.decide`):
1. no healthy replica -> roll back: move the rate to `rollback_cut` x the lowest replica's, reset momentum,
   count the rollback;
   past `max_rollbacks` consecutive ones the Decision says `diverged` and the engine raises;
2. the opening window (if the engine ran a wide range-test spread) -> jump to the best replica's value
   and converge onto that replica;
2b. a window the subclass judges to have undone the run's learning with every replica healthy (`_rose`)
   -> roll back as in 1;
3. before `warmup_steps`, after `freeze_after` of the run, or with fewer than two finite losses -> hold;
4. otherwise the subclass turns the window into a signal and a new offset (`_move`).
The converge weights (plain mean, fitness-weighted, best replica) are part of the Decision too.

The controllers themselves and their registry are in `hdet_ray.core.controller` (the paper's, the slope's)
and `hdet_ray.core.evidence` (the default).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

CONVERGE_POLICIES = ("mean", "fitness", "best")


@dataclass(frozen=True, slots=True)
class ParamWindow:
    """One explored hyperparameter as the controller sees it at the end of a window."""

    scale: str
    """'log' or 'linear' (the offset's axis)."""
    base: float
    """The schedule's base value at the window's end (before the offset)."""
    offset: float
    coords: tuple[float, ...]
    """Per replica: log(rho_r) for log spreads, rho_r - 1 for linear ones."""
    values: tuple[float, ...]
    """Per replica: the value applied at the window's end."""
    offset_bounds: tuple[float, float] = (-math.inf, math.inf)
    peak: float = math.nan
    """The schedule's largest base value over the run where the scheduler knows it (OneCycle's `max_lr` for
    the rate), else NaN."""
    next_base: float = math.nan
    """The schedule's base value at the next window's end where the scheduler knows it (OneCycle's own phases
    for the rate), else NaN."""

    @property
    def center(self) -> float:
        return self.base * math.exp(self.offset) if self.scale == "log" else self.base + self.offset

    def offset_for(self, new_center: float) -> float:
        if self.scale == "log":
            new = self.offset if (self.base <= 0 or new_center <= 0) else math.log(new_center / self.base)
        else:
            new = new_center - self.base
        return clamp(new, *self.offset_bounds)


@dataclass(frozen=True, slots=True)
class Window:
    """The gathered record of one sync window: the controller's only input."""

    window: int
    step: int
    total_steps: int
    losses: tuple[float, ...]
    """Per replica window mean loss (NaN where non-finite or not reported)."""
    healthy: tuple[bool, ...]
    params: Mapping[str, ParamWindow]
    opening: bool = False
    """True when this window ran the wide opening spread (a range test across replicas)."""
    hypergradient: float = math.nan
    """The window hypergradient of the rate: -cos(g, step), > 0 where a higher rate would have gone further
    (the median over healthy replicas; NaN where not measured)."""
    initial_loss: float = math.nan
    """The run's starting loss: the first window's first-step loss, mean over replicas (NaN: not known)."""
    restart: bool = False
    """True when what trains changed in this window (parameters frozen or unfrozen, as a staged fine-tune
    does): the evidence gathered about the hyperparameters before it was about another problem."""

    @property
    def replicas(self) -> int:
        return len(self.losses)


@dataclass(frozen=True, slots=True)
class Decision:
    """What the engine applies after a window. Plain numbers, cheap to broadcast and to record."""

    offsets: dict[str, float]
    weights: tuple[float, ...]
    """Converge weights per replica (sum 1, 0 for excluded replicas); empty on rollback."""
    rollback: bool = False
    diverged: bool = False
    acted: bool = False
    signal: dict[str, float] = field(default_factory=dict)
    velocity: dict[str, float] = field(default_factory=dict)
    note: str = ""
    widths: dict[str, float] = field(default_factory=dict)
    """Per hyperparameter: the next window's spread width, a fraction of its configured size (log units for
    the log spreads; 0: no spread). Absent: 1, the full spread."""


@dataclass(frozen=True, slots=True)
class ControllerState:
    offsets: dict[str, float]
    velocity: dict[str, float]
    signs: dict[str, tuple[int, ...]]
    windows: int = 0
    rollbacks: int = 0
    consecutive_rollbacks: int = 0
    evidence: dict[str, tuple[float, ...]] = field(default_factory=dict)
    """Per hyperparameter: the recent windows' rank correlations (`EvidenceController`); under name +
    `SIGN_POOL`, the pooled hypergradient signs; under name + `HELD_UP`, the windows of "higher" the
    schedule's bias held since the last run of moves and the median log-loss of the first of them
    (`held_up_counts`, `held_up_when_stalled`)."""
    streak: dict[str, int] = field(default_factory=dict)
    """Per hyperparameter: signed count of consecutive moves in one direction (`EvidenceController`)."""
    last_base: dict[str, float] = field(default_factory=dict)
    """Per hyperparameter: the schedule's base value at the previous window's end."""
    bias: dict[str, int] = field(default_factory=dict)
    """Per hyperparameter: the direction the schedule moved in the previous window (+1 rising, -1 falling)."""
    replica_bias: tuple[float, ...] = ()
    """Per replica (rank): its mean log-loss above the window's median over the windows seen (its shard's
    difficulty: multipliers are re-permuted every window, so their effect averages out of it)."""
    replica_seen: tuple[int, ...] = ()
    recent_loss: tuple[float, ...] = ()
    """The median healthy log-loss of the recent windows, oldest first (`EvidenceController`'s stall test)."""
    peak_base: dict[str, float] = field(default_factory=dict)
    """Per hyperparameter: the largest base value the schedule has reached so far (`EvidenceController`)."""
    peak_step: dict[str, int] = field(default_factory=dict)
    """Per hyperparameter: the step of the window that set `peak_base` (`EvidenceController`)."""
    top_offset: dict[str, float] = field(default_factory=dict)
    """Per hyperparameter: the highest offset so far (`EvidenceController`)."""
    came_down: dict[str, bool] = field(default_factory=dict)
    """Per hyperparameter: whether the offset has ever come down (a move down or a rollback)."""
    first_verdict: dict[str, int] = field(default_factory=dict)
    """Per hyperparameter: +1 if the run's first full pool of hypergradient signs said "higher" in every
    window, -1 if it said "lower" in every window, 0 if it was mixed; absent until that pool is full
    (`EvidenceController`)."""
    widths: dict[str, float] = field(default_factory=dict)
    """Per hyperparameter: the spread width the next window uses (`Decision.widths`); absent: full."""
    learned: tuple[float, ...] = ()
    """The run's first window's median healthy log-loss and the lowest since, while no rollback or restart
    has come (`EvidenceController`'s `rise_rollback`); empty otherwise."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "offsets": dict(self.offsets),
            "velocity": dict(self.velocity),
            "signs": {k: list(v) for k, v in self.signs.items()},
            "windows": self.windows,
            "rollbacks": self.rollbacks,
            "consecutive_rollbacks": self.consecutive_rollbacks,
            "evidence": {k: list(v) for k, v in self.evidence.items()},
            "streak": dict(self.streak),
            "last_base": dict(self.last_base),
            "bias": dict(self.bias),
            "replica_bias": list(self.replica_bias),
            "replica_seen": list(self.replica_seen),
            "recent_loss": list(self.recent_loss),
            "peak_base": dict(self.peak_base),
            "peak_step": dict(self.peak_step),
            "top_offset": dict(self.top_offset),
            "came_down": dict(self.came_down),
            "first_verdict": dict(self.first_verdict),
            "widths": dict(self.widths),
            "learned": list(self.learned),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ControllerState:
        return cls(
            offsets={k: float(v) for k, v in d["offsets"].items()},
            velocity={k: float(v) for k, v in d["velocity"].items()},
            signs={k: tuple(int(x) for x in v) for k, v in d["signs"].items()},
            windows=int(d["windows"]),
            rollbacks=int(d["rollbacks"]),
            consecutive_rollbacks=int(d["consecutive_rollbacks"]),
            evidence={k: tuple(float(x) for x in v) for k, v in d.get("evidence", {}).items()},
            streak={k: int(v) for k, v in d.get("streak", {}).items()},
            last_base={k: float(v) for k, v in d.get("last_base", {}).items()},
            bias={k: int(v) for k, v in d.get("bias", {}).items()},
            replica_bias=tuple(float(x) for x in d.get("replica_bias", ())),
            replica_seen=tuple(int(x) for x in d.get("replica_seen", ())),
            recent_loss=tuple(float(x) for x in d.get("recent_loss", ())),
            peak_base={k: float(v) for k, v in d.get("peak_base", {}).items()},
            peak_step={k: int(v) for k, v in d.get("peak_step", {}).items()},
            top_offset={k: float(v) for k, v in d.get("top_offset", {}).items()},
            came_down={k: bool(v) for k, v in d.get("came_down", {}).items()},
            first_verdict={k: int(v) for k, v in d.get("first_verdict", {}).items()},
            widths={k: float(v) for k, v in d.get("widths", {}).items()},
            learned=tuple(float(x) for x in d.get("learned", ())),
        )


def clamp(x: float, lo: float, hi: float) -> float:
    return min(max(x, lo), hi)


def centered_ranks(losses: Sequence[float]) -> list[float]:
    """Fitness in [-0.5, 0.5]: the lowest loss gets +0.5, the highest -0.5; non-finite losses rank worst.

    Ties share the mean of their ranks, so equal losses give equal (zero) fitness.
    """
    n = len(losses)
    if n == 1:
        return [0.0]
    keyed = [(-x if math.isfinite(x) else -math.inf) for x in losses]  # higher is better
    order = sorted(range(n), key=lambda i: keyed[i])
    ranks = [0.0] * n
    i = 0
    while i < n:
        j = i
        while j + 1 < n and keyed[order[j + 1]] == keyed[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2
        i = j + 1
    return [r / (n - 1) - 0.5 for r in ranks]


def ls_slope(x: Sequence[float], y: Sequence[float]) -> float:
    """Least-squares slope of y on x (0 when x has no spread)."""
    n = len(x)
    mx, my = sum(x) / n, sum(y) / n
    sxx = sum((a - mx) ** 2 for a in x)
    if sxx <= 1e-300:
        return 0.0
    return sum((a - mx) * (b - my) for a, b in zip(x, y, strict=True)) / sxx


def sign(x: float) -> int:
    """-1, 0 or +1: the sign of x."""
    return (x > 0) - (x < 0)


def rank_correlation(coords: Sequence[float], losses: Sequence[float]) -> float:
    """Spearman's rho between each replica's coordinate and its fitness (low loss = fit; NaN ranks worst).

    +1: the higher the value, the lower the loss. Under "the value does not matter" and a random assignment of
    multipliers to replicas, rho has mean 0 and variance 1 / (N - 1) whatever the losses' scale: the null
    distribution the evidence test needs is known exactly.
    """
    x = centered_ranks([-c for c in coords])
    y = centered_ranks(list(losses))
    sxx = sum(a * a for a in x)
    syy = sum(b * b for b in y)
    if sxx <= 1e-300 or syy <= 1e-300:
        return 0.0
    return sum(a * b for a, b in zip(x, y, strict=True)) / math.sqrt(sxx * syy)


@dataclass(frozen=True, kw_only=True, slots=True)
class ControllerConfig:
    """Settings every controller shares (the frame in the module docstring)."""

    warmup_steps: int = 0
    """S_warm: the controller holds the offset before this step (averaging and rollback still run)."""
    freeze_after: float | None = None
    """Fraction of the run after which the offset is frozen (e.g. 0.3: at OneCycle's peak). None: never."""
    converge: str = "mean"
    """'mean' (healthy replicas equally), 'fitness' (softmax of rank fitness), 'best' (copy the best)."""
    fitness_temperature: float = 0.25
    rollback_param: str = "lr"
    """Which hyperparameter a rollback cuts, and whose window hypergradient the `evidence` controller reads
    (the other hyperparameters use its rank test)."""
    rollback_cut: float = 0.5
    """On a rollback the centre moves to this multiple of the lowest replica's value (every replica failed,
    the lowest one too, so the rate that trains is below all of them)."""
    rollback_ahead: bool = True
    """While the schedule rises, the cut also takes out the base's growth over the last window, so the rate
    is at `rollback_cut` x the lowest failed value at the next window's end, not at this one's (a rising
    schedule took it back there: the benchmark's MLP from 10x too high died again two windows after a
    rollback). Needs the previous window's base, which controllers that track it (`evidence`) keep in
    `ControllerState.last_base`; without it (the run's first window, and the controllers that do not keep
    it) the cut is at this window's base."""
    rollback_ahead_first_window: bool = False
    """With `rollback_ahead`: in the run's first window, which has no last one, take out the schedule's own
    rise to the next window's end instead (`ParamWindow.next_base`, where the scheduler knows it: OneCycle's
    phases). Measured, not the default (docs/benchmarks.md, "Other OneCycle shapes"): with a short warm-up
    (`pct_start=0.1`, 20 windows) the issue's MLP from 10x too high fails in its first window on 6 seeds of
    10; cut at that window's base the next rate is about 4x its best and it dies again a few windows on, and
    the second rollback restarts it near its best rate; cut for the rise it lands at about 2x its best and
    on 4 of the 6 trains there without dying, and holds (the loss still falls fast): better on 2 seeds, worse
    on 4, level on 4."""
    rollback_lone_survivor: bool = True
    """A window in which one replica of three or more is healthy rolls back as one with none does. Under
    `shared_grad` the survivor applied the gradient the failing replicas shared in, so its state is suspect
    (the engine never keeps such a window's state as a rollback point), and the rate that failed above it is
    still the centre. Measured in the issue's setting and at 10 steps on every benchmark cell where such a
    window occurs (docs/benchmarks.md): the mean over 5 seeds improved on all five (the softmax from 10x too
    high 3.70x -> 3.11x of the oracle, the MLP from 10x too high at 60 windows 1.73x -> 1.27x). False: the
    controller holds on such a window (fewer than two healthy losses)."""
    max_rollbacks: int = 8
    """Consecutive rollbacks allowed before the run is declared diverged. Each cuts the rate to at most
    `rollback_cut` x the lowest replica's (0.4x the centre's with the default spread), so 8 in a row leave it
    below 1/1000 of where the run failed: past that no rate trains it, and a run that stops later than it
    must wastes a few windows. It was 3 (1/15) until 2026-12-06: `benchmarks.unseen`'s surface fit (Adamax,
    full-batch) from 10x too high failed three windows in a row, every restore the untrained state and a
    fresh optimizer state taking full-size steps where the warm-up had begun, and stopped as diverged at
    0.06x its start; allowed more, it rolls back 5 or 6 times and trains at 0.008x to 0.09x (5 seeds:
    held-out MSE 39x -> 20x of the oracle's; fixed OneCycle dies, 36x). No other recorded run rolled back
    four windows in a row."""
    opening_step_down: int = 1
    """After the opening range test, centre this many levels below the best replica's rate (lr_find-style
    tests take a rate below the loss minimiser: the window is short, and higher rates win it early)."""

    def __post_init__(self) -> None:
        if self.warmup_steps < 0:
            raise ValueError(f"warmup_steps must be >= 0, got {self.warmup_steps}")
        if self.freeze_after is not None and not 0.0 <= self.freeze_after <= 1.0:
            raise ValueError(f"freeze_after must be in [0, 1], got {self.freeze_after}")
        if self.converge not in CONVERGE_POLICIES:
            raise ValueError(f"converge must be one of {CONVERGE_POLICIES}, got {self.converge!r}")
        if not self.fitness_temperature > 0:
            raise ValueError(f"fitness_temperature must be > 0, got {self.fitness_temperature}")
        if not 0.0 < self.rollback_cut < 1.0:
            raise ValueError(f"rollback_cut must be in (0, 1), got {self.rollback_cut}")
        if self.max_rollbacks < 0:
            raise ValueError(f"max_rollbacks must be >= 0, got {self.max_rollbacks}")
        if self.opening_step_down < 0:
            raise ValueError(f"opening_step_down must be >= 0, got {self.opening_step_down}")


class Controller:
    """Base class: the shared frame. Subclasses implement `_move`."""

    name: ClassVar[str] = "hold"
    Config: ClassVar[type[ControllerConfig]] = ControllerConfig

    def __init__(self, config: ControllerConfig | None = None, **settings: Any) -> None:
        if config is not None and settings:
            raise TypeError("pass either a config or keyword settings, not both")
        self.config = config if config is not None else self.Config(**settings)

    @property
    def wants_hypergradient(self) -> bool:
        """Whether the engine should measure `Window.hypergradient` (it keeps the window's start for it)."""
        return False

    def initial_state(self, names: Sequence[str]) -> ControllerState:
        return ControllerState(
            offsets={n: 0.0 for n in names}, velocity={n: 0.0 for n in names}, signs={n: () for n in names}
        )

    def decide(self, state: ControllerState, window: Window) -> tuple[ControllerState, Decision]:
        cfg = self.config
        state = replace(state, windows=state.windows + 1)
        if window.restart:
            state = self._restart(state)
        if not any(window.healthy) or (
            cfg.rollback_lone_survivor and window.replicas > 2 and sum(window.healthy) == 1
        ):
            return self._rollback(state, window)
        state = replace(state, consecutive_rollbacks=0)
        if window.opening:
            return self._open(state, window)
        rose = self._rose(state, window)
        if rose:  # every replica healthy, yet the window undid what the run had learned
            return self._rollback(state, window, why=rose)
        weights = self._weights(window)
        progress = window.step / window.total_steps if window.total_steps else 0.0
        finite = [x for x, ok in zip(window.losses, window.healthy, strict=True) if ok and math.isfinite(x)]
        why = ""
        if window.step < cfg.warmup_steps:
            why = f"warm-up (step {window.step} < {cfg.warmup_steps})"
        elif cfg.freeze_after is not None and progress >= cfg.freeze_after:
            why = f"frozen after {cfg.freeze_after:g} of the run"
        elif len(finite) < 2:
            why = "fewer than two healthy losses"
        if why:
            return state, Decision(
                offsets=dict(state.offsets),
                weights=weights,
                note=why,
                velocity=dict(state.velocity),
                widths=dict(state.widths),
            )
        state, offsets, signal, note = self._move(state, window)
        state = replace(state, offsets=offsets)
        acted = any(offsets[k] != window.params[k].offset for k in offsets if k in window.params)
        return state, Decision(
            offsets=dict(offsets),
            weights=weights,
            acted=acted,
            signal=signal,
            velocity=dict(state.velocity),
            note=note,
            widths=dict(state.widths),
        )

    def _move(
        self, state: ControllerState, window: Window
    ) -> tuple[ControllerState, dict[str, float], dict[str, float], str]:
        return state, dict(state.offsets), {}, "hold"

    def _rose(self, state: ControllerState, window: Window) -> str:
        """Why a window with every replica healthy rolls back, "" where it does not: this controller never
        does (the evidence controller's `rise_rollback`)."""
        return ""

    def _restart(self, state: ControllerState) -> ControllerState:
        """What trains changed (`Window.restart`): the state kept about the old problem is dropped. This
        controller keeps none; the evidence controller starts its pools afresh."""
        return state

    # -- shared pieces -------------------------------------------------------------------------------
    def _rollback(
        self, state: ControllerState, window: Window, why: str = ""
    ) -> tuple[ControllerState, Decision]:
        """Roll back the window: every replica failed (or one of three or more is left), or `why` says
        what else undid the run's learning (`_rose`)."""
        cfg = self.config
        offsets, last_base, ahead = dict(state.offsets), dict(state.last_base), ""
        target = (
            cfg.rollback_param if cfg.rollback_param in window.params else next(iter(window.params), None)
        )
        if target is not None:  # every replica failed, the lowest value too: go below it
            p = window.params[target]
            lowest = (
                min((v for v in p.values if v > 0), default=p.center) if p.scale == "log" else min(p.values)
            )
            new_center = min(lowest, p.center) * cfg.rollback_cut
            previous = state.last_base.get(target, math.nan)
            first_window_ahead = cfg.rollback_ahead and cfg.rollback_ahead_first_window
            if cfg.rollback_ahead and math.isfinite(previous) and 0.0 < previous < p.base:
                # the schedule rose by p.base / previous in this window; assume it does so once more
                new_center *= previous / p.base
                ahead = f" ahead of the schedule's rise (x{p.base / previous:.3g} a window)"
            elif first_window_ahead and window.window == 0 and 0.0 < p.base < p.next_base:
                # no last window (the run's first): the schedule itself says how far it rises by the next
                # window's end (a short warm-up reaches its peak there: from 10x too high, pct_start=0.1)
                new_center *= p.base / p.next_base
                ahead = (
                    f" ahead of the schedule's rise (x{p.next_base / p.base:.3g} by the next window's end)"
                )
            offsets[target] = p.offset_for(new_center)
            if target in last_base:  # kept current only where the controller keeps it every window
                last_base[target] = p.base
        consecutive = state.consecutive_rollbacks + 1
        state = replace(
            state,
            offsets=offsets,
            velocity={k: 0.0 for k in state.velocity},
            signs={k: () for k in state.signs},
            evidence={},
            streak={},
            rollbacks=state.rollbacks + 1,
            consecutive_rollbacks=consecutive,
            last_base=last_base,
            widths={},  # the window failed: the full spread (its top replica fails first) comes back
            learned=(),
        )
        diverged = consecutive > cfg.max_rollbacks
        if not why:
            why = (
                "no healthy replica"
                if not any(window.healthy)
                else f"one healthy replica of {window.replicas}"
            )
        note = f"{why}: rolled back; {target} to {cfg.rollback_cut:g} x the lowest replica's"
        note += ahead
        if diverged:
            note += f"; {consecutive} consecutive rollbacks > max_rollbacks {cfg.max_rollbacks}"
        return state, Decision(
            offsets=dict(offsets),
            weights=(),
            rollback=True,
            diverged=diverged,
            acted=True,
            velocity=dict(state.velocity),
            note=note,
        )

    def _weights(self, window: Window) -> tuple[float, ...]:
        healthy = window.healthy
        n_ok = sum(healthy)
        policy = self.config.converge
        losses_known = all(math.isfinite(x) for x, ok in zip(window.losses, healthy, strict=True) if ok)
        if policy == "mean" or not losses_known or n_ok == 1:
            return tuple((1.0 / n_ok) if ok else 0.0 for ok in healthy)
        fit = centered_ranks([x if ok else math.nan for x, ok in zip(window.losses, healthy, strict=True)])
        if policy == "best":
            best = max((i for i in range(len(fit)) if healthy[i]), key=lambda i: fit[i])
            return tuple(1.0 if i == best else 0.0 for i in range(len(fit)))
        t = self.config.fitness_temperature
        top = max(f for f, ok in zip(fit, healthy, strict=True) if ok)
        raw = [math.exp((f - top) / t) if ok else 0.0 for f, ok in zip(fit, healthy, strict=True)]
        total = sum(raw)
        return tuple(x / total for x in raw)

    def _open(self, state: ControllerState, window: Window) -> tuple[ControllerState, Decision]:
        """After the range-test window: centre every explored value on the best healthy replica's."""
        scores = [
            x if (ok and math.isfinite(x)) else math.inf
            for x, ok in zip(window.losses, window.healthy, strict=True)
        ]
        best = min(range(len(scores)), key=lambda i: scores[i])
        offsets = dict(state.offsets)
        for name, p in window.params.items():
            levels = sorted(set(p.coords))
            coord = levels[max(levels.index(p.coords[best]) - self.config.opening_step_down, 0)]
            offsets[name] = p.offset_for(
                p.center * math.exp(coord) if p.scale == "log" else p.center * (1.0 + coord)
            )
        weights = tuple(1.0 if i == best else 0.0 for i in range(window.replicas))
        state = replace(state, offsets=offsets)
        down = f", {self.config.opening_step_down} level(s) down" if self.config.opening_step_down else ""
        return state, Decision(
            offsets=dict(offsets),
            weights=weights,
            acted=True,
            velocity=dict(state.velocity),
            note=f"opening range test: centred on replica {best}{down}",
            widths=dict(state.widths),
        )
