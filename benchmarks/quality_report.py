"""Tables, target checks and plots of the quality benchmark, from its summary (`quality.json`)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from benchmarks import common

LOW, BEST, HIGH = -2, 0, 2
DEFAULT_HDET = "HDET slope/local"
FIXED = "fixed"


class Workload:
    """One workload's runs, looked up by (method, start shift from the oracle index)."""

    def __init__(self, name: str, info: dict[str, Any], runs: dict[str, dict[str, Any]], seeds: list[int]):
        self.name, self.info, self.seeds = name, info, seeds
        self.best = info["oracle_k"]
        self.runs = {k: v for k, v in runs.items() if k.startswith(name + "/")}

    def values(self, method: str, shift: int) -> list[float]:
        out = []
        for s in self.seeds:
            run = self.runs.get(f"{self.name}/{s}/{method}/{self.best + shift}")
            if run is not None:
                out.append(run["metric"] if not run["diverged"] else math.nan)
        return out

    def stat(self, method: str, shift: int) -> tuple[float, float, int]:
        vals = self.values(method, shift)
        m, sd = common.mean_spread(vals)
        return m, sd, len(vals)

    @property
    def oracle(self) -> float:
        return self.stat(FIXED, BEST)[0]

    def cell(self, method: str, shift: int) -> str:
        vals = self.values(method, shift)
        if not vals:
            return "—"
        dead = sum(not math.isfinite(v) for v in vals)
        if dead:
            return f"diverged in {dead}/{len(vals)}"
        m, sd = common.mean_spread(vals)
        return f"{m:.4g} ± {sd:.2g} ({m / self.oracle:.3f}x)"


def _rate(k: int) -> float:
    return 1e-4 * 10 ** (k / 2)


def grid_table(w: Workload) -> str:
    rows = []
    for k in range(7):
        vals = [w.runs.get(f"{w.name}/{s}/{FIXED}/{k}", {}).get("metric", math.nan) for s in w.seeds]
        m, sd = common.mean_spread(vals)
        mark = " (oracle)" if k == w.best else ""
        rows.append([f"{_rate(k):.3g}{mark}", common.fmt_ms(m, sd), ", ".join(f"{v:.4g}" for v in vals)])
    return common.table(["max rate", f"{w.info['task']} final metric (mean ± sd)", "per seed"], rows)


def main_table(w: Workload, variants: list[str]) -> str:
    steps = w.info["steps"]
    rows = [["oracle: grid of 7 fixed rates, best", "7.0", "—", w.cell(FIXED, BEST), "—"],
            ["fixed OneCycle (DDP)", "1.0", w.cell(FIXED, LOW), w.cell(FIXED, BEST), w.cell(FIXED, HIGH)]]
    rows += [[v, "1.0", w.cell(v, LOW), w.cell(v, BEST), w.cell(v, HIGH)] for v in variants]
    rows.append(["Ray Tune PBT, 4 trials x 1 worker", "1.0", w.cell("PBT", LOW), "—", w.cell("PBT", HIGH)])
    return (common.table(["method", "compute (x one run)", "from 10x low", "from the oracle's rate", "from 10x high"],
                         rows)
            + f"\n\nOne run = 4 replicas x {steps} steps = {4 * steps} worker-steps. Cells: mean ± sd over seeds "
              "(ratio to the oracle's mean).")


def ablation_table(w: Workload) -> str:
    rows = [["conservative baseline: fixed OneCycle at the oracle's rate", w.cell(FIXED, BEST)],
            ["aggressive baseline: fixed OneCycle at 10x", w.cell(FIXED, HIGH)],
            ["HDET without auto-LR at 10x, paper spread (linear 1/9, shared_grad)",
             w.cell("HDET no-auto, paper spread", HIGH)],
            ["HDET full at 10x, paper spread + paper controller",
             w.cell("HDET full (paper ctrl), paper spread", HIGH)],
            ["HDET without auto-LR at 10x, our spread (log 2, local)", w.cell("HDET no-auto/local", HIGH)],
            ["HDET full at 10x, our spread + slope controller", w.cell(DEFAULT_HDET, HIGH)]]
    return common.table(["row (paper's ablation, rebuilt)", "final metric (ratio to oracle)"], rows)


HEADLINE = (("fixed OneCycle (DDP)", FIXED), ("HDET default (slope/local)", DEFAULT_HDET),
            ("HDET + opening range test 10x", "HDET slope/local + opening 10x"),
            ("HDET without auto-LR (log 2, local)", "HDET no-auto/local"), ("Ray Tune PBT (4 trials)", "PBT"))


def headline_table(workloads: list[Workload]) -> str:
    """Final metric as a ratio to the oracle (1.00 = as good as the best of 7 fixed-rate runs; lower is better)."""
    rows = []
    for w in workloads:
        for label, shift in (("10x too low", LOW), ("oracle's rate", BEST), ("10x too high", HIGH)):
            row = [w.name, label]
            for _, method in HEADLINE:
                m, sd, n = w.stat(method, shift)
                row.append("—" if n == 0 else "diverged" if not math.isfinite(m) else f"{m / w.oracle:.3f} ± {sd / w.oracle:.3f}")
            rows.append(row)
    return common.table(["workload", "start"] + [label for label, _ in HEADLINE], rows)


def targets(w: Workload) -> list[tuple[str, str, str]]:
    """(target, measured, verdict) for the default HDET configuration."""
    out = []
    for label, shift in (("10x too low", LOW), ("10x too high", HIGH)):
        h, _, n = w.stat(DEFAULT_HDET, shift)
        f, _, _ = w.stat(FIXED, shift)
        ok = n > 0 and math.isfinite(h) and h <= 1.05 * w.oracle
        fixed_out = not (math.isfinite(f) and f <= 1.05 * w.oracle)
        out.append((f"{w.name}: from {label}, HDET within 5% of the oracle, fixed OneCycle not",
                    f"HDET {_ratio(h, w.oracle)}, fixed {_ratio(f, w.oracle)}",
                    _verdict(ok and fixed_out)))
    h, _, n = w.stat(DEFAULT_HDET, BEST)
    out.append((f"{w.name}: from the oracle's rate, HDET no more than 1% worse",
                f"HDET {_ratio(h, w.oracle)}", _verdict(n > 0 and math.isfinite(h) and h <= 1.01 * w.oracle)))
    for label, shift in (("10x too low", LOW), ("10x too high", HIGH)):
        h, _, _ = w.stat(DEFAULT_HDET, shift)
        p, _, n = w.stat("PBT", shift)
        beats = n > 0 and math.isfinite(h) and (not math.isfinite(p) or h < p)
        out.append((f"{w.name}: from {label}, HDET beats PBT at equal compute",
                    f"HDET {_fmt(h)}, PBT {_fmt(p)}", _verdict(beats) if n else "not measured"))
    return out


def _fmt(x: float) -> str:
    return "diverged/missing" if not math.isfinite(x) else f"{x:.4g}"


def _ratio(x: float, oracle: float) -> str:
    return "diverged/missing" if not math.isfinite(x) else f"{x:.4g} ({x / oracle:.3f}x)"


def _verdict(ok: bool) -> str:
    return "met" if ok else "missed"


def plot(w: Workload, variants: list[str], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    ks = list(range(7))
    stats = [common.mean_spread([w.runs.get(f"{w.name}/{s}/{FIXED}/{k}", {}).get("metric", math.nan)
                                 for s in w.seeds]) for k in ks]
    left.errorbar([_rate(k) for k in ks], [m for m, _ in stats], yerr=[sd for _, sd in stats], marker="o",
                  color="black", label="fixed OneCycle (DDP), grid")
    off_grid = [(w.best + shift, w.stat(FIXED, shift)) for shift in (LOW, HIGH) if not 0 <= w.best + shift < 7]
    if off_grid:
        left.errorbar([_rate(k) for k, _ in off_grid], [st[0] for _, st in off_grid],
                      yerr=[st[1] for _, st in off_grid], marker="x", color="black", linestyle="none",
                      label="fixed OneCycle (DDP), off the grid")
    for v, marker in zip(variants, "s^vD<>p"):
        xs, ys, es = [], [], []
        for shift in (LOW, BEST, HIGH):
            m, sd, n = w.stat(v, shift)
            if n and math.isfinite(m):
                xs.append(_rate(w.best + shift))
                ys.append(m)
                es.append(sd)
        left.errorbar(xs, ys, yerr=es, marker=marker, linestyle="none", label=v, alpha=0.8)
    left.set_xscale("log")
    left.set_xlabel("max rate the run starts at")
    left.set_ylabel(f"final {w.info['task']} validation metric")
    finite = [m for m, _ in stats if math.isfinite(m)]
    if finite:
        left.set_ylim(min(finite) * 0.9, min(max(finite), 3 * min(finite)) * 1.1)
    left.legend(fontsize=6)
    left.set_title(f"{w.name}: final metric by start rate")
    for shift, color in ((LOW, "tab:blue"), (BEST, "tab:green"), (HIGH, "tab:red")):
        for s in w.seeds:
            run = w.runs.get(f"{w.name}/{s}/{DEFAULT_HDET}/{w.best + shift}")
            if run and run["centres"]:
                start = _rate(w.best + shift)
                right.plot(range(1, len(run["centres"]) + 1), [start * c for c in run["centres"]], color=color,
                           alpha=0.7, label=f"start {start:.2g}" if s == w.seeds[0] else None)
    right.axhline(_rate(w.best), color="black", linestyle="--", label="oracle rate")
    right.set_yscale("log")
    right.set_xlabel("window")
    right.set_ylabel("max rate after the window's decision")
    right.set_title(f"{w.name}: {DEFAULT_HDET} rate trajectory (all seeds)")
    right.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def report(summary: dict[str, Any], variants: list[str] | tuple[str, ...], out: Path) -> str:
    variants = list(variants)
    img_dir = common.IMAGES if summary["mode"] == "full" else out / "img"
    parts = [(f"Command: `{summary['command']}`. Machine: {common.machine_line(summary['machine'])}. "
             f"Seeds {summary['seeds']}, N = {summary['replicas']} replicas, rates fixed before running "
             "(grid 1e-4 ... 1e-1 in steps of sqrt(10); starts = oracle / 10, oracle, oracle x 10).")]
    target_rows = []
    workloads = [Workload(name, info, summary["runs"], summary["seeds"]) for name, info in summary["workloads"].items()]
    (out / "headline.md").write_text(
        f"Command: `{summary['command']}`. Machine: {common.machine_line(summary['machine'])}. "
        f"Seeds {summary['seeds']}; N = {summary['replicas']}; every method runs one run's compute (the oracle 7). "
        "Cells: final validation metric / the oracle's, mean ± sd over seeds (lower is better; 1.05 = 5% worse).\n\n"
        + headline_table(workloads) + "\n")
    for w in workloads:
        name, info = w.name, w.info
        img = img_dir / f"quality_{name}.png"
        plot(w, variants, img)
        parts += [f"### {name} ({info['steps']} steps per replica, sync every {info['sync_every']})",
                  "Oracle grid:", grid_table(w), "Methods:", main_table(w, variants),
                  "The paper's ablation, rebuilt:", ablation_table(w), f"![{name}](img/{img.name})"]
        target_rows += targets(w)
    parts += ["### Targets (default HDET: slope controller, local fan-out, log spread 2)",
              common.table(["target", "measured", "verdict"], target_rows)]
    text = "\n\n".join(parts) + "\n"
    (out / "quality.md").write_text(text)
    return text
