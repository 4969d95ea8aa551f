"""One replica's training loop for a `JobSpec`: the same code under torchrun, Ray Train and benchmarks.

`Replica.build(spec, rank, replicas)` makes the task, model, optimizer and `HDETOneCycleLR`;
`Replica.train(...)` runs the steps, calls `on_window` after every sync on every rank (validation,
checkpoints and reports hang there), and ends with a converged model.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from hdet_ray.core.records import WindowRecord
from hdet_ray.engine.scheduler import DecideFn, HDETOneCycleLR
from hdet_ray.spec import JobSpec
from hdet_ray.tasks import Task, make_task


def make_optimizer(spec: JobSpec, model: torch.nn.Module) -> torch.optim.Optimizer:
    lr = spec.schedule.max_lr / spec.schedule.div_factor
    if spec.optimizer == "sgd":
        return torch.optim.SGD(
            model.parameters(), lr=lr, momentum=spec.schedule.max_momentum, weight_decay=spec.weight_decay
        )
    return torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=spec.weight_decay)


def onecycle_arguments(spec: JobSpec) -> dict[str, Any]:
    """OneCycleLR's arguments from a job spec: the one place both HDET and a plain OneCycleLR baseline
    (benchmarks.runs) build their schedule from."""
    s = spec.schedule
    return {
        "max_lr": s.max_lr,
        "total_steps": spec.steps,
        "pct_start": s.pct_start,
        "anneal_strategy": s.anneal_strategy,
        "cycle_momentum": s.cycle_momentum,
        "base_momentum": s.base_momentum,
        "max_momentum": s.max_momentum,
        "div_factor": s.div_factor,
        "final_div_factor": s.final_div_factor,
        "three_phase": s.three_phase,
    }


def make_scheduler(
    spec: JobSpec,
    optimizer: torch.optim.Optimizer,
    model: torch.nn.Module,
    task: Task,
    *,
    decide: DecideFn | None = None,
    on_record: Callable[[WindowRecord], None] | None = None,
) -> HDETOneCycleLR:
    return HDETOneCycleLR(
        optimizer,
        **onecycle_arguments(spec),
        sync_every=spec.sync_every,
        explore=[e.to_hyperparam() for e in spec.explore],
        fanout=spec.fanout,
        controller=spec.controller.name,
        controller_settings=spec.controller.settings(),
        auto_lr=spec.auto_lr,
        health=spec.health.to_config(task.chance_loss),
        optimizer_state=spec.optimizer_state,
        balanced=spec.balanced,
        opening_spread=spec.opening_spread,
        model=model,
        seed=spec.seed,
        decide=decide,
        on_record=on_record,
    )


@dataclass
class Replica:
    spec: JobSpec
    rank: int
    replicas: int
    task: Task
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: HDETOneCycleLR
    step: int = 0
    metrics: dict[str, float] = field(default_factory=dict)

    @classmethod
    def build(
        cls,
        spec: JobSpec,
        rank: int = 0,
        replicas: int = 1,
        *,
        decide: DecideFn | None = None,
        on_record: Callable[[WindowRecord], None] | None = None,
        device: torch.device | str = "cpu",
    ) -> Replica:
        task = make_task(spec.task, **spec.task_options)
        if spec.log_to and rank == 0:
            from hdet_ray.integrations.loggers import recorders

            on_record = recorders(spec.log_to, spec.name or spec.task, then=on_record)
        model = task.model(spec.seed).to(device)
        optimizer = make_optimizer(spec, model)
        scheduler = make_scheduler(spec, optimizer, model, task, decide=decide, on_record=on_record)
        return cls(spec, rank, replicas, task, model, optimizer, scheduler)

    def state_dict(self) -> dict[str, Any]:
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "step": self.step,
            "metrics": dict(self.metrics),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.step = int(state["step"])
        self.metrics = dict(state["metrics"])

    def evaluate(self) -> dict[str, float]:
        self.metrics = self.task.evaluate(self.model)
        return self.metrics

    def train(
        self, on_window: Callable[[Replica, WindowRecord], None] | None = None, validate: bool = True
    ) -> dict[str, float]:
        """Run to `spec.steps`, resuming from `self.step`; returns the final validation metrics.

        Validation runs on the converged model every `validate_every` windows; its metrics are attached
        to the next window's record (`metric` keys) and to the final summary.
        """
        spec, sched = self.spec, self.scheduler
        batches = self.task.batches(self.rank, self.replicas, spec.seed)
        for _ in range(self.step):  # resume: the data stream is a pure function of (seed, rank, position)
            next(batches)
        started = time.perf_counter()
        window_before = sched.window
        while self.step < spec.steps:
            batch = next(batches)
            loss = self.task.loss(self.model, batch)
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            self.optimizer.step()
            self.step += 1
            sched.step(loss=loss)
            if self.step == spec.steps:
                sched.finish()
            if sched.window != window_before:
                window_before = sched.window
                record = sched.records[-1]
                if validate and (sched.window % spec.validate_every == 0 or self.step == spec.steps):
                    self.evaluate()
                    sched.annotate(**{self.task.metric: self.metrics[self.task.metric]})
                sched.annotate(elapsed_s=time.perf_counter() - started)
                if on_window is not None:
                    on_window(self, record)
        if validate and not self.metrics:
            self.evaluate()
        return dict(self.metrics)
