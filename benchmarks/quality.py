"""Quality: does HDET find its own rate? Final validation metric against an oracle grid, fixed OneCycle and PBT.

    python -m benchmarks.quality            # full: digits + bytelm, 3 seeds (about an hour on 2 shared cores)
    python -m benchmarks.quality --quick    # 1 seed, shorter runs, fewer HDET variants (a few minutes)

Every run uses N=4 replicas (4 gloo processes) and the same number of steps per replica. The plan is
fixed before anything runs: a grid of 7 max rates 10**(k/2) * 1e-4 (k = 0..6, 1000x), then, from the
grid's best mean (the oracle, rate index k*), fixed OneCycle and every HDET variant start at k*-2 (10x too
low), k* and k*+2 (10x too high); the paper's ablation and PBT start at the rates the same rule gives.
Results append to `benchmarks/results/<mode>/quality_runs.jsonl` (an interrupted run resumes).
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks import common
from benchmarks.pool import read_results, run_jobs
from benchmarks.runs import run_job

REPLICAS = 4
GRID = tuple(range(7))


def rate(k: int) -> float:
    return 1e-4 * 10 ** (k / 2)


WORKLOADS: dict[str, dict[str, dict[str, Any]]] = {
    "full": {"digits": {"task": "digits", "steps": 300, "sync_every": 25},
             "bytelm": {"task": "bytelm", "steps": 160, "sync_every": 20}},
    "quick": {"digits": {"task": "digits", "steps": 150, "sync_every": 25},
              "bytelm": {"task": "bytelm", "steps": 75, "sync_every": 25}},
}
SEEDS = {"full": (0, 1, 2), "quick": (0,)}

# HDET variants started from each of the three rates (spec overrides on the defaults: log spread 2, slope).
# Each names its fan-out: the default changed from local to shared_grad after the first full run.
VARIANTS: dict[str, dict[str, Any]] = {
    "HDET slope/local": {"fanout": "local"},
    "HDET slope/shared_grad": {"fanout": "shared_grad"},
    "HDET paper/local": {"controller": {"name": "paper"}, "fanout": "local"},
    "HDET paper/shared_grad": {"controller": {"name": "paper"}, "fanout": "shared_grad"},
    "HDET no-auto/local": {"auto_lr": False, "fanout": "local"},
    "HDET no-auto/shared_grad": {"auto_lr": False, "fanout": "shared_grad"},
    "HDET slope/local + opening 10x": {"opening_spread": 10.0, "fanout": "local",
                                       "controller": {"opening_step_down": 0}},
}
QUICK_VARIANTS = ("HDET slope/local", "HDET paper/shared_grad", "HDET no-auto/local",
                  "HDET slope/local + opening 10x")
DEFAULT_HDET = "HDET slope/local"
# The paper's ablation at its own spread (alpha = 1/9, linear) and fan-out (shared_grad), from the high rate
PAPER_SPREAD = {"explore": [{"spread": "linear", "size": 1 / 9}], "fanout": "shared_grad"}
ABLATION: dict[str, dict[str, Any]] = {
    "HDET no-auto, paper spread": {**PAPER_SPREAD, "auto_lr": False},
    "HDET full (paper ctrl), paper spread": {**PAPER_SPREAD, "controller": {"name": "paper"}},
}
STARTS = {"10x low": -2, "best": 0, "10x high": 2}


def spec(workload: dict[str, Any], k: int, seed: int, **overrides: Any) -> dict[str, Any]:
    return {"task": workload["task"], "replicas": REPLICAS, "steps": workload["steps"],
            "sync_every": workload["sync_every"], "schedule": {"max_lr": rate(k)}, "seed": seed,
            "validate_every": 10**9, **overrides}


def grid_jobs(name: str, workload: dict[str, Any], seeds: tuple[int, ...]) -> list[dict[str, Any]]:
    return [{"key": f"{name}/{seed}/fixed/{k}", "kind": "fixed", "spec": spec(workload, k, seed)}
            for seed in seeds for k in GRID]


def oracle_index(results: dict[str, dict[str, Any]], name: str, seeds: tuple[int, ...]) -> int:
    """k* = the grid rate with the best mean metric over seeds (a diverged run counts as infinitely bad)."""
    def score(k: int) -> float:
        vals = [results[f"{name}/{s}/fixed/{k}"]["metric"] for s in seeds]
        return sum(v if math.isfinite(v) else math.inf for v in vals) / len(vals)
    return min(GRID, key=score)


def hdet_jobs(name: str, workload: dict[str, Any], seeds: tuple[int, ...], best: int,
              variants: tuple[str, ...]) -> list[dict[str, Any]]:
    jobs = []
    for seed in seeds:
        for shift in STARTS.values():
            k = best + shift
            if k not in GRID:  # the grid already holds fixed OneCycle at every on-grid rate
                jobs.append({"key": f"{name}/{seed}/fixed/{k}", "kind": "fixed", "spec": spec(workload, k, seed)})
            for v in variants:
                jobs.append({"key": f"{name}/{seed}/{v}/{k}", "kind": "hdet", "spec": spec(workload, k, seed, **VARIANTS[v])})
        for v, overrides in ABLATION.items():
            k = best + STARTS["10x high"]
            jobs.append({"key": f"{name}/{seed}/{v}/{k}", "kind": "hdet", "spec": spec(workload, k, seed, **overrides)})
    return jobs


def pbt_runs(name: str, workload: dict[str, Any], seeds: tuple[int, ...], best: int, results_file: Path) -> None:
    import ray

    from benchmarks.pbt import run_pbt
    from benchmarks.pool import done_keys

    todo = [(seed, STARTS[s]) for seed in seeds for s in ("10x low", "10x high")
            if f"{name}/{seed}/PBT/{best + STARTS[s]}" not in done_keys(results_file)]
    if not todo:
        return
    with tempfile.TemporaryDirectory(prefix="hdet-bench-ray-") as tmp:
        ray.init(num_cpus=REPLICAS, include_dashboard=False, _temp_dir=tmp, log_to_driver=False,
                 runtime_env={"env_vars": {"OMP_NUM_THREADS": "1"}})
        try:
            for seed, shift in todo:
                k = best + shift
                result = run_pbt(spec(workload, k, seed), rate(k), (rate(GRID[0]), rate(GRID[-1])), REPLICAS,
                                 storage=str(Path(tmp) / "tune"))
                common.append_jsonl(results_file, {"key": f"{name}/{seed}/PBT/{k}", **result})
        finally:
            ray.shutdown()


def run(mode: str, only: tuple[str, ...] | None = None, pbt: bool = True) -> dict[str, Any]:
    out = common.results_dir(mode)
    results_file = out / "quality_runs.jsonl"
    seeds = SEEDS[mode]
    variants = QUICK_VARIANTS if mode == "quick" else tuple(VARIANTS)
    summary: dict[str, Any] = {"machine": common.machine(), "command": common.command_line(), "mode": mode,
                               "seeds": list(seeds), "replicas": REPLICAS, "workloads": {}}
    for name, workload in WORKLOADS[mode].items():
        if only and name not in only:
            continue
        print(f"[quality] {name}: grid", flush=True)
        run_jobs(run_job, grid_jobs(name, workload, seeds), REPLICAS, results_file)
        best = oracle_index(read_results(results_file), name, seeds)
        print(f"[quality] {name}: oracle rate {rate(best):.3g}; HDET runs", flush=True)
        run_jobs(run_job, hdet_jobs(name, workload, seeds, best, variants), REPLICAS, results_file)
        if pbt:
            print(f"[quality] {name}: PBT", flush=True)
            pbt_runs(name, workload, seeds, best, results_file)
        summary["workloads"][name] = {**workload, "oracle_k": best, "oracle_rate": rate(best)}
    from benchmarks.quality_report import report

    summary["runs"] = read_results(results_file)
    common.write_json(out / "quality.json", summary)
    report(summary, variants, out)
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.quality", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 seed, short runs, a few variants")
    parser.add_argument("--only", nargs="*", choices=sorted(WORKLOADS["full"]), help="run only these workloads")
    parser.add_argument("--no-pbt", action="store_true", help="skip Ray Tune PBT")
    args = parser.parse_args(argv)
    run("quick" if args.quick else "full", tuple(args.only) if args.only else None, pbt=not args.no_pbt)
    return 0


if __name__ == "__main__":
    sys.exit(main())
