"""How a cell runs. The runner asks an executor for a cell's Ray resources and calls `executor.run(job,
root)` inside a Ray task; `run` returns a `CellRun` or raises (the runner retries, then fails the cell).

- `InProcessExecutor`: trains the cell in the task itself with `Replica.build(spec, 0, 1).train()`: one
  replica, no torch.distributed, one CPU. For fixed-schedule single-replica candidates and fast tests.
- `RunJobExecutor`: calls `hdet_ray.ray.run_job(spec, storage_path=..., progress=False)` from the task,
  which runs the cell as a full job of this project (a TorchTrainer with `replicas` workers, HDET or not).
  Cells restart (run_job takes no starting checkpoint); `worker_seconds` and `run_dir` come from its
  `JobResult`. Each cell's job is named after the cell (run_job names its controller actor after the job,
  so cells sharing the base spec's `name` would collide when they run concurrently).

Metrics are stored as the record needs them: non-finite values become None (no result for that cell).
"""

from __future__ import annotations

import math
import os
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from hdet_ray.promotion.cells import CellJob, checkpoint_path


@dataclass(frozen=True, slots=True)
class CellRun:
    metrics: dict[str, float]
    worker_seconds: float
    run_id: str
    """Unique per execution: a re-run cell gets a new one (the resume test relies on it)."""
    checkpoint: str | None = None
    run_dir: str | None = None


class Executor(Protocol):
    max_replicas: int | None
    """The most replicas a cell may have under this executor (None: no limit)."""
    continues: bool
    """Whether a cell can start from a previous stage's checkpoint."""

    def options(self, job: CellJob) -> dict[str, Any]:
        """`ray.remote` options for the task that runs `job` (num_cpus, resources)."""

    def run(self, job: CellJob, root: str) -> CellRun:
        """Run the cell (inside a Ray task); write its checkpoint under `root` if it can."""


def _host_resources(job: CellJob) -> dict[str, float]:
    return {f"host:{job.host}": 0.001} if job.host else {}


class InProcessExecutor:
    max_replicas = 1
    continues = True

    def options(self, job: CellJob) -> dict[str, Any]:
        return {"num_cpus": 1, "resources": _host_resources(job)}

    def run(self, job: CellJob, root: str) -> CellRun:
        import torch

        from hdet_ray.loop import Replica
        from hdet_ray.spec import JobSpec

        torch.set_num_threads(1)
        started = time.perf_counter()
        replica = Replica.build(JobSpec.model_validate(job.spec), 0, 1)
        if job.continue_from is not None:
            state = torch.load(checkpoint_path(Path(root), job.continue_from), weights_only=False)
            replica.model.load_state_dict(state["model"])
            # Optimizer moments only: the new segment's schedule sets its own rates.
            opt = replica.optimizer.state_dict()
            opt["state"] = state["optimizer"]["state"]
            replica.optimizer.load_state_dict(opt)
        metrics = finite(replica.train())
        out = checkpoint_path(Path(root), job.id)
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(f".tmp{os.getpid()}")
        torch.save(replica.state_dict(), tmp)
        os.replace(tmp, out)
        return CellRun(metrics, time.perf_counter() - started, uuid.uuid4().hex, str(out))


class RunJobExecutor:
    """Cells as jobs through `hdet_ray.ray.run_job` (the Ray layer's TorchTrainer entry)."""

    max_replicas = None
    continues = False

    def options(self, job: CellJob) -> dict[str, Any]:
        # The task only drives the trainer; the trainer asks Ray for its own workers.
        return {"num_cpus": 0, "resources": _host_resources(job)}

    def run(self, job: CellJob, root: str) -> CellRun:
        from hdet_ray.ray import run_job
        from hdet_ray.spec import JobSpec

        if job.continue_from is not None:
            raise RuntimeError(
                f"{job.id}: the run_job executor cannot continue from a checkpoint; "
                f"declare the stage with start: restart"
            )
        # A cell-unique job name: run_job names the controller actor after it, and cells run concurrently.
        spec = JobSpec.model_validate({**job.spec, "name": job.id.replace("/", ".")})
        result = run_job(spec, storage_path=str(Path(root) / "jobs"), progress=False)
        return CellRun(
            finite(result.metrics), float(result.worker_seconds), uuid.uuid4().hex, None, str(result.run_dir)
        )


def finite(metrics: dict[str, Any]) -> dict[str, float | None]:
    """Metrics as the record stores them: a diverged (non-finite) value becomes None, i.e. no result."""
    return {
        k: float(v) if isinstance(v, (int, float)) and math.isfinite(v) else None for k, v in metrics.items()
    }


EXECUTORS = {"inprocess": InProcessExecutor, "run_job": RunJobExecutor}
