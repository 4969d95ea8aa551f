"""`HDETOneCycleLR`: a drop-in `OneCycleLR` whose replicas explore, converge and steer.

    scheduler = HDETOneCycleLR(optimizer, max_lr=1e-3, total_steps=10_000)   # was: OneCycleLR(...)
    ...
    optimizer.step()
    scheduler.step(loss)                                                     # was: scheduler.step()

Every rank of the default process group is one replica. Between syncs each rank trains under its own
multiplier of every explored hyperparameter (`fanout='local'`: no collective at all; `'shared_grad'`:
gradients are averaged every step, as DDP does, and each rank applies them with its own rate). Every
`sync_every` steps: the ranks' window losses are all-gathered, a controller turns them into a Decision,
and all ranks' parameters (and buffers, and optimizer state under 'average') are replaced by the
Decision's weighted mean in one flat all-reduce per dtype/device. See DESIGN.md section 2.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import torch
import torch.distributed as dist
from torch.optim.lr_scheduler import OneCycleLR

from hdet_ray.core import spread as spreads
from hdet_ray.core.controller import (
    DEFAULT_CONTROLLER,
    Controller,
    ControllerState,
    Decision,
    ParamWindow,
    Window,
    make_controller,
)
from hdet_ray.core.health import HealthConfig, ReplicaStats, assess, start_loss
from hdet_ray.core.hyperparams import HyperParam, learning_rate
from hdet_ray.core.records import WindowRecord, complete_record, draft_record
from hdet_ray.engine import converge
from hdet_ray.engine.appliers import Applier, make_applier
from hdet_ray.engine.window import WindowLoss

FANOUT_MODES = ("local", "shared_grad")
DecideFn = Callable[[Window, WindowRecord], Decision]


class HDETDivergedError(RuntimeError):
    """Raised on every rank when the run rolled back more than `max_rollbacks` windows in a row."""

    def __init__(self, window: int, step: int, note: str) -> None:
        super().__init__(f"HDET run diverged at window {window} (step {step}): {note}")
        self.window, self.step = window, step
        self.note = note

    def __reduce__(self):
        return (type(self), (self.window, self.step, self.note))


class HDETOneCycleLR(OneCycleLR):
    """OneCycleLR, with the same arguments and defaults, plus keyword-only HDET options.

    Args (HDET, keyword-only):
        sync_every: T, steps between syncs (converge + controller decision); default min(50, total_steps).
        explore: the hyperparameters to explore (default: the learning rate, log spread factor 2).
        fanout: 'shared_grad' (the default, the paper's: gradients averaged every step over the ranks whose
            gradient is finite, each rank applies them with its own rate; with a DDP-wrapped `model`, DDP
            averages them) or 'local' (replicas independent between syncs: no collective at all).
        controller: 'slope', 'paper', 'hold', or a `Controller` instance.
        controller_settings: keyword settings for a controller given by name.
        auto_lr: False holds every offset (HDET without auto-LR: spread + averaging only).
        health: when a replica counts as unhealthy (`HealthConfig`).
        optimizer_state: 'average' | 'keep' | 'reset' at each sync (default: 'keep' under shared_grad, whose
            ranks' moments are identical anyway, else 'average').
        balanced: assign multipliers so explored hyperparameters are uncorrelated across replicas.
        opening_spread: if set, the first window runs the learning rate over a log spread of this factor
            (a range test across replicas) and the controller centres on the best replica.
        model: the module, for buffers (BatchNorm statistics), module-attribute targets and `noise`.
        noise: nu of the warm noisy start (per-rank Gaussian noise of std nu * ||theta|| / sqrt(d)).
        seed: the job seed; permutations and noise derive from it. The global RNG is never touched.
        process_group: the replicas' group (default: the default group, or one replica without one).
        decide: called on rank 0 instead of the in-process controller (the Ray layer's actor); its
            Decision is broadcast to all ranks.
        on_record: called on rank 0 with every completed `WindowRecord`.
    """

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        max_lr: float | list[float],
        total_steps: int | None = None,
        epochs: int | None = None,
        steps_per_epoch: int | None = None,
        pct_start: float = 0.3,
        anneal_strategy: str = "cos",
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
        balanced: bool = False,
        opening_spread: float | None = None,
        model: torch.nn.Module | None = None,
        noise: float = 0.0,
        seed: int = 0,
        process_group: Any = None,
        decide: DecideFn | None = None,
        on_record: Callable[[WindowRecord], None] | None = None,
    ) -> None:
        self._h_ready = False
        super().__init__(optimizer, max_lr, total_steps, epochs, steps_per_epoch, pct_start, anneal_strategy,
                         cycle_momentum, base_momentum, max_momentum, div_factor, final_div_factor,
                         three_phase, last_epoch)
        if sync_every is None:
            sync_every = min(50, self.total_steps)
        if not isinstance(sync_every, int) or not 1 <= sync_every <= self.total_steps:
            raise ValueError(f"sync_every must be an integer in [1, total_steps={self.total_steps}], got {sync_every!r}")
        if fanout not in FANOUT_MODES:
            raise ValueError(f"fanout must be one of {FANOUT_MODES}, got {fanout!r}")
        if optimizer_state is None:  # shared_grad ranks see identical gradients: their moments already agree
            optimizer_state = "keep" if fanout == "shared_grad" else "average"
        if optimizer_state not in converge.OPTIMIZER_STATE_POLICIES:
            raise ValueError(f"optimizer_state must be one of {converge.OPTIMIZER_STATE_POLICIES}, "
                             f"got {optimizer_state!r}")
        if opening_spread is not None and not opening_spread >= 1.0:
            raise ValueError(f"opening_spread must be >= 1 (a log-spread factor), got {opening_spread}")
        if not noise >= 0.0:
            raise ValueError(f"noise must be >= 0, got {noise}")

        self._h_group = process_group
        distributed = dist.is_available() and dist.is_initialized()
        self.replicas = dist.get_world_size(process_group) if distributed else 1
        self.rank = dist.get_rank(process_group) if distributed else 0
        self.sync_every, self.fanout, self.seed = sync_every, fanout, int(seed)
        self.optimizer_state, self.balanced, self.opening_spread = optimizer_state, balanced, opening_spread
        self.health = health or HealthConfig()
        self.model, self._h_decide, self._h_on_record = model, decide, on_record

        explore = list(explore) if explore is not None else [learning_rate()]
        names = [hp.name for hp in explore]
        if len(set(names)) != len(names):
            raise ValueError(f"explore: hyperparameter names must be unique, got {names}")
        if not any(hp.target == "lr" for hp in explore):
            explore.insert(0, HyperParam(name="lr", target="lr", size=1.0))  # the rate a rollback cuts
        self.explore: list[HyperParam] = explore
        cycled = ("momentum", "betas[0]") if cycle_momentum else ()
        self._h_appliers: dict[str, Applier] = {
            hp.name: make_applier(hp, optimizer, model, cycled) for hp in explore if hp.target != "lr"}
        self._h_lr_groups: dict[str, list[int]] = {
            hp.name: list(hp.groups if hp.groups is not None else range(len(optimizer.param_groups)))
            for hp in explore if hp.target == "lr"}

        if isinstance(controller, Controller):
            if controller_settings:
                raise ValueError("controller_settings applies only to a controller given by name")
            self.controller = controller
        else:
            self.controller = make_controller(controller if auto_lr else "hold", **(controller_settings or {}))
        self._h_cstate: ControllerState = self.controller.initial_state([hp.name for hp in explore])

        self._h_params = [p for g in optimizer.param_groups for p in g["params"]]
        self.window = 0
        self.steps_done = 0
        self._h_in_window = 0
        self._h_loss = WindowLoss(sync_every)
        self.records: list[WindowRecord] = []
        self._h_pending: dict[str, float] = {}
        self._h_previous_loss = math.nan
        self._h_best_loss = math.inf
        self._h_initial_loss = math.nan  # the first window's starting loss: where an untrained model sits
        self._h_grad_hook = None
        if fanout == "shared_grad" and self.replicas > 1 and not _is_ddp(model):
            self._h_grad_hook = optimizer.register_step_pre_hook(self._average_gradients)

        start = converge.state_tensors(self._h_params, model, None)
        converge.broadcast_state(start, group=process_group)  # every replica starts where rank 0 does
        self._h_snapshot = (converge.pack(start), _signature(start), False)
        if noise > 0.0:
            self._add_noise(noise)
        self._h_base_now: list[float] = list(self._last_lr)
        self._assign(self.window)
        self._h_ready = True
        self._write_values()

    # -- the per-step path ------------------------------------------------------------------------------
    def step(self, loss: torch.Tensor | float | None = None) -> None:  # type: ignore[override]
        """Advance one step. Pass the step's training loss (a tensor is never read on the host here)."""
        if not self._h_ready:
            super().step()
            return
        if loss is not None:
            self._h_loss.add(loss, self._h_in_window)
        self._h_in_window += 1
        self.steps_done += 1
        if self._h_in_window == self.sync_every:
            self._sync()
        super().step()

    def observe(self, loss: torch.Tensor | float) -> None:
        """Record the current step's training loss without advancing (for frameworks that call `step()`)."""
        self._h_loss.add(loss, self._h_in_window)

    def get_lr(self) -> list[float]:
        base = super().get_lr()  # OneCycle's values; also cycles momentum
        if not self._h_ready:
            return base
        self._h_base_now = list(base)
        return self._lr_values(base)

    def _lr_values(self, base: Sequence[float]) -> list[float]:
        lrs = list(base)
        offsets = self._h_cstate.offsets
        for hp in self.explore:
            if hp.target != "lr":
                self._h_appliers[hp.name].apply(
                    [hp.value(b, offsets[hp.name], self._h_mult[hp.name])
                     for b in self._h_appliers[hp.name].bases()])
                continue
            for g in self._h_lr_groups[hp.name]:
                lrs[g] = hp.value(base[g], offsets[hp.name], self._h_mult[hp.name])
        return lrs

    def _write_values(self) -> None:
        for group, lr in zip(self.optimizer.param_groups, self._lr_values(self._h_base_now)):
            group["lr"] = lr
        self._last_lr = [g["lr"] for g in self.optimizer.param_groups]

    def _assign(self, window: int) -> None:
        """Multipliers of every replica for `window`, and this rank's."""
        n = self.replicas
        names = [hp.name for hp in self.explore]
        if self.balanced and len(names) > 1:
            perms = spreads.balanced_permutations(n, names, self.seed, window)
        else:
            perms = {name: spreads.permutation(n, self.seed, window, name) for name in names}
        self._h_opening = window == 0 and self.opening_spread is not None and n > 1
        self._h_all_mults: dict[str, list[float]] = {}
        for hp in self.explore:
            if self._h_opening and hp.target == "lr":
                levels = spreads.log_spread(n, self.opening_spread)
            else:
                levels = spreads.spread(hp.spread, n, hp.size)
            self._h_all_mults[hp.name] = [levels[perms[hp.name][r]] for r in range(n)]
        self._h_mult = {name: m[self.rank] for name, m in self._h_all_mults.items()}

    def _average_gradients(self, optimizer, args, kwargs) -> None:
        """shared_grad: every rank's gradient becomes the ranks' mean (see `converge.average_gradients`).

        Not in the opening window: a range test 10x wide would average the top replica's gradient into every
        replica's update (first-window losses of 1e6 and more); the replicas train apart, as under `local`.
        """
        if self._h_opening:
            return
        converge.average_gradients([p.grad for p in self._h_params if p.grad is not None], self._h_group)

    def annotate(self, **metrics: float) -> None:
        """Attach metrics (a validation score, wall time) to the next window's record."""
        self._h_pending.update({k: float(v) for k, v in metrics.items()})

    def finish(self) -> WindowRecord | None:
        """Converge a last, partial window (call after the final step when steps % sync_every != 0)."""
        if self._h_in_window == 0:
            return None
        self._sync()
        return self.records[-1]

    # -- the sync ---------------------------------------------------------------------------------------
    def _sync(self) -> None:
        average_opt = self.optimizer_state == "average"
        tensors = converge.state_tensors(self._h_params, self.model, self.optimizer if average_opt else None)
        flats = converge.pack(tensors)
        device = flats[0].device if flats else torch.device("cpu")
        local = self._h_loss.stats(device, converge.params_finite(self._h_params))
        stats = self._gather(local)
        if not math.isfinite(self._h_initial_loss):
            self._h_initial_loss = start_loss(stats)
        healthy, reasons = assess(stats, self.health, self._h_previous_loss, self._h_best_loss,
                                  self._h_initial_loss)
        window = self._window_input(stats, healthy)
        record = draft_record(window, stats, reasons, self._h_all_mults, start_loss(stats))
        record.metrics.update(self._h_pending)
        self._h_pending = {}
        decision = self._decide(window, record)
        complete_record(record, decision)
        if decision.diverged:
            raise HDETDivergedError(self.window, self.steps_done, decision.note)
        if decision.rollback:
            self._restore()
        else:
            converge.weighted_average(flats, decision.weights[self.rank], group=self._h_group)
            converge.unpack(flats, tensors)
            if all(healthy):  # survivors of a window that killed replicas may be damaged: keep the older state
                self._h_snapshot = (flats, _signature(tensors), average_opt)
            if self.optimizer_state == "reset":
                self.optimizer.state.clear()
        self._h_cstate = _with_offsets(self._h_cstate, decision.offsets)
        kept = sorted(x for x, ok in zip(window.losses, healthy) if ok and math.isfinite(x))
        if kept and not decision.rollback:
            self._h_previous_loss = kept[len(kept) // 2]
            self._h_best_loss = min(self._h_best_loss, self._h_previous_loss)
        self.records.append(record)
        if self.rank == 0 and self._h_on_record is not None:
            self._h_on_record(record)
        self.window += 1
        self._h_in_window = 0
        self._h_loss.reset()
        self._assign(self.window)

    def _gather(self, local: torch.Tensor) -> list[ReplicaStats]:
        if self.replicas > 1:
            parts = [torch.empty_like(local) for _ in range(self.replicas)]
            dist.all_gather(parts, local, group=self._h_group)
            rows = torch.stack(parts).cpu().tolist()  # the one host read of the window
        else:
            rows = [local.cpu().tolist()]
        return [ReplicaStats(mean_loss=r[0], first_loss=r[1], tail_loss=r[2], min_loss=r[3],
                             params_finite=r[4] > 0.5, count=int(r[5])) for r in rows]

    def _window_input(self, stats: Sequence[ReplicaStats], healthy: Sequence[bool]) -> Window:
        offsets = self._h_cstate.offsets
        params = {}
        for hp in self.explore:
            if hp.target == "lr":
                base = self._h_base_now[self._h_lr_groups[hp.name][0]]
            else:
                base = self._h_appliers[hp.name].bases()[0]
            mults = self._h_all_mults[hp.name]
            params[hp.name] = ParamWindow(
                scale=hp.scale, base=base, offset=offsets[hp.name],
                coords=tuple(spreads.coordinates(mults, "log" if hp.scale == "log" else "linear")),
                values=tuple(hp.value(base, offsets[hp.name], m) for m in mults),
                offset_bounds=hp.offset_bounds)
        losses = tuple(s.mean_loss if (s.count and math.isfinite(s.mean_loss)) else math.nan for s in stats)
        return Window(window=self.window, step=self.steps_done, total_steps=self.total_steps,
                      losses=losses, healthy=tuple(healthy), params=params, opening=self._h_opening)

    def _decide(self, window: Window, record: WindowRecord) -> Decision:
        if self._h_decide is None:
            self._h_cstate, decision = self.controller.decide(self._h_cstate, window)
            return decision
        names = [hp.name for hp in self.explore]
        decision = self._h_decide(window, record) if self.rank == 0 else None
        if self.replicas == 1:
            return decision
        return _broadcast_decision(decision, names, self.replicas, self._h_group)

    def _restore(self) -> None:
        flats, signature, with_opt = self._h_snapshot
        tensors = converge.state_tensors(self._h_params, self.model, self.optimizer if with_opt else None)
        if _signature(tensors) != signature:
            raise RuntimeError("HDET rollback: the model's state no longer matches the snapshot layout")
        converge.unpack([f.clone() for f in flats], tensors)
        if not with_opt:
            self.optimizer.state.clear()

    def _add_noise(self, nu: float) -> None:
        gen = torch.Generator(device="cpu")
        gen.manual_seed((self.seed * 1_000_003 + self.rank) & 0x7FFFFFFFFFFFFFFF)
        with torch.no_grad():
            sq = sum(float(p.detach().double().pow(2).sum()) for p in self._h_params)
            d = sum(p.numel() for p in self._h_params)
            std = nu * math.sqrt(sq) / math.sqrt(max(d, 1))
            for p in self._h_params:
                p.add_(torch.randn(p.shape, generator=gen, dtype=p.dtype).to(p.device) * std)

    # -- state ------------------------------------------------------------------------------------------
    @property
    def offsets(self) -> dict[str, float]:
        """The controller's current offset of every explored hyperparameter."""
        return dict(self._h_cstate.offsets)

    @property
    def multipliers(self) -> dict[str, float]:
        """This rank's multiplier of every explored hyperparameter in the current window."""
        return dict(self._h_mult)

    def state_dict(self) -> dict[str, Any]:
        base = {k: v for k, v in self.__dict__.items()
                if k != "optimizer" and not k.startswith("_h_") and k not in _HDET_ATTRS}
        base["hdet"] = {
            "window": self.window,
            "steps_done": self.steps_done,
            "in_window": self._h_in_window,
            "loss": self._h_loss.state_dict(),
            "controller": self._h_cstate.to_dict(),
            "records": [r.to_dict() for r in self.records],
            "appliers": {k: a.state_dict() for k, a in self._h_appliers.items()},
            "base_now": list(self._h_base_now),
            "pending": dict(self._h_pending),
            "previous_loss": self._h_previous_loss,
            "best_loss": self._h_best_loss,
            "initial_loss": self._h_initial_loss,
            "snapshot": ([f.detach().cpu().clone() for f in self._h_snapshot[0]],
                         self._h_snapshot[1], self._h_snapshot[2]),
        }
        return base

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        state = dict(state_dict)
        h = state.pop("hdet")
        self.__dict__.update(state)
        self.window, self._h_in_window = int(h["window"]), int(h["in_window"])
        self.steps_done = int(h["steps_done"])
        device = self._h_params[0].device if self._h_params else torch.device("cpu")
        self._h_loss.load_state_dict(h["loss"], device)
        self._h_cstate = ControllerState.from_dict(h["controller"])
        self.records = [WindowRecord.from_dict(r) for r in h["records"]]
        for k, a in self._h_appliers.items():
            a.load_state_dict(h["appliers"][k])
        self._h_base_now = list(h["base_now"])
        self._h_pending = dict(h["pending"])
        self._h_previous_loss = float(h["previous_loss"])
        self._h_best_loss = float(h["best_loss"])
        self._h_initial_loss = float(h.get("initial_loss", math.nan))
        flats, signature, with_opt = h["snapshot"]
        targets = converge.pack(converge.state_tensors(self._h_params, self.model, None))
        dev = targets[0].device if targets else device
        self._h_snapshot = ([f.to(dev) for f in flats], [tuple(s) for s in signature], bool(with_opt))
        self._assign(self.window)
        self._write_values()

    def close(self) -> None:
        """Remove the gradient hook of `shared_grad` mode."""
        if self._h_grad_hook is not None:
            self._h_grad_hook.remove()
            self._h_grad_hook = None


_HDET_ATTRS = {"replicas", "rank", "sync_every", "fanout", "seed", "optimizer_state", "balanced",
               "opening_spread", "health", "model", "explore", "controller", "window", "records", "steps_done"}


def _signature(tensors: Sequence[torch.Tensor]) -> list[tuple]:
    return [(tuple(t.shape), str(t.dtype)) for t in tensors]


def _with_offsets(state: ControllerState, offsets: dict[str, float]) -> ControllerState:
    return replace(state, offsets=dict(offsets))


def _is_ddp(model: torch.nn.Module | None) -> bool:
    return isinstance(model, torch.nn.parallel.DistributedDataParallel)


def _broadcast_decision(decision: Decision | None, names: list[str], n: int, group) -> Decision:
    """Rank 0's Decision to every rank as one float64 tensor: offsets, weights, flags, signal, velocity."""
    k = len(names)
    buf = torch.zeros(3 * k + n + 4, dtype=torch.float64)
    if decision is not None:
        w = list(decision.weights) if decision.weights else [math.nan] * n
        buf[:] = torch.tensor(
            [decision.offsets[x] for x in names] + w
            + [float(decision.rollback), float(decision.diverged), float(decision.acted), float(bool(decision.weights))]
            + [decision.signal.get(x, math.nan) for x in names]
            + [decision.velocity.get(x, math.nan) for x in names], dtype=torch.float64)
    backend = dist.get_backend(group)
    device = torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else torch.device("cpu")
    buf = buf.to(device)
    dist.broadcast(buf, src=dist.get_global_rank(group, 0) if group is not None else 0, group=group)
    if decision is not None:
        return decision
    v = buf.cpu().tolist()
    offsets = dict(zip(names, v[:k]))
    weights = tuple(v[k:k + n]) if v[k + n + 3] > 0.5 else ()
    flags = v[k + n:k + n + 3]
    signal = {x: s for x, s in zip(names, v[k + n + 4:2 * k + n + 4]) if not math.isnan(s)}
    velocity = {x: s for x, s in zip(names, v[2 * k + n + 4:]) if not math.isnan(s)}
    return Decision(offsets=offsets, weights=weights, rollback=flags[0] > 0.5, diverged=flags[1] > 0.5,
                    acted=flags[2] > 0.5, signal=signal, velocity=velocity)
