"""One sync window, in the order of DESIGN.md section 2.

1. each rank's window statistics are all-gathered (the one host read of the window);
2. health marks the replicas to leave out (`HealthMemory.assess`);
3. the controller (or rank 0's `decide`, broadcast through `DecisionCodec`) returns a Decision;
4. every rank converges to the Decision's weighted mean (one flat all-reduce per dtype/device), or rolls
   back to the last fully healthy state when no replica is healthy;
5. the WindowRecord is appended to the trajectory.

`Assignment` draws which multiplier rho_r each rank uses in a window: a permutation per window and per
hyperparameter from `(seed, window, name)`, so every rank agrees without communication.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import NoReturn

import torch
import torch.distributed as dist

from hdet_ray.core import spread as spreads
from hdet_ray.core.controller import Controller, Decision, ParamWindow, Window
from hdet_ray.core.health import ReplicaStats, start_loss
from hdet_ray.core.hyperparams import HyperParam
from hdet_ray.core.records import WindowRecord, complete_record, draft_record
from hdet_ray.engine import converge
from hdet_ray.engine.codec import DecisionCodec, broadcast_decision
from hdet_ray.engine.options import HDETOptions
from hdet_ray.engine.rollback import Snapshot
from hdet_ray.engine.state import HDETState


@dataclass(frozen=True)
class Assignment:
    window: int
    all: dict[str, list[float]]
    """Every replica's multiplier of every explored hyperparameter."""
    mine: dict[str, float]
    """This rank's."""
    opening: bool
    """The first window's range test (`opening_spread`)."""

    @classmethod
    def draw(
        cls,
        options: HDETOptions,
        replicas: int,
        rank: int,
        window: int,
        widths: Mapping[str, float] | None = None,
    ) -> Assignment:
        """`widths`: the controller's spread width per hyperparameter (`Decision.widths`; absent: full)."""
        n, explore, widths = replicas, list(options.explore or ()), widths or {}
        names = [hp.name for hp in explore]
        if options.balanced and len(names) > 1:
            perms = spreads.balanced_permutations(n, names, options.seed, window)
        else:
            perms = {name: spreads.permutation(n, options.seed, window, name) for name in names}
        opening_spread = options.opening_spread if window == 0 and n > 1 else None
        opening = opening_spread is not None
        every = {}
        for hp in explore:
            if opening_spread is not None and hp.target == "lr":
                levels = spreads.log_spread(n, opening_spread)
            else:
                width = widths.get(hp.name, 1.0) * spreads.replica_width(n)
                levels = spreads.spread(hp.spread, n, hp.size_at(width))
            every[hp.name] = [levels[perms[hp.name][r]] for r in range(n)]
        return cls(window, every, {name: m[rank] for name, m in every.items()}, opening)


class WindowSync:
    """Carries out one sync for the scheduler; holds references to what it reads and changes."""

    def __init__(
        self,
        *,
        options: HDETOptions,
        replicas: int,
        rank: int,
        params: Sequence[torch.Tensor],
        optimizer: torch.optim.Optimizer,
        controller: Controller,
        snapshot: Snapshot,
        base_of: Callable[[HyperParam, HDETState], float],
        total_steps: int,
        peak_of: Callable[[HyperParam], float] | None = None,
        next_base_of: Callable[[HyperParam], float] | None = None,
    ) -> None:
        self.options, self.replicas, self.rank = options, replicas, rank
        self.params, self.optimizer, self.controller = list(params), optimizer, controller
        self.snapshot, self.base_of, self.total_steps = snapshot, base_of, total_steps
        self.peak_of, self.next_base_of = peak_of, next_base_of
        self.explore: list[HyperParam] = list(options.explore or ())
        self.codec = DecisionCodec([hp.name for hp in self.explore], replicas)
        self.trainable: tuple[bool, ...] | None = None
        """Which parameters required a gradient at the last sync (`Window.restart` when that changes)."""

    def tensors(self, with_optimizer: bool) -> list[torch.Tensor]:
        """What converges, in packing order: parameters, float buffers, optionally the optimizer's tensors."""
        out = converge.state_tensors(
            self.params, self.options.model, self.optimizer if with_optimizer else None
        )
        if any(t.is_sparse for t in out):  # every rank alike, before any collective of the sync
            raise RuntimeError(
                "HDETOneCycleLR(optimizer_state='average'): the optimizer keeps a sparse state tensor "
                "(SGD's momentum buffer for a gradient from nn.Embedding(sparse=True)), which the sync "
                "cannot average. Pass optimizer_state='keep', or use fanout='shared_grad' (the default, "
                "whose replicas apply one gradient, so their optimizer states agree without averaging)."
            )
        return out

    def __call__(self, state: HDETState, assignment: Assignment) -> WindowRecord:
        average_opt = self.options.optimizer_state == "average"
        tensors = self.tensors(average_opt)
        flats = converge.pack(tensors)
        device = flats[0].device if flats else torch.device("cpu")
        local = state.loss.stats(device, converge.params_finite(self.params))
        slope = state.slope if state.slope is not None else torch.tensor(math.nan, dtype=torch.float64)
        # what the converge will all-reduce: its size must be the same on every rank (checked in `gather`)
        size = torch.tensor([float(sum(f.numel() for f in flats))], dtype=local.dtype, device=local.device)
        stats = self.gather(
            torch.cat([local, slope.to(device=local.device, dtype=local.dtype).reshape(1), size])
        )
        state.slope = None
        healthy, reasons = state.health.assess(stats, self.options.health)
        window = self.window_input(state, assignment, stats, healthy)
        record = draft_record(window, stats, reasons, assignment.all, start_loss(stats))
        record.metrics.update(state.pending)
        state.pending = {}
        decision = self.decide(state, window, record)
        complete_record(record, decision)
        if decision.diverged:
            # the failed window stays on the record, and every rank is left at the last kept state, not at
            # its own failed weights: what a user who catches the error (or saves a checkpoint) holds
            self._append(state, record)
            note = decision.note
            if self.snapshot.held:
                self.snapshot.restore(self.tensors, self.optimizer)
                note += "; the model is back at the last kept state"
            _diverged(state, note)
        restored = decision.rollback and self.snapshot.held
        if restored:
            self.snapshot.restore(self.tensors, self.optimizer)
        else:
            weights = (
                decision.weights if not decision.rollback else self.rollback_weights(state, stats, healthy)
            )
            converge.weighted_average(flats, weights[self.rank], group=self.options.process_group)
            converge.unpack(flats, tensors)
            # survivors of a window that lost replicas may be damaged, and so is a window that gave back over
            # half the run's progress: keep the older state
            if all(healthy) and state.health.worth_keeping(window.losses, self.options.health):
                self.snapshot.keep(flats, tensors, average_opt)
                state.health.keep(window.losses)
            if self.options.optimizer_state == "reset" or (decision.rollback and not average_opt):
                self.optimizer.state.clear()
        if decision.rollback and not self.optimizer.state and not isinstance(self.optimizer, torch.optim.SGD):
            # the rollback left the optimizer's state empty (a restore without it, or the clear above): warm
            # the rate up again (SGD's empty momentum buffer already restarts with short steps:
            # `HDETOptions.rollback_warmup`)
            state.warmup_left = self.options.rollback_warmup
        state.controller = replace(
            state.controller, offsets=dict(decision.offsets), widths=dict(decision.widths)
        )
        state.health.remember(window.losses, healthy, decision.rollback, restored)
        state.grad_scale.end_window(all(healthy) and not decision.rollback)
        self._append(state, record)
        return record

    def _append(self, state: HDETState, record: WindowRecord) -> None:
        state.records.append(record)
        if self.rank == 0 and self.options.on_record is not None:
            self.options.on_record(record)

    def gather(self, local: torch.Tensor) -> list[ReplicaStats]:
        if self.replicas > 1:
            parts = [torch.empty_like(local) for _ in range(self.replicas)]
            dist.all_gather(parts, local, group=self.options.process_group)
            rows = torch.stack(parts).cpu().tolist()  # the one host read of the window
        else:
            rows = [local.cpu().tolist()]
        sizes = [int(r[7]) for r in rows]
        if len(set(sizes)) > 1:  # the converge all-reduce would abort the process (gloo) or hang: say why
            raise RuntimeError(
                "HDET sync: the replicas' states to average differ in size across ranks (elements per "
                f"rank: {sizes}). Under fanout='local' with optimizer_state='average' (its default) a "
                "parameter that some ranks' batches did not use has optimizer state on the other ranks only; "
                "pass optimizer_state='keep', or fanout='shared_grad'. Otherwise the ranks' models or "
                "optimizers differ (parameters, floating-point buffers)."
            )
        return [
            ReplicaStats(
                mean_loss=r[0],
                first_loss=r[1],
                tail_loss=r[2],
                min_loss=r[3],
                params_finite=r[4] > 0.5,
                count=int(r[5]),
                slope=r[6],
            )
            for r in rows
        ]

    def window_input(
        self, state: HDETState, assignment: Assignment, stats: Sequence[ReplicaStats], healthy: Sequence[bool]
    ) -> Window:
        offsets = state.controller.offsets
        params = {}
        for hp in self.explore:
            base = self.base_of(hp, state)
            mults = assignment.all[hp.name]
            params[hp.name] = ParamWindow(
                scale=hp.scale,
                base=base,
                offset=offsets[hp.name],
                coords=tuple(spreads.coordinates(mults, "log" if hp.scale == "log" else "linear")),
                values=tuple(hp.value(base, offsets[hp.name], m) for m in mults),
                offset_bounds=hp.offset_bounds,
                peak=self.peak_of(hp) if self.peak_of is not None else math.nan,
                next_base=self.next_base_of(hp) if self.next_base_of is not None else math.nan,
            )
        # what trains, as every rank has it (the shared gradient needs the same on every rank)
        trainable = tuple(p.requires_grad for p in self.params)
        restart = self.trainable is not None and trainable != self.trainable
        self.trainable = trainable
        losses = tuple(s.mean_loss if (s.count and math.isfinite(s.mean_loss)) else math.nan for s in stats)
        slopes = [s.slope for s, ok in zip(stats, healthy, strict=True) if ok and math.isfinite(s.slope)]
        hyper = statistics.median_high(slopes) if slopes else math.nan
        return Window(
            window=state.window,
            step=state.steps_done,
            total_steps=self.total_steps,
            losses=losses,
            healthy=tuple(healthy),
            params=params,
            opening=assignment.opening,
            hypergradient=hyper,
            initial_loss=state.health.initial_loss,
            restart=restart,
        )

    def decide(self, state: HDETState, window: Window, record: WindowRecord) -> Decision:
        if self.options.decide is None:
            state.controller, decision = self.controller.decide(state.controller, window)
            return decision
        mine = self.options.decide(window, record) if self.rank == 0 else None
        if self.replicas == 1 and mine is not None:
            return mine
        return broadcast_decision(mine, self.codec, self.options.process_group)

    def rollback_weights(
        self, state: HDETState, stats: Sequence[ReplicaStats], healthy: Sequence[bool]
    ) -> list[float]:
        """Weights of a rollback without a snapshot: the plain mean of the healthy replicas (a lone survivor,
        `ControllerConfig.rollback_lone_survivor`), or where none is, of those with finite parameters."""
        if any(healthy):
            return [1.0 / sum(healthy) if ok else 0.0 for ok in healthy]
        finite = [s.params_finite for s in stats]
        if not any(finite):
            _diverged(state, "no replica has finite parameters and rollback='off' keeps no snapshot")
        return [1.0 / sum(finite) if ok else 0.0 for ok in finite]


def _diverged(state: HDETState, note: str) -> NoReturn:
    from hdet_ray.engine.scheduler import HDETDivergedError  # defined beside the public class it belongs to

    raise HDETDivergedError(state.window, state.steps_done, note)
