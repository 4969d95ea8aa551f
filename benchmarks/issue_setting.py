"""The issue's own setting: 500 steps with `sync_every=25`, on all six workloads, the defaults as shipped.

    python -m benchmarks.issue_setting            # 6 workloads, seeds 0 1, 500 steps (~45 min, 2 cores)
    python -m benchmarks.issue_setting --seeds 2  # one more seed (resumes; the table covers the seeds run)
    python -m benchmarks.issue_setting --quick    # the MLP at 20 steps, 1 seed: checks that it runs
    python -m benchmarks.issue_setting --replicas 8 --only mlp cnn lm --seeds 0 1 2   # N = 8 processes

The quality and held-out benchmarks sync every 10 steps, and every default was chosen on the first three
of their workloads at that period. The issue that asked for them measured the harm at 500 steps with
`sync_every=25` (20 windows of 25 steps), so this runs that setting, which no default was chosen on: the
quality benchmark's three workloads and the held-out benchmark's three, with the same jobs
(`benchmarks.workloads`, 4 gloo processes). Each workload's oracle index k* is fixed from those
benchmarks before this one ran (`ORACLE`: the 60-window one for the quality workloads, whose 600 steps are
nearest to 500; the held-out benchmark's 200-step one for its workloads). Fixed OneCycle (DDP) at k* - 1,
k* and k* + 1 gives the reference (the best of the three, mean over seeds); fixed OneCycle and HDET with
the shipped defaults (the README's three-line change) start at k* - 2 (10x too low), k* and k* + 2 (10x too
high). Results append to `benchmarks/results/<mode>/issue_setting_runs.jsonl` (an interrupted run
resumes); the table goes to `issue_setting.md`.

`--replicas N` runs the same plan on N gloo processes instead of 4 (every rank keeps its batch size, so the
global batch is N times it, as in weak-scaling data parallelism): fixed OneCycle's reference is re-run at
that N, the start rates stay those of the 4-process oracle, and the runs go to
`issue_setting_n<N>_runs.jsonl` and `issue_setting_n<N>.md`. No default was chosen at any N but 4.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from typing import Any

from benchmarks import common, holdout, quality, workloads
from benchmarks.pool import read_results, run_jobs

ORACLE = {"mlp": 4, "cnn": 3, "lm": 5, "mlp_adamw": 4, "cnn_sgd": 2, "lm_sgd": 4}
"""The oracle grid index per workload, from the stored runs of `benchmarks.quality` (60 windows) and
`benchmarks.holdout` (docs/benchmarks.md)."""
PLAN = {
    "full": {"steps": 500, "sync_every": 25, "seeds": (0, 1), "workloads": tuple(ORACLE)},
    "quick": {"steps": 20, "sync_every": 10, "seeds": (0,), "workloads": ("mlp",)},
}
STARTS = {"10x too low": -2, "oracle's rate": 0, "10x too high": 2}
RUNS_PER_SEED = 8
"""Fixed OneCycle at k* - 2 .. k* + 2 and HDET at the three starts."""


def results_name(replicas: int) -> str:
    """The stem of the runs file and table for `replicas` processes (4: the benchmark's own)."""
    return "issue_setting" if replicas == quality.REPLICAS else f"issue_setting_n{replicas}"


def rate(workload: str, k: int) -> float:
    return quality.rate(workload, k) if workload in quality.CENTRE else holdout.rate(workload, k)


def job(mode: str, workload: str, seed: int, arm: str, k: int) -> dict[str, Any]:
    plan = PLAN[mode]
    return holdout.grid_job(workload, seed, arm, k, plan["steps"], plan["sync_every"], rate(workload, k))


def run_workload(
    mode: str, workload: str, seeds: tuple[int, ...], results_file, replicas: int = quality.REPLICAS
) -> None:
    """Run what is missing for one workload on `seeds`, on `replicas` gloo processes."""
    best = ORACLE[workload]
    print(f"[issue_setting] {workload}: seeds {list(seeds)}, N = {replicas}", flush=True)
    ks = sorted({best + d for d in (-1, 0, 1, *STARTS.values())})
    jobs = [job(mode, workload, s, "fixed", k) for s in seeds for k in ks]
    jobs += [job(mode, workload, s, "hdet", best + d) for s in seeds for d in STARTS.values()]
    run_jobs(workloads.run, jobs, replicas, results_file)


def table_rows(workload: str, seeds: tuple[int, ...], results: dict[str, Any]) -> list[list[str]]:
    """(workload, start, max_lr, seeds, fixed, HDET, harm, reference grid) per start, over `seeds`."""
    best = ORACLE[workload]

    def ratios(arm: str, k: int) -> list[float]:
        return [common.final_metric(results, f"{workload}/{s}/{arm}/{k}") for s in seeds]

    grid = {k: sum(ratios("fixed", k)) / len(seeds) for k in (best - 1, best, best + 1)}
    reference = min(grid.values())
    shown = ", ".join(f"{rate(workload, k):.3g}: {v / reference:.3f}" for k, v in grid.items())
    rows = []
    for start, d in STARTS.items():
        fixed, hdet = ([v / reference for v in ratios(arm, best + d)] for arm in ("fixed", "hdet"))
        rows.append(
            [
                workload,
                start,
                f"{rate(workload, best + d):.3g}",
                " ".join(map(str, seeds)),
                holdout.cell(fixed),
                holdout.cell(hdet),
                holdout.harm(fixed, hdet),
                shown,
            ]
        )
    return rows


def run(mode: str) -> int:
    return main(["--quick"] if mode == "quick" else [])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.issue_setting", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--quick", action="store_true", help="the MLP at 20 steps, 1 seed")
    parser.add_argument("--seeds", nargs="*", type=int, help="seeds to run (the table: every seed run)")
    parser.add_argument("--only", nargs="*", choices=sorted(ORACLE), help="run only these workloads")
    parser.add_argument(
        "--replicas",
        type=int,
        default=quality.REPLICAS,
        help="gloo processes (replicas), 2 or more; default 4",
    )
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    if args.replicas < 2:
        parser.error(f"--replicas must be 2 or more (HDET needs replicas to spread), got {args.replicas}")
    mode = "quick" if args.quick else "full"
    plan = PLAN[mode]
    name = results_name(args.replicas)
    results_file = common.results_dir(mode) / f"{name}_runs.jsonl"
    for w in plan["workloads"]:
        if args.only is None or w in args.only:
            run_workload(mode, w, tuple(args.seeds or plan["seeds"]), results_file, args.replicas)
    # the table: per workload, every seed whose runs are all stored
    stored = read_results(results_file)
    rows = []
    for w in plan["workloads"]:
        per_seed = Counter(int(key.split("/")[1]) for key in stored if key.split("/")[0] == w)
        seeds = tuple(sorted(s for s, n in per_seed.items() if n == RUNS_PER_SEED))
        if seeds:
            rows += table_rows(w, seeds, stored)
    text = "\n".join(
        [
            f"Command: `{' '.join(['python -m benchmarks.issue_setting', *argv])}`. Machine: "
            f"{common.machine_line(common.machine())}. {plan['steps']} steps, "
            f"`sync_every={plan['sync_every']}`, N = {args.replicas} gloo processes. Reference: the best "
            "of fixed OneCycle at the oracle index and one grid step either side (mean over seeds); cells: "
            "final validation metric / the reference, mean ± sd (a diverged run counts as infinitely bad, "
            "`benchmarks.holdout`'s rule).",
            "",
            common.table(
                [
                    "workload",
                    "start",
                    "max_lr",
                    "seeds",
                    "fixed OneCycle",
                    "HDET default",
                    "harm (worse by > 1 sd)",
                    "reference grid (max_lr: ratio)",
                ],
                rows,
            ),
        ]
    )
    (common.results_dir(mode) / f"{name}.md").write_text(text + "\n")
    print(text, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
