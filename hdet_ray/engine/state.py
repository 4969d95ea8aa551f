"""What an HDET run carries from window to window, with an explicit `state_dict`.

`HDETState` is everything `HDETOneCycleLR` needs to continue a run exactly (schedule position inside the
window, window accumulators, controller state, trajectory, health memory); OneCycleLR's own attributes stay
on the scheduler. The rollback snapshot is not here: the model's checkpoint already holds the weights
(see `engine/rollback.py`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from hdet_ray.core.controller import ControllerState
from hdet_ray.core.health import (
    HealthConfig,
    ReplicaStats,
    assess,
    blew_up,
    first_noise,
    gave_back,
    left_best,
    regressed,
    start_loss,
    stuck,
)
from hdet_ray.core.records import WindowRecord
from hdet_ray.engine.fanout import GradientScale
from hdet_ray.engine.window import WindowLoss


@dataclass
class HealthMemory:
    """What `core.health.assess` needs from earlier windows; the one place that calls it."""

    previous_loss: float = math.nan
    """The last converged window's median healthy loss."""
    best_loss: float = math.inf
    """The lowest such median of the run."""
    initial_loss: float = math.nan
    """The first window's starting loss: where the untrained model sits (health's default chance level)."""
    best_replica: float = math.inf
    """The lowest window loss of any healthy replica in a kept window (health's `replica_learned`)."""
    kept_loss: float = math.nan
    """The median loss of the window the rollback snapshot was last kept from (NaN: the run's start), or the
    snapshot's own loss where a window restored from it measured it far above that and failed every replica
    (`restored_measured`)."""
    restored: bool = False
    """The last sync rolled back to the snapshot: the run is at `kept_loss` (health's `regressed_start`)."""
    stuck_run: int = 0
    """How many windows in a row, up to the last, met the stuck rule without it acting (`stuck_windows`)."""
    blown: bool = False
    """A replica's loss or parameters blew up in an earlier window and the run has not been restored since
    (`stuck_after_blowup`): what the survivors carried on with may be damaged. A restore puts back a state
    from before the blow-up, and a slow restart at the cut rate from it is flat near the first loss too."""
    best_clear: float = math.inf
    """The lowest, over kept windows, of the highest healthy replica loss: below the initial loss, a whole
    window's replicas were below the untrained level (health's `progress_all_replicas`)."""
    unsteady: bool = True
    """A window since the one that set `best_loss` left a replica out or rolled back (health's
    `best_after_exclusion`); True until a fully healthy window sets a best."""
    first_noise: float = math.nan
    """The spread of the last window's first losses (`core.health.first_noise`): the batches' noise at the
    weights that window started from, before anything this window did to them; the next window's start is
    tested against the level the run had got to on the smaller of this and its own spread (health's
    `blowup_noise`)."""

    def assess(
        self, stats: Sequence[ReplicaStats], config: HealthConfig | None
    ) -> tuple[list[bool], dict[int, str]]:
        """(healthy flag per replica, reason per unhealthy one); with no config every replica is healthy."""
        if not math.isfinite(self.initial_loss):
            self.initial_loss = start_loss(stats)
        if config is None:
            return [True] * len(stats), {}
        restored = math.nan
        if self.restored:
            restored = self.kept_loss if math.isfinite(self.kept_loss) else self.initial_loss
        memory = (self.previous_loss, self.best_loss, self.initial_loss, self.best_replica)
        clear = self.best_clear
        rest = (self.stuck_run, self.blown, clear, self.unsteady)
        level_noise = self.first_noise
        healthy, reasons = assess(stats, config, *memory, restored, *rest, level_noise=level_noise)
        self.first_noise = first_noise(stats)
        first = start_loss(stats)  # after a restore: the restored snapshot's own loss
        if (
            config.restored_measured
            and not any(healthy)
            and regressed(first, restored, self.initial_loss, config)
        ):
            # another rollback would restore this same state: judge the window from the level it has
            self.kept_loss = first
            healthy, reasons = assess(stats, config, *memory, first, *rest, level_noise=level_noise)
        met = all(healthy) and stuck(stats, config, *memory, self.blown, clear) is not None
        self.stuck_run = self.stuck_run + 1 if met else 0  # acted on (every replica failed): starts afresh
        self.note_blowups(reasons.values())
        self.note_rise([s.mean_loss for s in stats], config)
        return healthy, reasons

    def note_blowups(self, reasons: Iterable[str]) -> None:
        """Remember whether any of a window's reasons for leaving a replica out is a blow-up (`blown`)."""
        self.blown = self.blown or any(blew_up(reason) for reason in reasons)

    def note_rise(self, losses: Sequence[float], config: HealthConfig) -> None:
        """Count a window as a blow-up (`blown`) where, before the run has learned, a replica's window loss
        rose above the run's initial loss by more than `chance_margin` of it (`rose_above_start`)."""
        finite = [x for x in losses if math.isfinite(x)]
        if not (config.rose_above_start and finite and math.isfinite(self.initial_loss)):
            return
        margin = config.chance_margin * abs(self.initial_loss)
        learned = min(self.best_loss, self.best_replica, *finite) < self.initial_loss - margin
        if not learned and max(finite) > self.initial_loss + margin:
            self.blown = True

    def keep(self, losses: Sequence[float]) -> None:
        """The rollback snapshot was kept from this window: a rollback returns the run to its level."""
        finite = [x for x in losses if math.isfinite(x)]
        if finite:
            self.kept_loss = statistics.median_high(finite)

    def worth_keeping(self, losses: Sequence[float], config: HealthConfig | None) -> bool:
        """Whether a fully healthy window's converged state may become the rollback target: not when its
        median gave back over half of what the run had learned (`core.health.gave_back`), nor when it is
        above the run's initial loss (no better than the start, which is kept first; a network can die over
        a window whose replicas all look healthy before it has learned anything), nor when it is above the
        run's best median by more than `stuck_above_best` allows (`core.health.left_best`: a rollback to the
        level of a collapsed network restores the collapse). `stuck_spread=0`: always."""
        finite = [x for x in losses if math.isfinite(x)]
        if config is None or config.stuck_spread <= 0 or not finite:
            return True
        median = statistics.median_high(finite)
        if math.isfinite(self.initial_loss) and median > self.initial_loss:
            return False
        if left_best(median, self.best_loss, config):  # no progress floor: it only picks a target
            return False
        return not gave_back(median, self.best_loss, self.initial_loss)

    def remember(
        self, losses: Sequence[float], healthy: Sequence[bool], rolled_back: bool, restored: bool = False
    ) -> None:
        """After a window: the median of the healthy, finite losses becomes the reference. `restored`: the
        window rolled back to the snapshot (not merely re-weighted its replicas)."""
        self.restored = restored
        if restored:
            self.blown = False
        if rolled_back or not all(healthy):
            self.unsteady = True
        kept = sorted(x for x, ok in zip(losses, healthy, strict=True) if ok and math.isfinite(x))
        if kept and not rolled_back:
            self.previous_loss = kept[len(kept) // 2]
            if self.previous_loss < self.best_loss and all(healthy):
                self.unsteady = False
            self.best_loss = min(self.best_loss, self.previous_loss)
            self.best_replica = min(self.best_replica, kept[0])
            self.best_clear = min(self.best_clear, kept[-1])

    def state_dict(self) -> dict[str, float]:
        return {
            "previous_loss": self.previous_loss,
            "best_loss": self.best_loss,
            "initial_loss": self.initial_loss,
            "best_replica": self.best_replica,
            "kept_loss": self.kept_loss,
            "restored": float(self.restored),
            "stuck_run": float(self.stuck_run),
            "blown": float(self.blown),
            "best_clear": self.best_clear,
            "unsteady": float(self.unsteady),
            "first_noise": self.first_noise,
        }

    def load_state_dict(self, state: dict[str, float]) -> None:
        self.previous_loss = float(state["previous_loss"])
        self.best_loss = float(state["best_loss"])
        self.initial_loss = float(state.get("initial_loss", math.nan))
        self.best_replica = float(state.get("best_replica", math.inf))
        self.kept_loss = float(state.get("kept_loss", math.nan))
        self.restored = bool(state.get("restored", 0.0))
        self.stuck_run = int(state.get("stuck_run", 0))
        self.blown = bool(state.get("blown", 0.0))
        self.best_clear = float(
            state.get("best_clear", self.best_loss)
        )  # older checkpoints: the medians' rule
        self.unsteady = bool(state.get("unsteady", 1.0))  # older checkpoints: the best always counts
        self.first_noise = float(state.get("first_noise", math.nan))


@dataclass
class HDETState:
    controller: ControllerState
    loss: WindowLoss
    """This rank's accumulators for the current window (on the loss's device)."""
    base_now: list[float]
    """OneCycle's value per param group at the current step, before offsets and multipliers."""
    window: int = 0
    steps_done: int = 0
    """Steps this scheduler has counted (a resumed plain OneCycleLR starts at its `last_epoch`)."""
    in_window: int = 0
    """Steps taken in the current window."""
    warmup_left: int = 0
    """Steps left of the rate's warm-up after a rollback that emptied the optimizer's state
    (`HDETOptions.rollback_warmup`)."""
    records: list[WindowRecord] = field(default_factory=list)
    pending: dict[str, float] = field(default_factory=dict)
    """Metrics given to `annotate`, attached to the next window's record."""
    health: HealthMemory = field(default_factory=HealthMemory)
    slope: torch.Tensor | None = None
    """This rank's window hypergradient (0-dim), measured before the window's last step; not saved."""
    grad_scale: GradientScale = field(default_factory=GradientScale)
    """The shared gradient's ordinary norm (shared_grad's clip floor)."""

    def state_dict(self) -> dict[str, Any]:
        return {
            "window": self.window,
            "steps_done": self.steps_done,
            "in_window": self.in_window,
            "warmup_left": self.warmup_left,
            "loss": self.loss.state_dict(),
            "controller": self.controller.to_dict(),
            "records": [r.to_dict() for r in self.records],
            "base_now": list(self.base_now),
            "pending": dict(self.pending),
            "health": self.health.state_dict(),
            "grad_scale": self.grad_scale.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any], device: torch.device) -> None:
        self.window, self.in_window = int(state["window"]), int(state["in_window"])
        self.steps_done = int(state["steps_done"])
        self.warmup_left = int(state.get("warmup_left", 0))  # absent from checkpoints written before it
        self.loss.load_state_dict(state["loss"], device)
        self.controller = ControllerState.from_dict(state["controller"])
        self.records = [WindowRecord.from_dict(r) for r in state["records"]]
        self.base_now = [float(x) for x in state["base_now"]]
        self.pending = dict(state["pending"])
        # checkpoints written before the health memory had its own entry kept its two numbers at the top
        self.health.load_state_dict(state.get("health") or state)
        self.grad_scale.load_state_dict(state.get("grad_scale", {}), device)
