"""Held out: the HDET defaults on workloads that were never run while they were chosen.

    python -m benchmarks.holdout           # mlp_adamw, cnn_sgd, lm_sgd: 20 windows, 3 seeds (~10 min)
    python -m benchmarks.holdout --quick   # 1 seed, 6 windows, one workload: checks that it runs

The quality benchmark's three workloads (`benchmarks.quality`) chose the defaults, so they cannot show
whether the defaults fit those three only. These swap the optimizers of its workloads: the digits MLP with
AdamW (weight decay 0.01), the BatchNorm CNN with SGD + momentum (cycled by OneCycle) and the byte LM with SGD
+ momentum (`lm_sgd`, added after the first two had run; a transformer that SGD trains less easily). The plan
is the quality benchmark's, fixed before running: a 7-rate grid of fixed OneCycle (DDP) picks the oracle
rate on the seeds, then fixed OneCycle and HDET with the shipped defaults (the README's three-line change)
from 10x too low, the oracle's rate and 10x too high. Results append to
`benchmarks/results/<mode>/holdout_runs.jsonl` (an interrupted run resumes); the table goes to `holdout.md`.
"""

from __future__ import annotations

import argparse
import functools
import math
import sys
from collections.abc import Sequence
from typing import Any

from benchmarks import common, workloads
from benchmarks.pool import read_results, run_jobs
from benchmarks.quality import GRID, REPLICAS, STARTS, grid_rate

CENTRE = {"mlp_adamw": 0.01, "cnn_sgd": 0.1, "lm_sgd": 0.1}
"""The grid's middle rate per workload (a plausible default for its optimizer; the grid spans 1000x)."""
PLAN = {
    "full": {"windows": 20, "sync_every": 10, "seeds": (0, 1, 2)},
    "quick": {"windows": 6, "sync_every": 5, "seeds": (0,)},
}


def rate(workload: str, k: int) -> float:
    return grid_rate(CENTRE[workload], k)


def grid_job(
    workload: str, seed: int, arm: str, k: int, steps: int, sync_every: int, max_lr: float
) -> dict[str, Any]:
    """A `benchmarks.workloads.run` job keyed `workload/seed/arm/k` (the key the held-out, issue-setting and
    unseen benchmarks share)."""
    return {
        "key": f"{workload}/{seed}/{arm}/{k}",
        "workload": workload,
        "steps": steps,
        "sync_every": sync_every,
        "seed": seed,
        "arm": arm,
        "max_lr": max_lr,
    }


def job(mode: str, workload: str, seed: int, arm: str, k: int) -> dict[str, Any]:
    plan = PLAN[mode]
    steps = plan["windows"] * plan["sync_every"]
    return grid_job(workload, seed, arm, k, steps, plan["sync_every"], rate(workload, k))


def oracle_index(
    results: dict[str, dict[str, Any]], workload: str, seeds: tuple[int, ...], grid: Sequence[int] = GRID
) -> int:
    """The grid index of the best fixed rate (mean over `seeds`; a diverged run counts as infinitely bad)."""
    return min(
        grid, key=lambda k: sum(common.final_metric(results, f"{workload}/{s}/fixed/{k}") for s in seeds)
    )


def run_workload(mode: str, workload: str, results_file) -> list[list[Any]]:
    """Run what is missing for one workload; its table rows (workload, start, max_lr, fixed, HDET, harm)."""
    seeds = PLAN[mode]["seeds"]
    print(f"[holdout] {workload}: grid", flush=True)
    run_jobs(
        workloads.run,
        [job(mode, workload, s, "fixed", k) for s in seeds for k in GRID],
        REPLICAS,
        results_file,
    )
    best = oracle_index(read_results(results_file), workload, seeds)
    print(
        f"[holdout] {workload}: oracle rate {rate(workload, best):.3g}; HDET from the three starts",
        flush=True,
    )
    jobs = []
    for shift in STARTS.values():
        k = best + shift
        jobs += [job(mode, workload, s, "hdet", k) for s in seeds]
        jobs += [job(mode, workload, s, "fixed", k) for s in seeds if k not in GRID]
    run_jobs(workloads.run, jobs, REPLICAS, results_file)
    results = read_results(results_file)
    metric = functools.partial(common.final_metric, results)
    oracle = sum(metric(f"{workload}/{s}/fixed/{best}") for s in seeds) / len(seeds)
    rows = []
    for start, shift in STARTS.items():
        k = best + shift
        fixed = [metric(f"{workload}/{s}/fixed/{k}") / oracle for s in seeds]
        hdet = [metric(f"{workload}/{s}/hdet/{k}") / oracle for s in seeds]
        rows.append([workload, start, f"{rate(workload, k):.3g}", cell(fixed), cell(hdet), harm(fixed, hdet)])
    return rows


def cell(ratios: list[float]) -> str:
    """Mean ± sd of the finite ratios, and how many runs diverged (a non-finite metric)."""
    finite = [x for x in ratios if math.isfinite(x)]
    dead = len(ratios) - len(finite)
    if not finite:
        return f"diverged ({dead} of {dead})"
    m, sd = common.mean_spread(finite)
    text = f"{m:.3f} ± {sd:.3f}" if m < 1e4 else f"{m:.3g} ± {sd:.3g}"  # a run that blew up but stayed finite
    return text + (f" ({dead} of {len(ratios)} diverged)" if dead else "")


def harm(fixed: list[float], hdet: list[float]) -> str:
    """'**yes**' when HDET is worse than fixed OneCycle by more than one seed sd (a diverged run counts as
    infinitely bad: more diverged HDET runs is harm, fewer is not)."""
    dead_fixed = sum(not math.isfinite(x) for x in fixed)
    dead_hdet = sum(not math.isfinite(x) for x in hdet)
    if dead_fixed != dead_hdet:
        return "**yes**" if dead_hdet > dead_fixed else "no"
    if dead_fixed == len(fixed):
        return "no"
    (fm, fs), (hm, hs) = (common.mean_spread([x for x in v if math.isfinite(x)]) for v in (fixed, hdet))
    return "no" if hm <= fm + max(fs, hs) else "**yes**"


def run(mode: str) -> int:
    """What `benchmarks.all` calls."""
    return main(["--quick"] if mode == "quick" else [])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.holdout", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 seed, 6 windows, mlp_adamw only")
    parser.add_argument("--only", nargs="*", choices=sorted(CENTRE), help="run only these workloads")
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    command = " ".join(["python -m benchmarks.holdout", *argv])
    mode = "quick" if args.quick else "full"
    names = args.only or (["mlp_adamw"] if args.quick else list(CENTRE))
    out = common.results_dir(mode)
    rows = [row for name in names for row in run_workload(mode, name, out / "holdout_runs.jsonl")]
    plan = PLAN[mode]
    text = "\n".join(
        [
            f"Command: `{command}`. Machine: {common.machine_line(common.machine())}. "
            f"Seeds {list(plan['seeds'])}, {plan['windows']} windows of {plan['sync_every']} steps, N = "
            f"{REPLICAS} gloo processes. Cells: final validation metric / the oracle's (the grid's best "
            "fixed rate, mean over seeds), mean ± sd; harm: HDET worse than fixed OneCycle by more than one "
            "seed sd.",
            "",
            common.table(
                ["workload", "start", "max_lr", "fixed OneCycle (DDP)", "HDET default", "harm"], rows
            ),
        ]
    )
    (out / "holdout.md").write_text(text + "\n")
    print(text, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
