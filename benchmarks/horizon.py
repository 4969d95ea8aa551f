"""A longer horizon than the quality benchmark's: the shipped defaults at 150 sync windows.

    python -m benchmarks.horizon            # mlp, cnn, lm at 150 windows, seeds 0 1 (~25 min, 2 cores)
    python -m benchmarks.horizon --quick    # the MLP at 12 windows, 1 seed: checks that it runs

The quality benchmark's jobs (`benchmarks.quality.job`) with `windows x sync_every` steps. Its 60-window
oracle index k* (`ORACLE`, fixed by that benchmark before this one ran) places the runs: fixed OneCycle (DDP)
at k* - 1, k* and k* + 1 gives the reference (the best of the three, mean over seeds); HDET with the shipped
defaults (the README's three-line change) and fixed OneCycle start at k* and at k* - 2 (10x too low). At 150
windows the schedule's rise lasts 45 windows, so the rules that read the rise are tested where the 20- and
60-window cells cannot reach. Results append to `benchmarks/results/<mode>/horizon_runs.jsonl` (an
interrupted run resumes); the table goes to `horizon.md`.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from benchmarks import common, quality, workloads
from benchmarks.pool import read_results, run_jobs

ORACLE = {"mlp": 4, "cnn": 3, "lm": 5}
"""`benchmarks.quality`'s oracle index at 60 windows per workload (docs/benchmarks.md)."""
PLAN = {
    "full": {"windows": 150, "seeds": (0, 1), "workloads": ("mlp", "cnn", "lm")},
    "quick": {"windows": 12, "seeds": (0,), "workloads": ("mlp",)},
}


def job(mode: str, workload: str, seed: int, arm: str, k: int) -> dict[str, Any]:
    windows = PLAN[mode]["windows"]
    out = quality.job(workload, "long" if mode == "full" else "short", mode, seed, arm, k)
    out["steps"] = windows * out["sync_every"]
    out["key"] = f"{workload}/{windows}/{seed}/{arm}/{k}"
    out["validate_every_window"] = False
    return out


def run_workload(mode: str, workload: str, results_file) -> list[list[str]]:
    """Run what is missing for one workload; its table rows (workload, start, reference grid, HDET)."""
    plan, best = PLAN[mode], ORACLE[workload]
    seeds, windows = plan["seeds"], plan["windows"]
    print(f"[horizon] {workload}: {windows} windows, seeds {list(seeds)}", flush=True)
    jobs = [job(mode, workload, s, "fixed", k) for s in seeds for k in (best - 2, best - 1, best, best + 1)]
    jobs += [job(mode, workload, s, "hdet", k) for s in seeds for k in (best - 2, best)]
    run_jobs(workloads.run, jobs, quality.REPLICAS, results_file)
    results = read_results(results_file)

    def mean(arm: str, k: int) -> float:
        return sum(common.final_metric(results, f"{workload}/{windows}/{s}/{arm}/{k}") for s in seeds) / len(
            seeds
        )

    grid = {k: mean("fixed", k) for k in (best - 1, best, best + 1)}
    reference = min(grid.values())
    shown = ", ".join(f"{quality.rate(workload, k):.3g}: {v / reference:.3f}" for k, v in grid.items())
    rows = []
    for start, k in (("10x too low", best - 2), ("oracle's rate (60 windows)", best)):
        cells = []
        for arm in ("fixed", "hdet"):
            ratios = [
                common.final_metric(results, f"{workload}/{windows}/{s}/{arm}/{k}") / reference for s in seeds
            ]
            m, sd = common.mean_spread(ratios)
            cells.append(f"{m:.3f} ± {sd:.3f}")
        rows.append([workload, start, f"{quality.rate(workload, k):.3g}", *cells, shown])
    return rows


def run(mode: str) -> int:
    return main(["--quick"] if mode == "quick" else [])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.horizon", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the MLP at 12 windows, 1 seed")
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    mode = "quick" if args.quick else "full"
    out = common.results_dir(mode)
    plan = PLAN[mode]
    rows = [row for w in plan["workloads"] for row in run_workload(mode, w, out / "horizon_runs.jsonl")]
    text = "\n".join(
        [
            f"Command: `{' '.join(['python -m benchmarks.horizon', *argv])}`. Machine: "
            f"{common.machine_line(common.machine())}. Seeds {list(plan['seeds'])}, "
            f"{plan['windows']} windows, N = {quality.REPLICAS} gloo processes. Reference: the best of fixed "
            "OneCycle at the 60-window oracle's rate and one grid step either side (mean over seeds); cells: "
            "final validation metric / the reference, mean ± sd.",
            "",
            common.table(
                [
                    "workload",
                    "start",
                    "max_lr",
                    "fixed OneCycle",
                    "HDET default",
                    "reference grid (max_lr: ratio)",
                ],
                rows,
            ),
        ]
    )
    (out / "horizon.md").write_text(text + "\n")
    print(text, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
