"""`HDETOptions`: the keyword-only HDET options of `HDETOneCycleLR`, checked when built.

Imports no torch (the job spec reads its defaults here, and the service's request models load no torch).

Every check names the field and the range it allows. Defaults that depend on the run (the schedule's
length, the number of replicas) are `None` here and resolved by `resolve`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from hdet_ray.core.controller import DEFAULT_CONTROLLER, Controller, Decision, Window
from hdet_ray.core.health import HealthConfig
from hdet_ray.core.hyperparams import HyperParam, learning_rate
from hdet_ray.core.records import WindowRecord

FANOUT_MODES = ("local", "shared_grad")
ROLLBACK_MODES = ("memory", "off")
OPTIMIZER_STATE_POLICIES = ("average", "keep", "reset")
DEFAULT_SYNC_EVERY = 25
"""The longest sync period `default_sync_every` gives."""
DEFAULT_WINDOWS = 20
"""The fewest windows `default_sync_every` gives a run of at least that many steps."""


def default_sync_every(total_steps: int) -> int:
    """The sync period when none is given (the scheduler's and the job spec's): total_steps // 20, at least 1
    and at most 25.

    At least 20 windows: the controller pools 4 windows of evidence, and a rate 10x too high does its damage
    by OneCycle's peak (30% of the run), so the rise needs about 6 windows. At most 25 steps: under
    `shared_grad` the replicas drift apart along the window's step at their multipliers, so a longer window
    spreads them further. Measured at 500 steps (`benchmarks.issue_setting`'s setting, six workloads): with
    50 (10 windows, the old default) the MLP from 10x too high stayed dead as fixed OneCycle does and the
    rescues from 10x too low fell short, where 25 trains it (docs/benchmarks.md, "The issue's own setting").
    """
    return max(1, min(DEFAULT_SYNC_EVERY, total_steps // DEFAULT_WINDOWS))


DecideFn = Callable[[Window, WindowRecord], Decision]


@dataclass(kw_only=True, frozen=True)
class HDETOptions:
    sync_every: int | None = None
    """T, steps between syncs; None: `default_sync_every`, total_steps // 20 clamped to [1, 25]."""
    explore: Sequence[HyperParam] | None = None
    """The hyperparameters to explore; None: `learning_rate()` (log_mean1 spread, factor 1.25)."""
    fanout: str = "shared_grad"
    """'shared_grad' (the paper's: gradients averaged every step, each rank applies its own rate) or 'local'
    (no collective between syncs)."""
    controller: str | Controller = DEFAULT_CONTROLLER
    """'evidence' (the default), 'slope', 'paper', 'hold', or a `Controller` instance."""
    controller_settings: dict[str, Any] | None = None
    """Keyword settings for a controller given by name."""
    auto_lr: bool = True
    """False holds every offset (HDET without auto-LR: spread and averaging only)."""
    health: HealthConfig | None = None
    """When a replica is unhealthy; None: `HealthConfig()` with several replicas, no checks with one."""
    optimizer_state: str | None = None
    """'average' | 'keep' | 'reset' at each sync; None: 'keep' under shared_grad (the moments already agree),
    else 'average'."""
    rollback: str | None = None
    """'memory': keep the last healthy converged state in memory to restore when every replica fails (or all
    but one of three or more, `ControllerConfig.rollback_lone_survivor`);
    'off': keep nothing (such a window continues at the cut rate from its healthy replica, or where none is,
    from the mean of the replicas with finite parameters);
    None: 'memory' with several replicas, 'off' with one."""
    rollback_warmup: int = 5
    """Steps over which the rate comes back after a rollback that empties the optimizer's state (every
    `optimizer_state` but 'average', whose snapshot holds it), under every optimizer but `torch.optim.SGD`:
    the k-th step after it runs at k / `rollback_warmup` of its rate. From an empty state an Adam-family
    optimizer (and RMSprop, Adagrad) moves every coordinate by about the full rate at once (it divides a
    gradient by its own size), far longer than its steps had been, at a rate the rollback has just shown
    to be near the edge: the surface fit of `benchmarks.unseen` (Adamax, full-batch) blew up again after
    every restore. SGD's emptied momentum buffer restarts with steps 1 - momentum of its steady ones, its
    own warm-up, and a ramp on top let a rate still too high pass the window after the rollback and fail
    later (the issue's SGD MLP from 10x too high on 2 processes, 10 seeds: 2.17x -> 3.70x of the oracle).
    Measured side by side on this project's machine (2026-12-06, docs/benchmarks.md, "A five-step
    warm-up after a rollback"): the surface fit at its best rate 2.24x -> 1.20x of the oracle, from 10x
    too high 19.9x -> 4.5x; from 10x too high an autoencoder 1.85x -> 1.67x, a factorization under Adagrad
    1.25x -> 1.19x, a NAdam MLP 2.29x -> 2.16x; worse: a mixture of experts 1.24x -> 1.37x and the held-out
    AdamW MLP 1.36x -> 1.71x (3 seeds; per seed 0.83x to 1.56x of its runs without). 10 steps took the
    surface fit from 10x too high to 1.04x but cost the other cells it changes 4.7% (the bag of words,
    the AdamW MLPs: a longer warm-up lets a cut rate still too high pass the window after the rollback);
    2 did worse on the surface fit. 0: none."""
    balanced: bool = False
    """Assign multipliers so that explored hyperparameters are uncorrelated across replicas."""
    hypergradient_span: int | None = None
    """Steps the window hypergradient's step spans: the gradient before the window's last step against the
    step made over the `hypergradient_span` steps before it. None: from the window's start (the default).
    The longer the span, the more "higher" the sign says at the same rate (the step holds more of the slow
    drift along which the loss still falls). Measured at `sync_every=25` (docs/benchmarks.md): a span of 10
    (what `sync_every=10` reads) held the BatchNorm CNN at its best rate where the whole window climbed it,
    and lost most of the rescues from 10x too low."""
    opening_spread: float | None = None
    """A log-spread factor for the first window's rate (a range test across replicas)."""
    model: Any = None
    """The module whose parameters the optimizer holds (or its DDP wrapper): buffers, `module:` targets,
    `noise`. A DDP-wrapped model is held in `no_sync()` while the scheduler lives (`close()` ends it): HDET
    averages the gradients (`shared_grad`) or nothing does (`local`), never DDP's plain all-reduce."""
    noise: float = 0.0
    """nu of the warm noisy start (per-rank Gaussian noise of std nu * ||theta|| / sqrt(d))."""
    seed: int = 0
    """The job seed: permutations and noise derive from it; the global RNG is never touched."""
    process_group: Any = None
    """The replicas' group (default: the default group, or one replica without one)."""
    decide: DecideFn | None = None
    """Called on rank 0 instead of the in-process controller (the Ray layer's actor); its Decision is
    broadcast to every rank."""
    on_record: Callable[[WindowRecord], None] | None = None
    """Called on rank 0 with every completed `WindowRecord`."""

    def __post_init__(self) -> None:
        if self.sync_every is not None and (
            isinstance(self.sync_every, bool) or not isinstance(self.sync_every, int) or self.sync_every < 1
        ):
            raise ValueError(f"sync_every must be an integer >= 1, got {self.sync_every!r}")
        _one_of("fanout", self.fanout, FANOUT_MODES)
        if self.optimizer_state is not None:
            _one_of("optimizer_state", self.optimizer_state, OPTIMIZER_STATE_POLICIES)
        if self.rollback is not None:
            _one_of("rollback", self.rollback, ROLLBACK_MODES)
        if (
            isinstance(self.rollback_warmup, bool)
            or not isinstance(self.rollback_warmup, int)
            or (self.rollback_warmup < 0)
        ):
            raise ValueError(f"rollback_warmup must be an integer >= 0, got {self.rollback_warmup!r}")
        if self.hypergradient_span is not None and (
            isinstance(self.hypergradient_span, bool)
            or not isinstance(self.hypergradient_span, int)
            or self.hypergradient_span < 1
        ):
            raise ValueError(
                f"hypergradient_span must be an integer >= 1 or None, got {self.hypergradient_span!r}"
            )
        if self.opening_spread is not None and not self.opening_spread >= 1.0:
            raise ValueError(f"opening_spread must be >= 1 (a log-spread factor), got {self.opening_spread}")
        if not self.noise >= 0.0:
            raise ValueError(f"noise must be >= 0, got {self.noise}")
        if isinstance(self.controller, Controller):
            if self.controller_settings:
                raise ValueError("controller_settings applies only to a controller given by name")
        elif not isinstance(self.controller, str):
            raise ValueError(f"controller must be a name or a Controller instance, got {self.controller!r}")
        if self.health is not None and not isinstance(self.health, HealthConfig):
            raise ValueError(f"health must be a HealthConfig or None, got {type(self.health).__name__}")
        if self.explore is not None:
            names = [hp.name for hp in self.explore]
            if len(set(names)) != len(names):
                raise ValueError(f"explore: hyperparameter names must be unique, got {names}")

    def resolve(self, total_steps: int, replicas: int) -> HDETOptions:
        """These options with every run-dependent default filled in."""
        sync_every = default_sync_every(total_steps) if self.sync_every is None else self.sync_every
        if not sync_every <= total_steps:
            raise ValueError(
                f"sync_every must be an integer in [1, total_steps={total_steps}], got {sync_every!r}"
            )
        explore = list(self.explore) if self.explore is not None else [learning_rate()]
        if not any(hp.target == "lr" for hp in explore):
            explore.insert(0, HyperParam(name="lr", target="lr", size=1.0))  # the rate a rollback cuts
        many = replicas > 1
        return replace(
            self,
            seed=int(self.seed),
            sync_every=sync_every,
            explore=tuple(explore),
            optimizer_state=self.optimizer_state or ("keep" if self.fanout == "shared_grad" else "average"),
            health=self.health if self.health is not None or not many else HealthConfig(),
            rollback=self.rollback or ("memory" if many else "off"),
        )


def _one_of(field: str, value: object, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ValueError(f"{field} must be one of {allowed}, got {value!r}")
