"""`held_up_counts` beside the default on the horizon benchmark's CNN from 10x too low (150 windows).

    python -m benchmarks.horizon_held 2 3 4 5     # the seeds to run (~2 minutes a run here, 2 cores)

`benchmarks.horizon`'s job for the CNN at its 60-window oracle index minus 2 (10x too low), run twice per
seed: with `controller_settings={"held_up_counts": true}` (key `cnn/150/<seed>/low/gated`) and with the
defaults (`.../noheld`). Results append to `benchmarks/results/full/horizon_held_runs.jsonl` (an interrupted
run resumes); prints each seed's final validation loss for both and their ratio. docs/benchmarks.md,
"Windows held by the schedule's bias count toward the climb", reads them.
"""

from __future__ import annotations

import sys

from benchmarks import common, horizon, quality, workloads
from benchmarks.pool import read_results, run_jobs

ARMS = {"gated": {"controller_settings": {"held_up_counts": True}}, "noheld": {}}


def main(argv: list[str] | None = None) -> int:
    seeds = [int(s) for s in (sys.argv[1:] if argv is None else argv)] or [2, 3, 4, 5]
    out = common.results_dir("full") / "horizon_held_runs.jsonl"
    k = horizon.ORACLE["cnn"] - 2
    jobs = []
    for seed in seeds:
        for name, settings in ARMS.items():
            job = horizon.job("full", "cnn", seed, "hdet", k)
            job["hdet"] = {**job.get("hdet", {}), **settings}
            job["key"] = f"cnn/150/{seed}/low/{name}"
            jobs.append(job)
    run_jobs(workloads.run, jobs, quality.REPLICAS, out)
    results = read_results(out)
    print(f"command: python -m benchmarks.horizon_held {' '.join(map(str, seeds))}")
    for seed in seeds:
        gated, noheld = (results[f"cnn/150/{seed}/low/{name}"]["metric"] for name in ARMS)
        print(f"seed {seed}: held_up_counts {gated:.5f}, default {noheld:.5f}, ratio {gated / noheld:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
