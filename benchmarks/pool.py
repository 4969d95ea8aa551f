"""A group of real gloo processes that runs a list of jobs in order, so a process group starts once.

`run_jobs(fn, jobs, world, results_file)` spawns `world` processes; every rank calls `fn(rank, world, job)`
for each job, in the same order (they are collective calls), and rank 0 appends
`{"key": job["key"], **fn's result}` to `results_file` (JSON lines) as each finishes. Jobs whose key is
already in the file are skipped, so a long benchmark that was interrupted resumes where it stopped. A group
whose process dies from a signal (a native abort inside gloo, an OOM kill) is started again on the jobs left,
at most `RESTARTS` times.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch.multiprocessing as mp

from benchmarks.common import append_jsonl

JobFn = Callable[[int, int, dict[str, Any]], dict[str, Any]]
RESTARTS = 2


def leave_process() -> None:
    """End a spawned rank whose group is destroyed and whose results are written, skipping the interpreter's
    teardown: gloo's threads can still be joinable when their static owners are destroyed, and std::terminate
    then aborts a rank whose work is done ("terminate called without an active exception", no Python frame;
    seen in CI in this pool and in the engine tests' fixture)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


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
    import faulthandler

    import torch
    import torch.distributed as dist

    faulthandler.enable()  # a native abort prints every thread's Python stack, not only "SIGABRT"
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
    leave_process()


def dispatch(rank: int, world: int, job: dict[str, Any]) -> dict[str, Any]:
    """A JobFn for mixed lists: each job names its own function in `job["fn"]`."""
    return job["fn"](rank, world, job)


def run_jobs(fn: JobFn, jobs: list[dict[str, Any]], world: int, results_file: Path, threads: int = 1) -> None:
    """Run the jobs not yet in `results_file` on `world` gloo processes. `fn` must be importable.

    A Python exception in a job is raised here as it is; a process killed by a signal restarts the group on
    the jobs not yet written (each job seeds itself, so a re-run job is the same run)."""
    for attempt in range(RESTARTS + 1):
        done = done_keys(results_file)
        todo = [j for j in jobs if j["key"] not in done]
        if not todo:
            return
        results_file.parent.mkdir(parents=True, exist_ok=True)
        try:
            with tempfile.TemporaryDirectory() as tmp:
                args = (world, fn, todo, os.path.join(tmp, "pg"), str(results_file), threads)
                mp.spawn(_worker, args=args, nprocs=world, join=True)
            return
        except mp.ProcessExitedException as e:
            if e.signal_name is None or attempt == RESTARTS:
                raise
            left = len([j for j in jobs if j["key"] not in done_keys(results_file)])
            print(
                f"[pool] process {e.error_index} died with {e.signal_name}; "
                f"restarting the group on the {left} jobs not yet written "
                f"(restart {attempt + 1} of {RESTARTS})",
                flush=True,
            )
