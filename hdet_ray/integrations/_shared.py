"""What both trainer callbacks need: the training loss averaged over a step's micro-batches (on the device),
the records not yet logged, and one gradient all-reduce per step under the framework's DDP."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from hdet_ray.core.records import WindowRecord
from hdet_ray.engine.scheduler import HDETOneCycleLR


def find_scheduler(candidates: Iterable[Any], where: str) -> HDETOneCycleLR:
    for s in candidates:
        if isinstance(s, HDETOneCycleLR):
            return s
    raise TypeError(
        f"HDETCallback: {where} has no HDETOneCycleLR scheduler; build one on the trainer's "
        "optimizer and hand it to the trainer (see docs/integrations.md)"
    )


def single_reduce(scheduler: HDETOneCycleLR, wrapped: torch.nn.Module | None) -> None:
    """When the framework wrapped the model in DDP after the scheduler was built, hand the wrapper to the
    scheduler (`use_ddp`): it converges the wrapper at each sync and holds DDP's own all-reduce off, so the
    gradients are averaged once, by the scheduler's average that one unstable replica cannot poison."""
    if isinstance(wrapped, torch.nn.parallel.DistributedDataParallel):
        scheduler.use_ddp(wrapped)


class StepLoss:
    """The mean of one optimizer step's micro-batch losses, kept on their device (never read on the host)."""

    def __init__(self) -> None:
        self.total: torch.Tensor | None = None
        self.count = 0

    def add(self, loss: torch.Tensor) -> None:
        x = loss.detach().reshape(()).float()
        self.total = x if self.total is None else self.total + x
        self.count += 1

    def take(self) -> torch.Tensor | None:
        mean = None if self.total is None else self.total / self.count
        self.total, self.count = None, 0
        return mean


class Unlogged:
    """The scheduler's records that have not been handed to the framework's logger yet."""

    def __init__(self) -> None:
        self.seen = 0

    def take(self, scheduler: HDETOneCycleLR) -> list[WindowRecord]:
        if len(scheduler.records) < self.seen:  # a rollback or a reload shortened the list
            self.seen = 0
        new = scheduler.records[self.seen :]
        self.seen = len(scheduler.records)
        return new
