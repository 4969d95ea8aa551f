"""How wide may the default spread be? HDET without auto-LR at the oracle's rate, by spread and gradient clip.

    python -m benchmarks.spread_width          # mlp, 20 windows of 10 steps, seeds 0 1 2 (a few minutes)

The MLP (SGD + momentum) of the quality benchmark at its oracle rate (0.316, the edge of stability: 1.0 is
dead), with the controller off, so only the spread and the averaging act. Rows: the `log_mean1` spread factor
(1.0 = the replicas all run the base rate: only the engine's own averaging differs from DDP) and the shared
gradient's clip (`engine/fanout.average_gradients`: a rank's gradient is cut to `clip` x the ranks'
median norm).
Results: `benchmarks/results/full/spread_width_runs.jsonl` (resumable) and `spread_width.md`.
"""

from __future__ import annotations

import functools
import math
import sys
from typing import Any

from benchmarks import common
from benchmarks.pool import read_results, run_jobs

SEEDS = (0, 1, 2)
RATE = 0.1 * 10 ** (1 / 2)  # the quality grid's k = 4 for mlp: the oracle of its 20-window cell
VARIANTS = {
    "1.0": (1.0, None),
    "1.25": (1.25, None),
    "1.5": (1.5, None),
    "1.5, clip 1.5": (1.5, 1.5),
    "1.25, clip 1.5": (1.25, 1.5),
}


def job_fn(rank: int, world: int, job: dict[str, Any]) -> dict[str, Any]:
    from benchmarks.workloads import run
    from hdet_ray.core.hyperparams import HyperParam
    from hdet_ray.engine import fanout

    if job["clip"] is not None:  # the scheduler calls fanout.average_gradients through the module
        original = fanout.__dict__.setdefault("_unclipped", fanout.average_gradients)
        fanout.average_gradients = functools.partial(original, clip=job["clip"])
    hdet = {"auto_lr": False, "explore": [HyperParam(name="lr", spread="log_mean1", size=job["size"])]}
    return run(rank, world, {**job, "hdet": hdet})


def jobs() -> list[dict[str, Any]]:
    """Fixed OneCycle (the reference), then every variant, for every seed."""
    rows = [("fixed", "fixed", 1.0, None)] + [
        (name, "hdet", size, clip) for name, (size, clip) in VARIANTS.items()
    ]
    return [
        {
            "key": f"{name}/{s}",
            "workload": "mlp",
            "steps": 200,
            "sync_every": 10,
            "max_lr": RATE,
            "seed": s,
            "arm": arm,
            "size": size,
            "clip": clip,
        }
        for name, arm, size, clip in rows
        for s in SEEDS
    ]


def main() -> int:
    out = common.results_dir("full")
    results_file = out / "spread_width_runs.jsonl"
    run_jobs(job_fn, jobs(), 4, results_file)
    res = read_results(results_file)
    fixed = [res[f"fixed/{s}"]["metric"] for s in SEEDS]
    oracle = sum(fixed) / len(fixed)
    rows = [["fixed OneCycle (DDP)", "", *[f"{v:.4f}" for v in fixed], f"{1.0:.3f}"]]
    for name, (size, clip) in VARIANTS.items():
        vals = [res[f"{name}/{s}"]["metric"] for s in SEEDS]
        m = sum(vals) / len(vals) if all(math.isfinite(v) for v in vals) else math.nan
        rows.append(
            [
                f"log_mean1 {size:g}",
                f"{clip:g}" if clip else "3 (default)",
                *[f"{v:.4f}" for v in vals],
                f"{m / oracle:.3f}",
            ]
        )
    text = (
        f"Command: `python -m benchmarks.spread_width`. Machine: {common.machine_line(common.machine())}.\n\n"
        + common.table(["spread", "gradient clip", *[f"seed {s}" for s in SEEDS], "mean / fixed"], rows)
        + "\n"
    )
    (out / "spread_width.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
