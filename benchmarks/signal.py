"""Which per-window signal tells a too-low rate from a good one? The replicas' rank test against the window
hypergradient, on the quality benchmark's cells.

    python -m benchmarks.signal            # mlp, cnn, lm x 2 horizons x 3 starts x seeds 0, 1
    python -m benchmarks.signal --quick    # the MLP's 20-window cells, seed 0 (a smoke test)

Two signals, each in the sign convention "positive: a higher rate would have done better", averaged per
phase of the schedule (the rise: the first 30% of the run; the anneal in two halves):

- **rank**: Spearman's rho between the replicas' multipliers and their fitness, the evidence controller's
  per-window input, read from the stored HDET runs of `python -m benchmarks.quality` (the windows before
  the controller first moved, and the runs without auto-LR);
- **hypergradient**: the cosine between the gradient at the window's end and the window's step,
  -cos(g(theta_end), theta_end - theta_start), measured here with fixed OneCycle in one process on the mean
  gradient of the 4 shards (what `shared_grad` all-reduces). 0 is where an exact line search along the step
  would have stopped; positive: the step fell short.

Under `shared_grad` every replica applies its own rate to the same averaged update, so at a window's end
the replicas lie on one line through the centre, along the window's step: their losses are a noisy line
search along that step, and the hypergradient is the slope of the same line measured with the all-reduced
gradient instead of differences between the shards' loss levels. Measured only; no controller uses it yet.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from typing import Any

import torch
from torch.optim.lr_scheduler import OneCycleLR

from benchmarks import common, quality, workloads

PHASES = (("rise", 0.0, 0.3), ("anneal, first half", 0.3, 0.65), ("anneal, second half", 0.65, 1.01))
SHARDS = quality.REPLICAS


def _flat(tensors) -> torch.Tensor:
    return torch.cat([t.detach().reshape(-1).double() for t in tensors])


def hypergradient_run(
    workload: str, steps: int, sync_every: int, max_lr: float, seed: int
) -> list[tuple[float, float]]:
    """(progress, -cos(g_end, step)) for each window after the first: fixed OneCycle, the shards' mean
    gradient."""
    task, kind = workloads.build(workload)
    model = task.model(seed)
    params = list(model.parameters())
    optimizer = workloads.make_optimizer(kind, params, max_lr / 25.0, base=kind)
    scheduler = OneCycleLR(optimizer, max_lr=max_lr, total_steps=steps)
    shards = [task.batches(r, SHARDS, seed) for r in range(SHARDS)]
    out, start = [], _flat(params)
    for i in range(steps):
        optimizer.zero_grad(set_to_none=True)
        for batches in shards:
            (task.loss(model, next(batches)) / SHARDS).backward()
        if i and i % sync_every == 0:  # the gradient at the window's end point, before the next step
            g, step = _flat(p.grad for p in params), _flat(params) - start
            denom = float(g.norm() * step.norm())
            out.append((i / steps, -float(g @ step) / denom if denom > 0 else 0.0))
            start = _flat(params)
        optimizer.step()
        scheduler.step()
    return out


def rank_signal(
    runs: dict[str, dict[str, Any]], workload: str, horizon: str, k: int
) -> list[tuple[float, float]]:
    """(progress, rho) of the stored HDET windows before the controller first moved the rate (healthy
    windows only; the runs without auto-LR never move it)."""
    out = []
    for arm in ("hdet", "hold"):
        for seed in range(10):
            run = runs.get(f"{workload}/{horizon}/{seed}/{arm}/{k}")
            for rec in (run or {}).get("records", []):
                p = rec["params"]["lr"]
                if abs(p["offset"]) > 1e-12:
                    break
                if rec["excluded"] or rec["opening"] or p.get("signal") is None:
                    continue
                out.append((rec["step"] / rec["total_steps"], float(p["signal"])))
    return out


def by_phase(points: list[tuple[float, float]]) -> list[str]:
    cells = []
    for _, lo, hi in PHASES:
        vals = [v for f, v in points if lo <= f < hi]
        if not vals:
            cells.append("n/a")
            continue
        share = sum(v > 0 for v in vals) / len(vals)
        cells.append(f"{statistics.fmean(vals):+.2f} ({share:.0%} > 0, {len(vals)})")
    return cells


def run_benchmark(workloads_: tuple[str, ...], horizons: tuple[str, ...], seeds: tuple[int, ...]) -> str:
    from benchmarks.pool import read_results

    runs = read_results(common.results_dir("full") / "quality_runs.jsonl")
    stored = common.read_json(common.results_dir("full") / "quality.json")["cells"]
    rows = []
    for w in workloads_:
        for h in horizons:
            cell = stored.get(f"{w}/{h}")
            if cell is None:
                print(
                    f"[signal] {w}/{h}: no stored quality cell (run python -m benchmarks.quality)", flush=True
                )
                continue
            sync = quality.SYNC_EVERY["full"][w]
            steps = quality.HORIZONS["full"][h] * sync
            for name, shift in quality.STARTS.items():
                k = cell["oracle_k"] + shift
                hyper: list[tuple[float, float]] = []
                for s in seeds:
                    print(f"[signal] {w}/{h} {name}, seed {s}", flush=True)
                    hyper += hypergradient_run(w, steps, sync, quality.rate(w, k), s)
                rank = rank_signal(runs, w, h, k)
                rows.append([f"{w}, {quality.HORIZONS['full'][h]} windows", name, "rank", *by_phase(rank)])
                rows.append(["", "", "hypergradient", *by_phase(hyper)])
    m = common.machine()
    text = (
        f"Command: `{common.command_line()}`. Machine: {common.machine_line(m)}. Hypergradient: fixed "
        f"OneCycle, one process, the mean gradient of {SHARDS} shards, seeds {list(seeds)}; rank: the stored "
        "HDET runs of the quality benchmark (every seed stored). Each cell: mean over the phase's windows "
        "(share of windows above 0, number of windows); positive: a higher rate would have done better.\n\n"
        + common.table(["cell", "start", "signal", *(p[0] for p in PHASES)], rows)
        + "\n"
    )
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.signal", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the MLP's 20-window cells, seed 0")
    args = parser.parse_args(argv)
    if args.quick:
        text = run_benchmark(("mlp",), ("short",), (0,))
        print(text)
        return 0
    text = run_benchmark(tuple(quality.CENTRE), ("short", "long"), (0, 1))
    (common.results_dir("full") / "signal.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
