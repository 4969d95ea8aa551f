"""`run_job(spec)`: run one HDET job on Ray and write its run directory.

    <storage_path or ./runs>/<job name or generated id>/
        spec.json          the validated spec (mode 0600; a service link names its token file, never the
                           token)
        trajectory.jsonl   one WindowRecord per window (written by the controller actor)
        summary.json       final metrics, base-value trajectory, paths, worker-seconds
        train/             Ray Train's checkpoints

Uses the Ray this process is connected to, else `RAY_ADDRESS`, else a local Ray started for the job
(and stopped after it).
"""

from __future__ import annotations

import json
import math
import os
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import ray

from hdet_ray.ray.actor import ControllerActor, actor_name
from hdet_ray.ray.trainer import build_trainer
from hdet_ray.spec import JobSpec, SpecError
from hdet_ray.tasks import make_task


@dataclass
class JobResult:
    metrics: dict[str, float]
    """The final validation metrics (rank 0's converged model)."""
    run_dir: Path
    records: int
    """Windows in trajectory.jsonl."""
    worker_seconds: float
    """Replicas x wall-clock seconds of the worker group (restarts included)."""
    summary: dict[str, Any] = field(default_factory=dict)


def job_name(spec: JobSpec) -> str:
    return (
        spec.name or f"{spec.task.replace(':', '-')}-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
    )


def run_id(spec: JobSpec, name: str) -> str:
    """What the run's Ray objects are keyed by: the service's job id, else the name and a unique suffix
    (a name is a label: two runs may share one)."""
    return spec.service.job_id if spec.service is not None else f"{name}-{uuid.uuid4().hex[:8]}"


def failure_reason(error: BaseException) -> str:
    """The first line a user needs: the worker's own exception (e.g. `HDETDivergedError: HDET run diverged
    at window 3 ...`), not Ray's wrapper with every rank's traceback."""
    failures = getattr(error, "worker_failures", None) or {}
    if failures:
        error = failures[min(failures)]
    cause = getattr(error, "cause", None)  # a RayTaskError carries the user's exception
    if isinstance(cause, BaseException):
        error = cause
    inner = getattr(error, "controller_failure", None)
    if isinstance(inner, BaseException):
        return failure_reason(inner)
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"


def check_runnable(spec: JobSpec) -> None:
    """Fail before any worker starts: the task must build with its options."""
    try:
        make_task(spec.task, **spec.task_options)
    except (ValueError, TypeError) as e:
        raise SpecError(f"task_options: {e}") from None


def run_job(
    spec: JobSpec,
    *,
    storage_path: str | Path | None = None,
    progress: bool = True,
    callbacks: list | None = None,
    cpus_per_worker: float = 1.0,
    out: TextIO | None = None,
) -> JobResult:
    """Run `spec` with a TorchTrainer on the connected Ray (or a local one); see the module docstring."""
    check_runnable(spec)
    out = out or sys.stdout
    name = job_name(spec)
    run_dir = Path(storage_path or spec.storage_path or "runs").resolve() / name
    run_dir.mkdir(parents=True, exist_ok=True)
    spec_file = run_dir / "spec.json"
    spec_file.touch(mode=0o600)
    spec_file.write_text(spec.model_dump_json(indent=2) + "\n")

    started_ray = _ensure_ray(spec.replicas * cpus_per_worker)
    actor = None
    try:
        actor = ControllerActor.options(name=actor_name(run_id(spec, name)), namespace="hdet").remote(
            spec.model_dump(mode="json"), str(run_dir)
        )
        ray.get(actor.stats.remote())  # the actor exists before any worker asks it
        trainer = build_trainer(spec, actor, run_dir, callbacks=callbacks, cpus_per_worker=cpus_per_worker)
        watcher = _Progress(actor, spec, out) if progress else None
        t0 = time.perf_counter()
        try:
            result = trainer.fit()
        finally:
            wall = time.perf_counter() - t0
            if watcher is not None:
                watcher.stop()
        final = dict((result.return_value or {}).get("metrics", {}))
        ray.get(actor.finalize.remote(final))
        stats = ray.get(actor.close.remote())
        summary = _summary(spec, name, run_dir, final, stats, wall)
        (run_dir / "summary.json").write_text(json.dumps(summary, indent=2, allow_nan=False) + "\n")
        return JobResult(
            metrics=final,
            run_dir=run_dir,
            records=stats["windows"],
            worker_seconds=summary["worker_seconds"],
            summary=summary,
        )
    finally:
        if actor is not None:
            ray.kill(actor)
        if started_ray:
            ray.shutdown()


def _ensure_ray(cpus: float) -> bool:
    """Connect to RAY_ADDRESS, or start a local Ray with enough logical CPUs; True if we started one."""
    if ray.is_initialized():
        return False
    if os.environ.get("RAY_ADDRESS"):
        ray.init(log_to_driver=False)
        return True  # a connection we made; shutdown only disconnects
    # address="local" always starts a fresh instance (a bare ray.init() would join any cluster on this
    # machine)
    ray.init(
        address="local",
        num_cpus=max(math.ceil(cpus), os.cpu_count() or 1),
        include_dashboard=False,
        log_to_driver=False,
        _temp_dir=tempfile.mkdtemp(prefix="hdet-ray-"),
    )
    return True


class _Progress:
    """Prints one line per window from the actor's trajectory while the job runs."""

    def __init__(self, actor: Any, spec: JobSpec, out: TextIO, every_s: float = 1.0) -> None:
        self.actor, self.spec, self.out, self.every_s = actor, spec, out, every_s
        self.seen = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            self.poll()

    def poll(self) -> None:
        try:
            records = ray.get(self.actor.progress.remote(self.seen), timeout=10)
        except (ray.exceptions.RayError, TimeoutError):  # best effort; the run itself reports errors
            return
        for r in records:
            print(progress_line(r, self.spec), file=self.out, flush=True)
        self.seen += len(records)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self.poll()


def centers(record: dict[str, Any], spec: JobSpec) -> dict[str, float]:
    """The base (centre) value of every explored hyperparameter during a window."""
    scales = {e.name: e.scale for e in spec.explore}
    out = {}
    for name, p in record["params"].items():
        base, offset = p["base"], p["offset"]
        if base is None or offset is None:
            continue
        out[name] = base * math.exp(offset) if scales.get(name, "log") == "log" else base + offset
    return out


def progress_line(record: dict[str, Any], spec: JobSpec) -> str:
    losses = [x for x in record["losses"] if x is not None]
    parts = [
        f"window {record['window'] + 1:>3}/{spec.total_windows}",
        f"step {record['step']:>6}/{spec.steps}",
    ]
    parts += [f"{k} {v:.4g}" for k, v in centers(record, spec).items()]
    if losses:
        parts.append(f"loss {min(losses):.4f}..{max(losses):.4f}")
    parts += [f"{k} {v:.4f}" for k, v in record["metrics"].items() if k != "elapsed_s" and v is not None]
    if record.get("rollback"):
        parts.append("ROLLBACK")
    return "  ".join(parts)


def _summary(
    spec: JobSpec, name: str, run_dir: Path, final: dict[str, float], stats: dict[str, Any], wall: float
) -> dict[str, Any]:
    from hdet_ray.ray.trajectory import read_trajectory

    records = read_trajectory(run_dir / "trajectory.jsonl")
    finite = {k: (v if isinstance(v, (int, float)) and math.isfinite(v) else None) for k, v in final.items()}
    return {
        "name": name,
        "task": spec.task,
        "replicas": spec.replicas,
        "steps": spec.steps,
        "final_metrics": finite,
        "windows": len(records),
        "base_trajectory": [{"window": r["window"], "step": r["step"], **centers(r, spec)} for r in records],
        "wall_s": wall,
        "worker_seconds": wall * spec.replicas,
        "actor": {k: stats[k] for k in ("calls", "restores", "pushed", "unsent", "push_error")},
        "paths": {
            "run_dir": str(run_dir),
            "trajectory": str(run_dir / "trajectory.jsonl"),
            "spec": str(run_dir / "spec.json"),
            "summary": str(run_dir / "summary.json"),
            "checkpoints": str(run_dir / "train"),
        },
    }
