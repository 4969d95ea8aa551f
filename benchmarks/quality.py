"""Quality: does turning HDET on ever cost a user, and does it find the rate from a 10x mis-set start?

    python -m benchmarks.quality          # full: mlp, cnn, lm x 2 horizons x 3 seeds (see docs/benchmarks.md)
    python -m benchmarks.quality --quick  # 1 seed, short runs: checks that everything runs (a few minutes)
    python -m benchmarks.quality --only mlp --horizons short --seeds 0 1 2

Every run is the script a user writes (`benchmarks.workloads`): 4 gloo processes, one replica each, the same
steps for every method. The plan is fixed before anything runs:
1. the oracle: fixed OneCycle (DDP) at 7 max rates, centre x 10**((k - 3) / 2), k = 0..6; k* = the best mean
   over the plan's seeds 0, 1, 2 (a dead run counts as infinitely bad; seeds added later, `--seeds 3 4`, run
   the grid too but do not move k*, so the starts stay where they were fixed);
2. from k* - 2 (10x too low), k* and k* + 2 (10x too high): fixed OneCycle, HDET with the shipped defaults
   (the README's three-line change), and HDET without auto-LR (spread + averaging only);
3. the LR-free optimizers a user would try instead, at their documented settings (lr 1.0, same OneCycle
   shape): Prodigy (`prodigyopt`) and D-Adaptation (`dadaptation`: DAdaptSGD where the workload uses SGD,
   DAdaptAdam otherwise);
4. PBT (`--pbt`): Ray Tune PBT over 4 single-process trials at the same total steps, from the mis-set starts.
Two horizons: about 20 and 60 sync windows. Results append to `benchmarks/results/<mode>/quality_runs.jsonl`
keyed by `workload/horizon/seed/arm/k` (an interrupted run resumes; delete the file to start over).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from benchmarks import common, workloads
from benchmarks.pool import read_results, run_jobs

REPLICAS = 4
GRID = tuple(range(7))
STARTS = {"10x too low": -2, "oracle's rate": 0, "10x too high": 2}
CENTRE = {"mlp": 0.1, "cnn": 0.01, "lm": 3e-3}
"""The grid's middle rate per workload (chosen as a plausible default before running; the grid spans
1000x)."""
SYNC_EVERY = {"full": {"mlp": 10, "cnn": 10, "lm": 10}, "quick": {"mlp": 5, "cnn": 5, "lm": 5}}
HORIZONS = {"full": {"short": 20, "long": 60}, "quick": {"short": 6}}
"""Sync windows per run (steps = windows x sync_every)."""
SEEDS = {"full": (0, 1, 2), "quick": (0,)}
ARMS = ("fixed", "hdet", "hold", "prodigy", "dadapt")
ARM_NAMES = {
    "fixed": "fixed OneCycle (DDP)",
    "hdet": "HDET default",
    "hold": "HDET without auto-LR",
    "prodigy": "Prodigy",
    "dadapt": "D-Adaptation",
    "pbt": "Ray Tune PBT",
}


def grid_rate(centre: float, k: int) -> float:
    """The grid's k-th rate around `centre` (k = 3), steps of sqrt(10)."""
    return centre * 10 ** ((k - 3) / 2)


def rate(workload: str, k: int) -> float:
    return grid_rate(CENTRE[workload], k)


def job(workload: str, horizon: str, mode: str, seed: int, arm: str, k: int | None) -> dict[str, Any]:
    sync = SYNC_EVERY[mode][workload]
    steps = HORIZONS[mode][horizon] * sync
    out: dict[str, Any] = {
        "key": f"{workload}/{horizon}/{seed}/{arm}/{'' if k is None else k}",
        "workload": workload,
        "steps": steps,
        "sync_every": sync,
        "seed": seed,
        "validate_every_window": arm in ("hdet", "hold"),
    }
    if arm in ("prodigy", "dadapt"):
        return {**out, "arm": "lrfree", "optimizer": arm, "max_lr": 1.0}
    assert k is not None
    out.update(arm="fixed" if arm == "fixed" else "hdet", max_lr=rate(workload, k))
    if arm == "hold":
        out["hdet"] = {"auto_lr": False}
    return out


def oracle_index(
    results: dict[str, dict[str, Any]], workload: str, horizon: str, seeds: tuple[int, ...]
) -> int:
    def score(k: int) -> float:
        return sum(common.final_metric(results, f"{workload}/{horizon}/{s}/fixed/{k}") for s in seeds) / len(
            seeds
        )

    return min(GRID, key=score)


def run_cell(mode: str, workload: str, horizon: str, seeds: tuple[int, ...], pbt: bool) -> int:
    results_file = common.results_dir(mode) / "quality_runs.jsonl"
    print(f"[quality] {workload}/{horizon}: grid", flush=True)
    plan = SEEDS[mode]
    run_jobs(
        workloads.run,
        [job(workload, horizon, mode, s, "fixed", k) for s in sorted({*plan, *seeds}) for k in GRID],
        REPLICAS,
        results_file,
    )
    # the start rates come from the plan's seeds, so that adding seeds later does not move them
    best = oracle_index(read_results(results_file), workload, horizon, plan)
    print(
        f"[quality] {workload}/{horizon}: oracle rate {rate(workload, best):.3g}; the other arms", flush=True
    )
    jobs = []
    for s in seeds:
        for shift in STARTS.values():
            k = best + shift
            jobs += [
                job(workload, horizon, mode, s, arm, k)
                for arm in ("fixed", "hdet", "hold")
                if not (arm == "fixed" and k in GRID)
            ]
        jobs += [job(workload, horizon, mode, s, arm, None) for arm in ("prodigy", "dadapt")]
    run_jobs(workloads.run, jobs, REPLICAS, results_file)
    if pbt:
        from benchmarks.quality_pbt import pbt_runs

        pbt_runs(mode, workload, horizon, seeds, best, results_file)
    return best


def run_benchmark(
    mode: str,
    only: tuple[str, ...] | None = None,
    horizons: tuple[str, ...] | None = None,
    seeds: tuple[int, ...] | None = None,
    pbt: bool = False,
    report_only: bool = False,
) -> dict[str, Any]:
    """Run what is missing of the selected cells, then report every cell whose oracle grid is complete."""
    seeds = seeds or SEEDS[mode]
    if not report_only:
        for workload in CENTRE:
            for horizon in HORIZONS[mode]:
                if (only and workload not in only) or (horizons and horizon not in horizons):
                    continue
                run_cell(mode, workload, horizon, seeds, pbt)
    return summarize(mode, seeds)


def summarize(mode: str, seeds: tuple[int, ...]) -> dict[str, Any]:
    from benchmarks.quality_report import report

    out = common.results_dir(mode)
    results = read_results(out / "quality_runs.jsonl")
    summary: dict[str, Any] = {
        "machine": common.machine(),
        "command": common.command_line(),
        "mode": mode,
        "seeds": list(seeds),
        "replicas": REPLICAS,
        "cells": {},
    }
    for workload in CENTRE:
        for horizon in HORIZONS[mode]:
            # a cell is reported over the seeds whose oracle grid is complete (the page says if that is fewer)
            done = tuple(
                s for s in seeds if all(f"{workload}/{horizon}/{s}/fixed/{k}" in results for k in GRID)
            )
            if not done:
                continue
            plan = tuple(s for s in SEEDS[mode] if s in done) or done
            best = oracle_index(results, workload, horizon, plan)
            summary["cells"][f"{workload}/{horizon}"] = {
                "workload": workload,
                "horizon": horizon,
                "windows": HORIZONS[mode][horizon],
                "sync_every": SYNC_EVERY[mode][workload],
                "oracle_k": best,
                "oracle_rate": rate(workload, best),
                "grid": [rate(workload, k) for k in GRID],
                "seeds": list(done),
            }
    summary["runs"] = {k: {x: v for x, v in r.items() if x != "records"} for k, r in results.items()}
    common.write_json(out / "quality.json", summary)
    report(summary, out)
    return summary


def run(mode: str) -> dict[str, Any]:
    """What `benchmarks.all` calls."""
    return run_benchmark(mode)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.quality", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 seed, short runs")
    parser.add_argument("--only", nargs="*", choices=sorted(CENTRE), help="run only these workloads")
    parser.add_argument("--horizons", nargs="*", choices=("short", "long"), help="run only these horizons")
    parser.add_argument("--seeds", nargs="*", type=int, help="seeds (default 0 1 2; quick: 0)")
    parser.add_argument("--pbt", action="store_true", help="also run Ray Tune PBT from the mis-set starts")
    parser.add_argument("--report-only", action="store_true", help="rebuild the tables from stored runs")
    args = parser.parse_args(argv)
    run_benchmark(
        "quick" if args.quick else "full",
        tuple(args.only) if args.only else None,
        tuple(args.horizons) if args.horizons else None,
        tuple(args.seeds) if args.seeds else None,
        pbt=args.pbt,
        report_only=args.report_only,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
