"""A group of real gloo processes that runs a list of jobs in order, so a process group starts once.

`run_jobs(fn, jobs, world, results_file)` spawns `world` processes; every rank calls `fn(rank, world, job)`
for each job, in the same order (they are collective calls), and rank 0 appends
`{"key": job["key"], **fn's result}` to `results_file` (JSON lines) as each finishes. Jobs whose key is
already in the file are skipped, so a long benchmark that was interrupted resumes where it stopped.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch.multiprocessing as mp

from benchmarks.common import append_jsonl

JobFn = Callable[[int, int, dict[str, Any]], dict[str, Any]]


def done_keys(results_file: Path) -> set[str]:
    if not results_file.exists():
        return set()
    return {json.loads(line)["key"] for line in results_file.read_text().splitlines() if line.strip()}


def read_results(results_file: Path) -> dict[str, dict[str, Any]]:
    if not results_file.exists():
        return {}
    rows = [json.loads(line) for line in results_file.read_text().splitlines() if line.strip()]
    return {r["key"]: r for r in rows}


def _worker(
    rank: int,
    world: int,
    fn: JobFn,
    jobs: list[dict[str, Any]],
    init_file: str,
    results_file: str,
    threads: int,
) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(threads)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        for job in jobs:
            result = fn(rank, world, job)
            if rank == 0:
                append_jsonl(Path(results_file), {"key": job["key"], **result})
            dist.barrier()
    finally:
        dist.destroy_process_group()


def dispatch(rank: int, world: int, job: dict[str, Any]) -> dict[str, Any]:
    """A JobFn for mixed lists: each job names its own function in `job["fn"]`."""
    return job["fn"](rank, world, job)


def run_jobs(fn: JobFn, jobs: list[dict[str, Any]], world: int, results_file: Path, threads: int = 1) -> None:
    """Run the jobs not yet in `results_file` on `world` gloo processes. `fn` must be importable."""
    done = done_keys(results_file)
    todo = [j for j in jobs if j["key"] not in done]
    if not todo:
        return
    results_file.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        init_file = os.path.join(tmp, "pg")
        mp.spawn(
            _worker, args=(world, fn, todo, init_file, str(results_file), threads), nprocs=world, join=True
        )
