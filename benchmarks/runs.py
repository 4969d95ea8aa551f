"""The training runs the quality benchmark is made of, each one collective job for `pool.run_jobs`.

- `fixed`: PyTorch DDP + `torch.optim.lr_scheduler.OneCycleLR` at one max rate: what a user runs today.
- `hdet`: `hdet_ray.loop.Replica` for a `JobSpec` (the same loop `hdet run` uses), one replica per rank.

Both return rank 0's final validation metric on the (identical / converged) model.
"""

from __future__ import annotations

import math
import time
from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel
from torch.optim.lr_scheduler import OneCycleLR

from hdet_ray import HDETDivergedError
from hdet_ray.loop import Replica, make_optimizer, onecycle_arguments
from hdet_ray.spec import JobSpec
from hdet_ray.tasks import make_task


def run_job(rank: int, world: int, job: dict[str, Any]) -> dict[str, Any]:
    spec = JobSpec.parse(job["spec"])
    started = time.perf_counter()
    out = _fixed(rank, world, spec) if job["kind"] == "fixed" else _hdet(rank, world, spec)
    return {**out, "wall_s": time.perf_counter() - started, "replica_steps": spec.steps * world}


def _fixed(rank: int, world: int, spec: JobSpec) -> dict[str, Any]:
    task = make_task(spec.task, **spec.task_options)
    model = task.model(spec.seed)
    ddp = DistributedDataParallel(model)
    optimizer = make_optimizer(spec, model)
    scheduler = OneCycleLR(optimizer, **onecycle_arguments(spec))
    batches = task.batches(rank, world, spec.seed)
    for _ in range(spec.steps):
        loss = task.loss(ddp, next(batches))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        scheduler.step()
    metric = task.evaluate(model)[task.metric] if rank == 0 else math.nan
    return {"metric": metric, "diverged": not math.isfinite(metric), "rollbacks": 0, "centres": []}


def _hdet(rank: int, world: int, spec: JobSpec) -> dict[str, Any]:
    replica = Replica.build(spec, rank, world)
    diverged = False
    try:
        replica.train(validate=False)
    except HDETDivergedError:
        diverged = True  # raised on every rank at the same sync, so the group stays in step
    finally:
        replica.scheduler.close()
    metric = replica.evaluate()[replica.task.metric] if rank == 0 else math.nan
    records = replica.scheduler.records
    return {
        "metric": metric,
        "diverged": diverged or not math.isfinite(metric),
        "rollbacks": sum(r.rollback for r in records),
        # the controller's max-rate multiplier after each window (1 = the rate the run started at)
        "centres": [math.exp(r.params["lr"].new_offset) for r in records],
    }


def torch_threads() -> None:
    torch.set_num_threads(1)
