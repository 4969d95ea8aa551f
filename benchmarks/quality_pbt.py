"""The quality benchmark's PBT column: Ray Tune PBT from the mis-set starts, at the same worker-steps.

    python -m benchmarks.quality --pbt --horizons short      # what `--pbt` adds to a cell

For each seed and each mis-set start (10x too low, 10x too high) of a cell: 4 single-worker trials of the
cell's workload, all at that start, `benchmarks.pbt`'s population (exploit and perturb every window; ranked
on the validation metric, which HDET never sees). The same total steps as one 4-replica HDET run. Results
append to the cell's `quality_runs.jsonl` as `workload/horizon/seed/pbt/k`.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from benchmarks import quality
from benchmarks.common import append_jsonl
from benchmarks.pool import done_keys

MEMBERS = quality.REPLICAS
MIS_SET = {name: shift for name, shift in quality.STARTS.items() if shift != 0}


def pbt_runs(
    mode: str, workload: str, horizon: str, seeds: tuple[int, ...], best: int, results: Path
) -> None:
    """Run the PBT populations of one cell that `results` does not hold yet (resumable, like the rest)."""
    import ray

    from benchmarks.pbt import run_pbt

    sync = quality.SYNC_EVERY[mode][workload]
    steps = quality.HORIZONS[mode][horizon] * sync
    lr_range = (quality.rate(workload, min(quality.GRID)), quality.rate(workload, max(quality.GRID)))
    todo: list[tuple[str, dict[str, Any], float]] = []
    done = done_keys(results)
    for s in seeds:
        for shift in MIS_SET.values():
            k = best + shift
            key = f"{workload}/{horizon}/{s}/pbt/{k}"
            if key not in done:
                job = {"name": workload, "steps": steps, "sync_every": sync, "seed": s}
                todo.append((key, job, quality.rate(workload, k)))
    if not todo:
        return
    started_here = not ray.is_initialized()
    if started_here:
        ray.init(num_cpus=MEMBERS, include_dashboard=False, log_to_driver=False)
    try:
        for key, job, start in todo:
            print(f"[quality] {key}: PBT from {start:.3g}", flush=True)
            with tempfile.TemporaryDirectory() as storage:
                out = run_pbt(job, start, lr_range, MEMBERS, storage=storage, source="workload")
            append_jsonl(results, {"key": key, **out})
    finally:
        if started_here:
            ray.shutdown()
