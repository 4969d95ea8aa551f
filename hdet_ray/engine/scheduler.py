"""`HDETOneCycleLR`: a drop-in `OneCycleLR` whose replicas explore, converge and steer.

    scheduler = HDETOneCycleLR(optimizer, max_lr=1e-3, total_steps=10_000)   # was: OneCycleLR(...)
    ...
    optimizer.step()
    scheduler.step(loss=loss)                                                # was: scheduler.step()

Every rank of the default process group is one replica. Between syncs each rank trains under its own
multiplier of every explored hyperparameter, value_r = base(t) * exp(offset) * rho_r, where base(t) is
OneCycle's value (`fanout='shared_grad'`: gradients are averaged at the end of every backward pass, as DDP
does, and each rank applies them with its own rate; `'local'`: no collective at all; a DDP `model` is held
in `no_sync()` either way). Every `sync_every` steps the replicas are
averaged and the controller moves the offsets (`engine/sync.py`). The pieces: `HDETOptions` (options.py),
`HDETState` (state.py), `WindowSync` (sync.py), `DecisionCodec` (codec.py), `average_gradients` (fanout.py),
`Snapshot` (rollback.py).
"""

from __future__ import annotations

import math
import sys
import warnings
from collections.abc import Callable, Sequence
from dataclasses import fields, replace
from typing import Any, Literal, cast

import torch
import torch.distributed as dist
from torch.optim.lr_scheduler import OneCycleLR

from hdet_ray.core.controller import DEFAULT_CONTROLLER, Controller, make_controller
from hdet_ray.core.health import HealthConfig
from hdet_ray.core.hyperparams import HyperParam
from hdet_ray.core.records import WindowRecord
from hdet_ray.engine import converge
from hdet_ray.engine import fanout as fanouts
from hdet_ray.engine.appliers import Applier, make_applier
from hdet_ray.engine.options import FANOUT_MODES, DecideFn, HDETOptions
from hdet_ray.engine.rollback import Snapshot
from hdet_ray.engine.state import HDETState
from hdet_ray.engine.sync import Assignment, WindowSync
from hdet_ray.engine.window import WindowLoss

__all__ = ["FANOUT_MODES", "DecideFn", "HDETDivergedError", "HDETOneCycleLR"]


class HDETDivergedError(RuntimeError):
    """Raised on every rank when the run rolled back more than `max_rollbacks` windows in a row, or when a
    window without a healthy replica cannot roll back (`rollback='off'`) and no replica is finite. The failed
    window is on `records` by then, and with a snapshot held (`rollback='memory'`) every rank's model is back
    at the last kept state."""

    def __init__(self, window: int, step: int, note: str) -> None:
        super().__init__(f"HDET run diverged at window {window} (step {step}): {note}")
        self.window, self.step = window, step
        self.note = note

    def __reduce__(self):
        return (type(self), (self.window, self.step, self.note))


def _refuse_sharded(params: list[torch.Tensor], model: torch.nn.Module | None) -> None:
    """HDET's replicas each hold the whole model and are averaged at every sync. Parameters sharded across
    the ranks (FSDP, FSDP2's `fully_shard`, tensor parallelism) hold a different slice on every rank, so the
    average would mix different weights (or fail deep inside DTensor's sharding rules): refuse them here.
    Such parameters exist only once their modules are imported, so nothing is imported here (DTensor's
    module alone takes half a second)."""
    tensor, fsdp = sys.modules.get("torch.distributed.tensor"), sys.modules.get("torch.distributed.fsdp")
    what = None
    if tensor is not None and any(isinstance(p, tensor.DTensor) for p in params):
        what = "DTensor parameters"
    elif any(type(p).__name__ == "FlatParameter" for p in params):  # FSDP's flattened shards
        what = "FSDP FlatParameters"
    elif (
        fsdp is not None
        and model is not None
        and any(isinstance(m, fsdp.FullyShardedDataParallel) for m in model.modules())
    ):
        what = "the parameters of a FullyShardedDataParallel module"
    if what is not None:
        raise ValueError(
            f"HDETOneCycleLR: the optimizer holds {what}, sharded across the ranks (FSDP, fully_shard or "
            "tensor parallelism). HDET's replicas each hold the whole model and are averaged at every "
            "sync; a shard is a different slice of the weights on every rank, so averaging them would mix "
            "different weights. Use HDET with plain data parallelism: no wrapper, or DistributedDataParallel."
        )


class HDETOneCycleLR(OneCycleLR):
    """OneCycleLR, with the same arguments and defaults, plus keyword-only HDET options (`HDETOptions`
    documents each; docs/engine.md has the table).

    `step()` keeps OneCycleLR's contract; the training loss arrives through `observe(loss)` or
    `step(loss=loss)`. With one process, and unless `health` is given, the values are OneCycleLR's.
    """

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        max_lr: float | list[float],
        total_steps: int | None = None,
        epochs: int | None = None,
        steps_per_epoch: int | None = None,
        pct_start: float = 0.3,
        anneal_strategy: Literal["cos", "linear"] = "cos",
        cycle_momentum: bool = True,
        base_momentum: float | list[float] = 0.85,
        max_momentum: float | list[float] = 0.95,
        div_factor: float = 25.0,
        final_div_factor: float = 1e4,
        three_phase: bool = False,
        last_epoch: int = -1,
        *,
        sync_every: int | None = None,
        explore: Sequence[HyperParam] | None = None,
        fanout: str = "shared_grad",
        controller: str | Controller = DEFAULT_CONTROLLER,
        controller_settings: dict[str, Any] | None = None,
        auto_lr: bool = True,
        health: HealthConfig | None = None,
        optimizer_state: str | None = None,
        rollback: str | None = None,
        rollback_warmup: int = 5,
        balanced: bool = False,
        hypergradient_span: int | None = None,
        opening_spread: float | None = None,
        model: torch.nn.Module | None = None,
        noise: float = 0.0,
        seed: int = 0,
        process_group: Any = None,
        decide: DecideFn | None = None,
        on_record: Callable[[WindowRecord], None] | None = None,
    ) -> None:
        # every keyword-only parameter is an HDETOptions field, checked there
        options = HDETOptions(**{k: v for k, v in locals().items() if k in _OPTION_FIELDS})
        self._ready = False
        own = set(self.__dict__)
        # fmt: off
        super().__init__(optimizer, max_lr, total_steps, epochs, steps_per_epoch, pct_start, anneal_strategy,
                         cycle_momentum, base_momentum, max_momentum, div_factor, final_div_factor,
                         three_phase, last_epoch)
        # fmt: on
        self._onecycle_keys = frozenset(self.__dict__) - own - {"optimizer"}  # what OneCycleLR saves

        distributed = dist.is_available() and dist.is_initialized()
        self.replicas = dist.get_world_size(process_group) if distributed else 1
        self.rank = dist.get_rank(process_group) if distributed else 0
        self.options = options.resolve(self.total_steps, self.replicas)
        self.explore: list[HyperParam] = list(self.options.explore or ())
        cycled = ("momentum", "betas[0]") if cycle_momentum else ()
        self._appliers: dict[str, Applier] = {
            hp.name: make_applier(hp, optimizer, model, cycled) for hp in self.explore if hp.target != "lr"
        }
        self._lr_groups: dict[str, list[int]] = {
            hp.name: list(hp.groups if hp.groups is not None else range(len(optimizer.param_groups)))
            for hp in self.explore
            if hp.target == "lr"
        }
        if isinstance(controller, Controller):
            self.controller = controller
        else:
            self.controller = make_controller(
                controller if auto_lr else "hold", **(controller_settings or {})
            )
        self._params = [p for g in optimizer.param_groups for p in g["params"]]
        if self.replicas > 1:
            _refuse_sharded(self._params, model)
        self.state = HDETState(
            controller=self.controller.initial_state([hp.name for hp in self.explore]),
            loss=WindowLoss(self.sync_every),
            base_now=[float(x) for x in self._last_lr],  # a tensor lr's clone, read once here
        )
        self._snapshot = Snapshot(self.options.rollback or "off")
        self._sync = WindowSync(options=self.options, replicas=self.replicas, rank=self.rank,
                                params=self._params, optimizer=optimizer, controller=self.controller,
                                snapshot=self._snapshot, base_of=self._base_of,
                                total_steps=self.total_steps, peak_of=self._peak_of,
                                next_base_of=self._next_base_of)  # fmt: skip
        self._held_ddp: fanouts.HoldDDP | None = None
        self._grad_hook = self._fanout_hook()
        self._checked_ddp = False
        # the window hypergradient (what the evidence controller reads by default): the window's start state
        # is kept (4 bytes per parameter) and the gradient of its last step compared with the step so far
        self._measuring = self.replicas > 1 and self.controller.wants_hypergradient
        self._window_start: list[torch.Tensor] | None = None
        self._slope_hook = (
            self.optimizer.register_step_pre_hook(self._measure_slope) if self._measuring else None
        )
        self._start()

    def _fanout_hook(self) -> fanouts.AfterBackward | None:
        """shared_grad: average the gradients at the end of every backward pass. A DDP `model` is held in
        `no_sync()` (either fan-out): its plain all-reduce would let one unstable replica's gradient into
        every replica's step, and under `local` it would average what should stay apart."""
        self._hold_ddp()
        if self.options.fanout == "shared_grad" and self.replicas > 1:
            return fanouts.AfterBackward(self._params, self._average_gradients)
        return None

    def _hold_ddp(self) -> None:
        """Hold the `model` in `no_sync()` if it is DDP (once; several processes only)."""
        model = self.options.model
        if self.replicas > 1 and fanouts.is_ddp(model) and self._held_ddp is None:
            self._held_ddp = fanouts.HoldDDP(model)

    def _start(self) -> None:
        """Every replica starts where rank 0 does (as DDP does), plus its own noise if asked."""
        start = self._sync.tensors(False)
        converge.broadcast_state(start, group=self.options.process_group)
        if self._snapshot.mode == "memory":  # with 'off' no copy is made at all
            self._snapshot.keep(converge.pack(start), start, False)
        if self.options.noise > 0.0:
            self._add_noise(self.options.noise)
        self._assignment = self._draw()
        self._keep_window_start()
        self._ready = True
        self._write_values()

    def _span_start(self) -> int:
        """The step of the window (0-based) before which the hypergradient's span begins."""
        last = cast(int, self.options.sync_every) - 1  # resolved: an int
        span = self.options.hypergradient_span
        return 0 if span is None else max(0, last - span)

    def _keep_window_start(self, in_window: int = 0) -> None:
        """Keep what the hypergradient's step is measured from, if its span starts at `in_window`."""
        if self._measuring and self._span_start() == in_window:
            self._window_start = [p.detach().clone() for p in self._params]

    def _measure_slope(self, optimizer, args, kwargs) -> None:
        """Before the window's last step: -cos(gradient, the window's step so far, or over its last
        `hypergradient_span` steps; that span's start is kept before its first step) on this rank. Runs after
        the `shared_grad` average (which ends every backward pass), so every rank reads the same
        gradient. Only tensor ops: read at the sync with the losses."""
        last = cast(int, self.options.sync_every) - 1  # resolved: an int
        if self.state.in_window > 0:  # a span that starts inside the window (at 0: kept at the sync)
            self._keep_window_start(self.state.in_window)
        start = self._window_start
        if start is None or self.state.in_window != last:
            return
        terms = []
        for p, p0 in zip(self._params, start, strict=True):
            if p.grad is None:
                continue
            g, d = p.grad.detach().double(), (p.detach() - p0).double()
            terms.append(torch.stack([(g * d).sum(), (g * g).sum(), (d * d).sum()]).to(start[0].device))
        if not terms:
            return
        dot, gg, dd = torch.stack(terms).sum(dim=0)
        self.state.slope = -dot / (gg * dd).sqrt().clamp_min(1e-300)  # 0-dim; NaN from a NaN gradient

    # -- the per-step path ------------------------------------------------------------------------------
    def observe(self, loss: torch.Tensor | float) -> None:
        """Record the current step's training loss (a tensor is accumulated on its device, never read on
        the host here). Does not advance the schedule: call it before `step()`, e.g. from a callback."""
        if isinstance(loss, torch.Tensor) and loss.numel() != 1:
            raise ValueError(
                f"loss must be the step's scalar training loss (one element), got a tensor of shape "
                f"{tuple(loss.shape)}: pass the loss you call backward() on, e.g. loss.mean()"
            )
        self.state.loss.add(loss, self.state.in_window)

    def step(self, epoch: int | None = None, *, loss: torch.Tensor | float | None = None) -> None:
        """Advance one step, as OneCycleLR does; `loss=` first calls `observe(loss)`.

        A positional number is OneCycleLR's deprecated `epoch` (torch warns; the schedule jumps to it). The
        HDET window counts calls either way.
        """
        if not self._ready:  # OneCycleLR's constructor takes its first step before HDET exists
            super().step()
            return
        if epoch is not None:
            _check_epoch(epoch)
        if loss is not None:
            self.observe(loss)
        st = self.state
        st.in_window += 1
        st.steps_done += 1
        if st.in_window == self.options.sync_every:
            self._end_window()
        if epoch is None:
            super().step()
        else:
            super().step(epoch)

    def get_lr(self) -> list[float | torch.Tensor]:
        base = super().get_lr()  # OneCycle's values; also cycles momentum
        if not self._ready:
            return base
        self.state.base_now = cast(list[float], list(base))  # floats unless max_lr was given as tensors
        lrs = self._lr_values(base)
        if self.state.warmup_left > 0:  # the rate's warm-up after a rollback: this step's share of it taken
            self.state.warmup_left -= 1
        return lrs

    def _lr_values(self, base: Sequence[Any]) -> list[Any]:
        lrs = list(base)
        offsets, mine = self.state.controller.offsets, self._assignment.mine
        for hp in self.explore:
            if hp.target != "lr":
                applier = self._appliers[hp.name]
                applier.apply([hp.value(b, offsets[hp.name], mine[hp.name]) for b in applier.bases()])
                continue
            for g in self._lr_groups[hp.name]:
                lrs[g] = hp.value(base[g], offsets[hp.name], mine[hp.name])
        left = self.state.warmup_left
        if left > 0:  # after a rollback that emptied the optimizer's state (`rollback_warmup`)
            share = (self.options.rollback_warmup - left + 1) / self.options.rollback_warmup
            lrs = [lr * share for lr in lrs]
        return lrs

    def _write_values(self) -> None:
        """Write the current values outside `step()` (a tensor lr is filled in place, as torch does)."""
        for group, lr in zip(self.optimizer.param_groups, self._lr_values(self.state.base_now), strict=True):
            if isinstance(group["lr"], torch.Tensor):
                group["lr"].fill_(lr)
            else:
                group["lr"] = lr
        self._last_lr = [
            g["lr"].clone() if isinstance(g["lr"], torch.Tensor) else g["lr"]
            for g in self.optimizer.param_groups
        ]

    def _peak_of(self, hp: HyperParam) -> float:
        """The schedule's largest base value (the group's OneCycle `max_lr`) for the rate; NaN otherwise."""
        if hp.target != "lr":
            return math.nan
        return float(self.optimizer.param_groups[self._lr_groups[hp.name][0]]["max_lr"])

    def _next_base_of(self, hp: HyperParam) -> float:
        """The schedule's base value for the rate at the next window's end (read at a window's end, when the
        base is the one of step `last_epoch`); NaN for other hyperparameters."""
        if hp.target != "lr":
            return math.nan
        step = min(self.last_epoch + self.sync_every, self.total_steps)
        return self._onecycle_at(self._lr_groups[hp.name][0], step)

    def _onecycle_at(self, index: int, step: int) -> float:
        """OneCycle's base value for param group `index` at `step`, from the phases its constructor set."""
        group, start, phases = self.optimizer.param_groups[index], 0.0, self._schedule_phases
        for i, phase in enumerate(phases):
            end = phase["end_step"]
            if step <= end or i == len(phases) - 1:
                return float(
                    self._anneal_func(
                        group[phase["start_lr"]], group[phase["end_lr"]], (step - start) / (end - start)
                    )
                )
            start = end
        return math.nan

    def _base_of(self, hp: HyperParam, state: HDETState) -> float:
        if hp.target == "lr":
            return state.base_now[self._lr_groups[hp.name][0]]
        return self._appliers[hp.name].bases()[0]

    def _average_gradients(self) -> None:
        if self._assignment.opening:
            # a range test 10x wide would average the top replica's gradient into every replica's update
            # (first-window losses of 1e6 and more): in the opening window the replicas train apart
            return
        scale = self.state.grad_scale
        shared = [p for p in self._params if p.requires_grad]  # what every rank trains (unfrozen ones too)
        norms = fanouts.average_gradients(shared, self.options.process_group, floor=scale.floor)
        if norms is not None:
            scale.observe(norms)
        if not self._checked_ddp and norms is not None:
            # the first step only: equal gradients on every rank mean something (DDP) averaged them already
            self._checked_ddp = True
            if fanouts.already_averaged(norms):
                warnings.warn(
                    "HDETOneCycleLR(fanout='shared_grad'): every rank's gradient was identical before the "
                    "scheduler averaged it, so it was averaged already (a DistributedDataParallel module?), "
                    "and it is now all-reduced twice. Pass model=<the DDP-wrapped module>: HDET then holds "
                    "DDP's all-reduce off and averages the gradients once itself.",
                    UserWarning,
                    stacklevel=2,
                )

    def annotate(self, **metrics: float) -> None:
        """Attach metrics (a validation score, wall time) to the next window's record."""
        self.state.pending.update({k: float(v) for k, v in metrics.items()})

    def finish(self) -> WindowRecord | None:
        """Converge a last, partial window (call after the final step when steps % sync_every != 0)."""
        if self.state.in_window == 0:
            return None
        self._end_window()
        return self.records[-1]

    def _end_window(self) -> None:
        if self.state.window == 0 and self.state.loss.count == 0 and self.replicas > 1:
            warnings.warn(
                f"HDETOneCycleLR: no training loss reached the scheduler in its first window "
                f"({self.sync_every} steps). Pass it to every step, scheduler.step(loss=loss) (or call "
                "scheduler.observe(loss) before step()): without it the controller cannot move the rate and "
                "the health checks see the parameters only.",
                UserWarning,
                stacklevel=3,
            )
        self._sync(self.state, self._assignment)
        self._keep_window_start()
        self.state.window += 1
        self.state.in_window = 0
        self.state.loss.reset()
        self._assignment = self._draw()

    def _draw(self) -> Assignment:
        return Assignment.draw(
            self.options, self.replicas, self.rank, self.state.window, self.state.controller.widths
        )

    def _add_noise(self, nu: float) -> None:
        gen = torch.Generator(device="cpu")
        gen.manual_seed((self.options.seed * 1_000_003 + self.rank) & 0x7FFFFFFFFFFFFFFF)
        with torch.no_grad():
            sq = sum(float(p.detach().double().pow(2).sum()) for p in self._params)
            d = sum(p.numel() for p in self._params)
            std = nu * math.sqrt(sq) / math.sqrt(max(d, 1))
            for p in self._params:
                p.add_(torch.randn(p.shape, generator=gen, dtype=p.dtype).to(p.device) * std)

    # -- what a user reads ------------------------------------------------------------------------------
    @property
    def window(self) -> int:
        """Windows completed so far."""
        return self.state.window

    @property
    def steps_done(self) -> int:
        return self.state.steps_done

    @property
    def records(self) -> list[WindowRecord]:
        """The trajectory: one `WindowRecord` per completed window."""
        return self.state.records

    @property
    def sync_every(self) -> int:
        return int(self.options.sync_every or 1)

    @property
    def model(self) -> torch.nn.Module | None:
        return self.options.model

    @property
    def offsets(self) -> dict[str, float]:
        """The controller's current offset of every explored hyperparameter (log units on a log scale)."""
        return dict(self.state.controller.offsets)

    @property
    def multipliers(self) -> dict[str, float]:
        """This rank's multiplier rho_r of every explored hyperparameter in the current window."""
        return dict(self._assignment.mine)

    @property
    def rollback_bytes(self) -> int:
        """Bytes the in-memory rollback snapshot holds now (0 with `rollback='off'`)."""
        return self._snapshot.nbytes

    def centre(self, name: str = "lr") -> float:
        """The value the replicas spread around now: the schedule's value with the controller's offset
        applied (for the rate: OneCycle's rate of the hyperparameter's first param group x `factor`)."""
        hp = self._hyperparam(name)
        return hp.value(self._base_of(hp, self.state), self.state.controller.offsets[name], 1.0)

    def factor(self, name: str = "lr") -> float:
        """The controller's current factor on the schedule: `centre / base` (exp(offset) on a log scale)."""
        hp = self._hyperparam(name)
        base = self._base_of(hp, self.state)
        if hp.scale == "log" and hp.bounds is None:
            return math.exp(self.state.controller.offsets[name])
        return self.centre(name) / base if base else math.nan

    def _hyperparam(self, name: str) -> HyperParam:
        for hp in self.explore:
            if hp.name == name:
                return hp
        raise KeyError(
            f"{name!r} is not an explored hyperparameter; explored: {[hp.name for hp in self.explore]}"
        )

    # -- state ------------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """OneCycleLR's entries plus 'hdet' (`HDETState.state_dict()` and the applier bases). No model
        weights: the rollback snapshot stays out of checkpoints."""
        out = {k: self.__dict__[k] for k in self._onecycle_keys if k in self.__dict__}
        out["hdet"] = {
            **self.state.state_dict(),
            "appliers": {k: a.state_dict() for k, a in self._appliers.items()},
        }
        return out

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load a state saved by `state_dict()`, or a plain `OneCycleLR`'s: then the schedule continues from
        its position as HDET, starting a fresh window there."""
        state = dict(state_dict)
        hdet = state.pop("hdet", None)
        self.__dict__.update(state)
        if hdet is None:
            self.state.steps_done = int(self.last_epoch)
            self.state.window, self.state.in_window = 0, 0
            self.state.loss.reset()
            self.state.base_now = [float(x) for x in self._last_lr]
        else:
            device = self._params[0].device if self._params else torch.device("cpu")
            self.state.load_state_dict(hdet, device)
            for k, a in self._appliers.items():
                a.load_state_dict(hdet["appliers"][k])
        self._snapshot.keep_at_next_step(self.optimizer, lambda: self._sync.tensors(False))
        self.state.health.kept_loss = self.state.health.previous_loss  # that snapshot: the resumed state
        self._window_start = None  # the loaded weights arrive after this: the next window starts afresh
        self._assignment = self._draw()
        self._write_values()

    def use_ddp(self, model: torch.nn.Module) -> None:
        """The model was wrapped in DDP after this scheduler was built (trainers do that): converge the
        wrapper at each sync and hold it in `no_sync()`, so that the gradients are averaged once, by the
        scheduler's average that one unstable replica cannot poison, not by DDP's plain one."""
        if not fanouts.is_ddp(model):
            raise TypeError(f"use_ddp: expected a DistributedDataParallel module, got {type(model).__name__}")
        self.options = replace(self.options, model=model)
        self._sync.options = self.options
        self._hold_ddp()

    def close(self) -> None:
        """Remove the hooks (the `shared_grad` average, the hypergradient, a pending rollback snapshot),
        give a held DDP module its gradient sync back and drop the window's start state."""
        for hook in (self._grad_hook, self._slope_hook, self._held_ddp):
            if hook is not None:
                hook.remove()
        self._grad_hook = self._slope_hook = self._held_ddp = None
        self._window_start = None
        self._snapshot.close()


_OPTION_FIELDS = frozenset(f.name for f in fields(HDETOptions))


def _check_epoch(epoch: object) -> None:
    if (isinstance(epoch, torch.Tensor) and epoch.is_floating_point()) or (
        isinstance(epoch, float) and not epoch.is_integer()
    ):
        raise TypeError(
            f"HDETOneCycleLR.step({epoch!r}): a positional argument is OneCycleLR's deprecated "
            "epoch (a step index); pass the training loss as step(loss=...) or observe(loss)"
        )
