"""How far can the slope controller move in a short run? Its step size against the three starts.

    python -m benchmarks.controller_step             # digits, 3 seeds x 3 starts x 3 step sizes, ~3 min
    python -m benchmarks.controller_step --bytelm    # bytelm, seed 0, step sizes 0.1 and 0.5, ~10 min

The first full quality run found the default slope controller (step 0.1) moves the rate at most ~1.3x in
12 windows (finding 2 in docs/benchmarks.md). This measures larger steps on the quality benchmark's digits
starts and seeds, with the default fan-out (shared_grad). Writes `results/full/controller_step.{jsonl,md}`.
"""

from __future__ import annotations

import math
import sys

from benchmarks import common
from benchmarks.pool import read_results, run_jobs
from benchmarks.runs import run_job

# the quality benchmark's workloads, oracles and starts (oracle / 10, oracle, oracle x 10)
WORKLOADS = {
    "digits": {
        "run": {"task": "digits", "steps": 300, "sync_every": 25},
        "oracle": 1e-2,
        "best": 0.0788,
        "seeds": (0, 1, 2),
        "steps": (0.1, 0.5, 1.5),
    },
    "bytelm": {
        "run": {"task": "bytelm", "steps": 160, "sync_every": 20},
        "oracle": 10**-1.5,
        "best": 2.804,
        "seeds": (0,),
        "steps": (0.1, 0.5),
    },
}


def jobs(w: dict) -> list[dict]:
    out = []
    for step in w["steps"]:
        for start, factor in STARTS.items():
            for seed in w["seeds"]:
                spec = {
                    **w["run"],
                    "replicas": 4,
                    "seed": seed,
                    "schedule": {"max_lr": w["oracle"] * factor},
                    "controller": {"step_size": step},
                }
                out.append({"key": f"step {step}/{start}/{seed}", "kind": "hdet", "spec": spec})
    return out


STARTS = {"10x too low": 0.1, "oracle's rate": 1.0, "10x too high": 10.0}


def main() -> int:
    name = "bytelm" if "--bytelm" in sys.argv[1:] else "digits"
    w = WORKLOADS[name]
    out = common.results_dir("full")
    results_file = out / f"controller_step_{name}.jsonl"
    run_jobs(run_job, jobs(w), 4, results_file)
    results = read_results(results_file)
    rows = []
    for step in w["steps"]:
        cells = []
        for start in STARTS:
            runs = [results[f"step {step}/{start}/{seed}"] for seed in w["seeds"]]
            mean, sd = common.mean_spread([r["metric"] for r in runs])
            moved = max(abs(math.log(r["centres"][-1])) for r in runs if r["centres"])
            cells.append(f"{mean:.4f} ± {sd:.4f} (max move x{math.exp(moved):.2f})")
        rows.append([f"step_size {step}", *cells])
    text = (
        f"Command: `{common.command_line()}`. Machine: {common.machine_line(common.machine())}. "
        f"{name}, N = 4, {w['run']['steps']} steps, sync every {w['run']['sync_every']}, shared_grad, "
        f"slope controller (momentum 0.9, clip 0.5, trust region 3), seeds {list(w['seeds'])}; "
        f"final validation metric (mean ± sd; the oracle grid's best is {w['best']}) and the largest final "
        "rate multiplier over seeds.\n\n" + common.table(["controller", *STARTS], rows)
    )
    (out / f"controller_step_{name}.md").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
