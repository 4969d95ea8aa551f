"""Would the replicas' own validation losses see what the training loss cannot? Each replica's held-out
loss at a window's end, before the average, against the window hypergradient the controller reads.

    python -m benchmarks.val_signal            # mlp, cnn (seeds 0-4), lm (seeds 0-2); 20 windows; 3 starts
    python -m benchmarks.val_signal --report-only   # the table again, from the stored runs
    python -m benchmarks.val_signal --quick    # the MLP at its oracle's rate, seed 0 (a smoke test)

The runs are the quality benchmark's 20-window HDET runs with the shipped defaults (rates from its stored
`quality.json`), made again with `replica_validation` on: at each window's last step every replica
evaluates the validation set with its own weights (under `shared_grad` the replicas differ by their rates
alone), so the window's ranks say which rate generalised best over the window. Two signals per window, in
`benchmarks.signal`'s convention "positive: a higher rate would have done better":

- **validation rank**: -(Spearman's rho between the replicas' log multipliers and their validation losses);
- **hypergradient**: the window hypergradient of the same run, as the controller read it.

Phases: the first pool (windows 0-3, where `high_start_runs_down` and `low_start_holds_down` read their
verdict), the rest of the rise (to 30% of the run), and the anneal. The controller moves the rate in these
runs, so later phases mix rates; the first pool is at the start's own rate (the opening step-down aside).
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from pathlib import Path
from typing import Any

from benchmarks import common, quality, workloads
from benchmarks.pool import read_results, run_jobs

SEEDS = {"mlp": (0, 1, 2, 3, 4), "cnn": (0, 1, 2, 3, 4), "lm": (0, 1, 2)}
PHASES = ("first pool (windows 0-3)", "rest of the rise", "anneal")
RISE = 0.3
STARTS = {"low": -2, "oracle": 0, "high": 2}
"""The quality benchmark's starts (`quality.STARTS`): 10x too low, the oracle's rate, 10x too high."""


def jobs(names: tuple[str, ...], seeds: dict[str, tuple[int, ...]]) -> list[dict[str, Any]]:
    cells = common.read_json(common.results_dir("full") / "quality.json")["cells"]
    out = []
    for w in names:
        cell = cells[f"{w}/short"]
        for start, shift in STARTS.items():
            k = cell["oracle_k"] + shift
            for s in seeds[w]:
                out.append(
                    {
                        "key": f"{w}/{start}/{s}",
                        "workload": w,
                        "steps": cell["windows"] * cell["sync_every"],
                        "sync_every": cell["sync_every"],
                        "seed": s,
                        "max_lr": quality.rate(w, k),
                        "arm": "hdet",
                        "replica_validation": True,
                    }
                )
    return out


def signals(run: dict[str, Any]) -> list[tuple[int, float, float]]:
    """(window, validation-rank signal, hypergradient) of a run's healthy, non-opening windows."""
    from hdet_ray.core.controller import rank_correlation

    out = []
    for rec, replicas in zip(run["records"], run["replica_validation"], strict=False):
        h = rec["params"]["lr"].get("signal")
        if rec["excluded"] or rec["opening"] or h is None:
            continue
        val = [v for v, _ in replicas]
        if not all(math.isfinite(v) for v in val):
            continue
        # rank_correlation: +1 when the higher coordinate has the lower loss, i.e. "higher would do better"
        out.append((rec["window"], rank_correlation([math.log(m) for _, m in replicas], val), float(h)))
    return out


def _phase(points: list[tuple[int, float]], lo: int, hi: int) -> str:
    vals = [v for w, v in points if lo <= w < hi]
    if not vals:
        return "n/a"
    share = sum(v > 0 for v in vals) / len(vals)
    return f"{statistics.fmean(vals):+.2f} ({share:.0%} > 0, {len(vals)})"


def letters(points: list[tuple[int, float]], windows: int) -> str:
    """One letter a window: `u` above 0 (says higher), `d` below (says lower), `.` 0 or a window left out."""
    by = dict(points)
    return "".join(
        "." if w not in by else "u" if by[w] > 0 else "d" if by[w] < 0 else "." for w in range(windows)
    )


def report(
    results: dict[str, dict[str, Any]], names: tuple[str, ...], seeds: dict[str, tuple[int, ...]]
) -> str:
    rows = []
    traces = []
    for w in names:
        for start in STARTS:
            runs = [results[k] for s in seeds[w] if (k := f"{w}/{start}/{s}") in results]
            if not runs:
                continue
            windows = len(runs[0]["records"])
            rise = math.ceil(RISE * windows)
            bounds = [(0, 4), (4, rise), (rise, windows)]
            val = [(win, v) for r in runs for win, v, _ in signals(r)]
            hyper = [(win, h) for r in runs for win, _, h in signals(r)]
            rows.append([w, start, "validation rank", *(_phase(val, lo, hi) for lo, hi in bounds)])
            rows.append(["", "", "hypergradient", *(_phase(hyper, lo, hi) for lo, hi in bounds)])
            for s, r in zip(seeds[w], runs, strict=False):
                pts = signals(r)
                # a rank of 4 replicas says something past |rho| 0.5 (2 of its 5 values on each side)
                v = [(win, v if abs(v) > 0.5 else 0.0) for win, v, _ in pts]
                h = [(win, h) for win, _, h in pts]
                traces.append(
                    f"{w:4s} {start:7s} seed {s}: validation {letters(v, windows)}  "
                    f"hypergradient {letters(h, windows)}  final centre x{r['centres'][-1]:.2f}"
                )
    m = common.machine()
    return (
        f"Command: `{common.command_line()}`. Machine: {common.machine_line(m)}. The quality benchmark's "
        "20-window HDET runs (shipped defaults, N = 4), made again with every replica's own validation loss "
        "read at each window's end before the average. Each cell: mean over the phase's windows of every "
        "seed (share above 0, number of windows); positive: a higher rate would have done better.\n\n"
        + common.table(["workload", "start", "signal", *PHASES], rows)
        + "\n\nPer run, one letter a window (u: says higher, d: says lower, .: neither, or a window left "
        "out), then the centre multiplier at the end:\n\n```\n" + "\n".join(traces) + "\n```\n"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.val_signal", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--quick", action="store_true", help="the MLP at its oracle's rate, seed 0")
    parser.add_argument("--report-only", action="store_true", help="print the table from the stored runs")
    parser.add_argument(
        "--out", type=Path, default=None, help="runs file (JSON lines; default: results/full, or quick)"
    )
    args = parser.parse_args(argv)
    names = ("mlp",) if args.quick else tuple(SEEDS)
    seeds = {"mlp": (0,)} if args.quick else SEEDS
    out = args.out or common.results_dir("quick" if args.quick else "full") / "val_signal_runs.jsonl"
    todo = [j for j in jobs(names, seeds) if not args.quick or j["key"].startswith("mlp/oracle/")]
    if not args.report_only:
        run_jobs(workloads.run, todo, quality.REPLICAS, out)
    text = report(read_results(out), names, seeds)
    if not args.quick:
        (common.results_dir("full") / "val_signal.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
