"""The opening range test: centre on the best replica, or one level below it?

    python -m benchmarks.opening          # digits, 3 seeds x 3 starts x 2 choices, ~2 min on 2 cores

The first full quality run found that `opening_spread=10` picks the highest rate it tries in most runs
(the window is short and early, and higher rates win it). lr_find-style range tests take a rate below the
loss minimiser; `ControllerConfig.opening_step_down` does that. Same workload, starts and seeds as the
quality benchmark's digits rows (rates 1e-3, 1e-2, 1e-1 = 10x too low, the oracle, 10x too high; local
fan-out). Writes `results/full/opening.{jsonl,md}`; a finished run is not repeated.
"""

from __future__ import annotations

import sys

from benchmarks import common
from benchmarks.pool import read_results, run_jobs
from benchmarks.runs import run_job

STARTS = {"10x too low": 1e-3, "oracle's rate": 1e-2, "10x too high": 1e-1}
SEEDS = (0, 1, 2)
CHOICES = {"best replica (step down 0)": 0, "one level below (step down 1)": 1}


def jobs() -> list[dict]:
    out = []
    for label, down in CHOICES.items():
        for start, rate in STARTS.items():
            for seed in SEEDS:
                spec = {
                    "task": "digits",
                    "replicas": 4,
                    "steps": 300,
                    "sync_every": 25,
                    "fanout": "local",
                    "seed": seed,
                    "schedule": {"max_lr": rate},
                    "opening_spread": 10.0,
                    "controller": {"opening_step_down": down},
                }
                out.append({"key": f"{label}/{start}/{seed}", "kind": "hdet", "spec": spec})
    return out


def main() -> int:
    out = common.results_dir("full")
    results_file = out / "opening.jsonl"
    run_jobs(run_job, jobs(), 4, results_file)
    results = read_results(results_file)
    rows = []
    for label in CHOICES:
        cells = []
        for start in STARTS:
            values = [results[f"{label}/{start}/{seed}"]["metric"] for seed in SEEDS]
            mean, sd = common.mean_spread(values)
            cells.append(f"{mean:.4f} ± {sd:.4f}")
        rows.append([label, *cells])
    text = (
        f"Command: `{common.command_line()}`. Machine: {common.machine_line(common.machine())}. "
        f"digits, N = 4, 300 steps, sync every 25, local fan-out, seeds {list(SEEDS)}; final validation "
        "loss (mean ± sd; the oracle grid's best is 0.0788).\n\n"
        + common.table(["opening choice", *STARTS], rows)
    )
    (out / "opening.md").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
