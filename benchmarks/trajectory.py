"""Plot one run's trajectory, to read why HDET moved in a benchmark cell.

    python -m benchmarks.trajectory mlp/short/0/hdet/6                 # a key of the quality benchmark
    python -m benchmarks.trajectory KEY --results path/to/runs.jsonl --out run.png

Three panels over the sync windows: the rate multipliers (the centre's, relative to the start rate, and every
replica's), each replica's window loss with the replicas excluded as unhealthy marked (and why, in the
legend), rollbacks as vertical lines; and the converged model's validation metric after each window (where the
run recorded one). Works on any JSON lines file whose rows hold `key` and `records`
(`WindowRecord.to_dict()`).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

from benchmarks import common


def load(results: Path, key: str) -> dict[str, Any]:
    for line in results.read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            if row.get("key") == key:
                return row
    raise SystemExit(f"no run {key!r} in {results}")


def loss_scale(records: list[dict[str, Any]]) -> str:
    """The loss panel's axis: 'log', or 'linear' where a window loss is at or below zero (a log-density's,
    which a log axis would drop)."""
    seen = [x for r in records for x in r["losses"] if x is not None and math.isfinite(x)]
    return "log" if seen and min(seen) > 0 else "linear"


def plot(row: dict[str, Any], path: Path, param: str = "lr") -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = row["records"]
    if not records:
        raise SystemExit(f"run {row['key']!r} has no HDET records (a fixed or LR-free run?)")
    windows = [r["window"] for r in records]
    fig, (rates, losses, metric) = plt.subplots(3, 1, figsize=(9, 9), sharex=True)
    centre = [math.exp(r["params"][param]["new_offset"]) for r in records]
    rates.plot(windows, centre, color="black", linewidth=2, label="centre after the decision")
    n = len(records[0]["losses"])
    for rank in range(n):
        mults = [
            math.exp(r["params"][param]["offset"]) * r["params"][param]["multipliers"][rank] for r in records
        ]
        rates.plot(windows, mults, linestyle="none", marker=".", alpha=0.6, label=f"replica {rank}")
    rates.set_yscale("log")
    rates.set_ylabel(f"{param} / the start's")
    rates.set_title(f"{row['key']}: final metric {row.get('metric', math.nan):.4g}")
    for rank in range(n):
        losses.plot(
            windows,
            [r["losses"][rank] if r["losses"][rank] is not None else math.nan for r in records],
            marker=".",
            alpha=0.7,
            label=f"replica {rank}",
        )
    reasons: dict[str, list[tuple[int, float]]] = {}
    for r in records:
        for rank, why in r.get("reasons", {}).items():
            loss = r["losses"][int(rank)]
            reasons.setdefault(why.split(" (")[0], []).append(
                (r["window"], loss if loss is not None and math.isfinite(loss) else r.get("start_loss", 1.0))
            )
    for why, points in reasons.items():
        losses.plot(
            [w for w, _ in points],
            [v for _, v in points],
            "x",
            color="red",
            markersize=9,
            label=f"excluded: {why} ({len(points)})",
        )
    for r in records:
        if r.get("rollback"):
            for ax in (rates, losses, metric):
                ax.axvline(r["window"], color="red", alpha=0.4)
    losses.set_yscale(loss_scale(records))
    losses.set_ylabel("window mean training loss")
    values = [
        (r["window"], v)
        for r in records
        for k, v in r.get("metrics", {}).items()
        if k not in ("elapsed_s",) and isinstance(v, (int, float))
    ]
    if values:
        metric.plot([w for w, _ in values], [v for _, v in values], marker="o", color="tab:purple")
    metric.set_ylabel("validation metric (converged)")
    metric.set_xlabel("sync window (red lines: rollbacks)")
    for ax in (rates, losses):
        ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.trajectory", description=__doc__.splitlines()[0]
    )
    parser.add_argument("key", help="the run's key, e.g. mlp/short/0/hdet/6")
    parser.add_argument("--results", type=Path, default=common.RESULTS / "full" / "quality_runs.jsonl")
    parser.add_argument("--out", type=Path, help="the PNG (default: trajectory_<key>.png here)")
    parser.add_argument("--param", default="lr", help="which explored hyperparameter to plot")
    args = parser.parse_args(argv)
    out = args.out or Path(f"trajectory_{args.key.replace('/', '_')}.png")
    print(plot(load(args.results, args.key), out, args.param))
    return 0


if __name__ == "__main__":
    sys.exit(main())
