"""The study runner on Ray: stage by stage, every cell a Ray task, decisions by the frozen rules.

    import ray
    from hdet_ray.promotion import Study, run_study
    ray.init()
    record = run_study(Study.from_file("examples/studies/digits.yaml"), "runs/studies")

Cells of a stage run concurrently, up to `concurrency` at a time (default: the cluster's CPUs). A cell
that raises or whose worker dies is retried `study.retries` times, then recorded as failed; the study
goes on. The record is rewritten after every cell, so a killed runner started again re-runs only the
cells the record does not hold (and a study whose definition changed is refused before anything runs).
"""

from __future__ import annotations

import sys
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

from hdet_ray.promotion.budget import account
from hdet_ray.promotion.cells import CellJob, stage_cells, validate_cells
from hdet_ray.promotion.decisions import decide_stage
from hdet_ray.promotion.executors import CellRun, Executor, InProcessExecutor
from hdet_ray.promotion.protocol import Study, StudyError
from hdet_ray.promotion.record import StudyRecord, now
from hdet_ray.promotion.report import markdown, plot

Log = Callable[[str], None]


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _run_cell(executor: Executor, job: CellJob, root: str) -> CellRun:
    return executor.run(job, root)


def run_study(
    study: Study,
    root: str | Path,
    *,
    executor: Executor | None = None,
    concurrency: int | None = None,
    log: Log = _stderr,
) -> StudyRecord:
    """Run (or resume) `study` under `root/<study.name>/` on the connected Ray cluster; returns its record."""
    import ray

    executor = executor or InProcessExecutor()
    validate_cells(study, executor.max_replicas)
    if not executor.continues:
        for i, stage in enumerate(study.stages):
            if stage.start == "continue" and any(c.continuable for c in study.candidates):
                raise StudyError(
                    f"stages.{i}.start: {type(executor).__name__} cannot continue from a "
                    f"checkpoint; declare 'restart' or mark the candidates continuable: false"
                )
    record = StudyRecord.open(root, study)  # freezes the definition before stage 1, or checks it
    _check_hosts(study, ray.cluster_resources())
    capacity = concurrency or max(1, int(ray.cluster_resources().get("CPU", 1)))

    live = [c.name for c in study.candidates]
    for k, stage in enumerate(study.stages):
        if stage.name in record.decisions:
            live = record.decisions[stage.name]["advanced"]
            continue
        finished = {i for i, c in record.cells.items() if c["status"] == "finished"}
        jobs = stage_cells(study, k, live, finished)
        todo = [j for j in jobs if j.id not in record.cells]
        log(
            f"[{study.name}] stage {stage.name}: {len(live)} candidates, {len(jobs)} cells, "
            f"{len(jobs) - len(todo)} already in the record"
        )
        _run_cells(todo, executor, record, capacity, study.retries, log)
        decision = decide_stage(study, k, record.table(study, stage.name))
        record.decisions[stage.name] = decision.to_dict()
        record.save()
        log(f"[{study.name}] stage {stage.name}: advanced {decision.advanced}, stopped {decision.stopped}")
        live = decision.advanced
    return finish(study, record)


def finish(study: Study, record: StudyRecord) -> StudyRecord:
    """Account the budget and write record.json, record.md and record.png."""
    record.data["budget"] = account(study, record.cells.values()).to_dict()
    record.data["status"] = "finished"
    record.data["finished_at"] = now()
    record.save()
    tables = {s.name: record.table(study, s.name) for s in study.stages}
    (record.path / "record.md").write_text(markdown(study, record.data, tables))
    plot(study, tables, record.path / "record.png")
    return record


def _check_hosts(study: Study, resources: dict[str, float]) -> None:
    for i, stage in enumerate(study.stages):
        for host in stage.hosts:
            if f"host:{host}" not in resources:
                raise StudyError(
                    f"stages.{i}.hosts: no Ray node offers the resource 'host:{host}'; start "
                    f"that host's node with --resources '{{\"host:{host}\": 1}}'"
                )


def _run_cells(
    todo: list[CellJob], executor: Executor, record: StudyRecord, capacity: int, retries: int, log: Log
) -> None:
    import ray

    task = ray.remote(max_retries=0)(_run_cell)
    queue = deque(todo)
    attempts: dict[str, list[dict]] = {job.id: [] for job in todo}
    pending: dict = {}
    while queue or pending:
        while queue and len(pending) < capacity:
            job = queue.popleft()
            ref = task.options(**executor.options(job)).remote(executor, job, str(record.path))
            pending[ref] = (job, time.perf_counter())
        done, _ = ray.wait(list(pending), num_returns=1)
        for ref in done:
            job, started = pending.pop(ref)
            try:
                run: CellRun = ray.get(ref)
            except (
                ray.exceptions.RayError,
                ValueError,
                RuntimeError,
            ) as e:  # a raising cell or a dead worker
                wall = time.perf_counter() - started
                attempts[job.id].append(
                    {"error": _describe(e), "worker_seconds": wall * job.spec["replicas"], "at": now()}
                )
                if len(attempts[job.id]) <= retries:
                    log(f"  {job.id}: crashed ({attempts[job.id][-1]['error']}); retrying")
                    queue.append(job)
                else:
                    log(f"  {job.id}: failed after {len(attempts[job.id])} attempt(s)")
                    record.add_cell(_cell(job, "failed", {}, attempts[job.id], None))
                continue
            value = run.metrics.get(job.metric)
            log(f"  {job.id}: {job.metric}={value}")
            record.add_cell(_cell(job, "finished", run.metrics, attempts[job.id], run))


def _cell(job: CellJob, status: str, metrics: dict, failed: list[dict], run: CellRun | None) -> dict:
    cost = sum(a["worker_seconds"] for a in failed) + (run.worker_seconds if run else 0.0)
    return {
        "id": job.id,
        "stage": job.stage,
        "candidate": job.candidate,
        "seed": job.seed,
        "host": job.host,
        "status": status,
        "metrics": metrics,
        "budget_steps": job.budget_steps,
        "steps_run": job.spec["steps"],
        "replicas": job.spec["replicas"],
        "continued_from": job.continue_from,
        "worker_seconds": cost,
        "attempts": failed
        + ([{"error": None, "worker_seconds": run.worker_seconds, "at": now()}] if run else []),
        "run_id": run.run_id if run else None,
        "checkpoint": run.checkpoint if run else None,
        "run_dir": run.run_dir if run else None,
        "finished_at": now(),
    }


def _describe(e: BaseException) -> str:
    cause = getattr(e, "cause", None)
    if isinstance(cause, BaseException):
        e = cause
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"[:300]
