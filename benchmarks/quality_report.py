"""Tables, target checks and plots of the quality benchmark, from its summary (`quality.json`)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from benchmarks import common

START_SHIFTS = {"10x too low": -2, "oracle's rate": 0, "10x too high": 2}
STARTED = ("fixed", "hdet", "hold", "pbt")
LRFREE = ("prodigy", "dadapt")
NAMES = {
    "fixed": "fixed OneCycle (DDP)",
    "hdet": "HDET default",
    "hold": "HDET without auto-LR",
    "pbt": "Ray Tune PBT",
    "prodigy": "Prodigy",
    "dadapt": "D-Adaptation",
}


class Cell:
    """One workload at one horizon: its runs, looked up by (arm, start shift from the oracle index)."""

    def __init__(self, name: str, info: dict[str, Any], runs: dict[str, dict[str, Any]], seeds: list[int]):
        self.name, self.info, self.seeds = name, info, seeds
        self.best = info["oracle_k"]
        self.runs = runs

    def values(self, arm: str, shift: int | None) -> list[float]:
        k = "" if shift is None else self.best + shift
        out = []
        for s in self.seeds:
            r = self.runs.get(f"{self.name}/{s}/{arm}/{k}")
            if r is not None:
                out.append(r["metric"] if not r.get("diverged") and math.isfinite(r["metric"]) else math.inf)
        return out

    def ratios(self, arm: str, shift: int | None) -> list[float]:
        return [v / self.oracle for v in self.values(arm, shift)]

    @property
    def oracle(self) -> float:
        vals = self.values("fixed", 0)
        return sum(vals) / len(vals) if vals else math.nan

    def stat(self, arm: str, shift: int | None) -> tuple[float, float, int]:
        r = self.ratios(arm, shift)
        if not r:
            return math.nan, math.nan, 0
        if not all(math.isfinite(x) for x in r):
            return math.inf, math.nan, len(r)
        m, sd = common.mean_spread(r)
        return m, sd, len(r)

    def cell(self, arm: str, shift: int | None) -> str:
        m, sd, n = self.stat(arm, shift)
        if n == 0:
            return "not run"
        if math.isinf(m):
            dead = sum(math.isinf(x) for x in self.ratios(arm, shift))
            return f"diverged in {dead}/{n}"
        return f"{m:.3f} ± {sd:.3f}" + (f" (n={n})" if n < len(self.seeds) else "")


def cell_table(c: Cell) -> str:
    rows = []
    for start, shift in START_SHIFTS.items():
        rows.append([f"{start} ({_rate(c, shift):.3g})"] + [c.cell(arm, shift) for arm in STARTED])
    rows.append(
        ["no rate (LR-free): Prodigy / D-Adaptation", c.cell("prodigy", None), c.cell("dadapt", None), "", ""]
    )
    return common.table(["start (max rate)"] + [NAMES[a] for a in STARTED], rows)


def grid_table(c: Cell) -> str:
    rows = []
    for k, r in enumerate(c.info["grid"]):
        vals = [c.runs.get(f"{c.name}/{s}/fixed/{k}", {}).get("metric", math.nan) for s in c.seeds]
        m, sd = common.mean_spread(vals)
        rows.append(
            [
                f"{r:.3g}",
                common.fmt_ms(m, sd) if math.isfinite(m) else "dead/NaN",
                f"{m / c.oracle:.3f}" if math.isfinite(m) else "—",
                "oracle" if k == c.best else "",
            ]
        )
    return common.table(["max rate", "final metric (mean ± sd)", "/ oracle", ""], rows)


def headline_table(cells: list[Cell]) -> str:
    rows = []
    for c in cells:
        for start, shift in START_SHIFTS.items():
            rows.append(
                [
                    c.info["workload"],
                    f"{c.info['windows']} ({len(c.seeds)} seeds)",
                    start,
                    c.cell("fixed", shift),
                    c.cell("hdet", shift),
                    c.cell("hold", shift),
                ]
            )
        rows.append(
            [
                c.info["workload"],
                f"{c.info['windows']} ({len(c.seeds)} seeds)",
                "LR-free (no rate)",
                f"Prodigy {c.cell('prodigy', None)}",
                f"D-Adaptation {c.cell('dadapt', None)}",
                "",
            ]
        )
    return common.table(["workload", "windows", "start", NAMES["fixed"], NAMES["hdet"], NAMES["hold"]], rows)


def targets(c: Cell) -> list[list[str]]:
    """The issue's targets for one cell, each with what was measured and a verdict."""
    out = []
    m, _sd, n = c.stat("hdet", 0)
    if n:
        out.append([c.name, "at the oracle's rate: HDET <= 1.01x", f"{m:.3f}", _verdict(m <= 1.01)])
    for start, shift in START_SHIFTS.items():
        hm, hsd, hn = c.stat("hdet", shift)
        fm, fsd, fn = c.stat("fixed", shift)
        if hn and fn:
            slack = max(x for x in (hsd, fsd, 0.0) if math.isfinite(x))
            out.append(
                [
                    c.name,
                    f"{start}: HDET no worse than fixed by > 1 sd",
                    f"{hm:.3f} vs {fm:.3f} (sd {slack:.3f})",
                    _verdict(hm <= fm + slack),
                ]
            )
    bound = 1.10 if c.info["windows"] < 60 else 1.05
    for start in ("10x too low", "10x too high"):
        hm, _, hn = c.stat("hdet", START_SHIFTS[start])
        if hn:
            out.append([c.name, f"{start}: HDET <= {bound:.2f}x", f"{hm:.3f}", _verdict(hm <= bound)])
            rivals = [
                (NAMES[a], c.stat(a, None if a in LRFREE else START_SHIFTS[start])[0])
                for a in ("prodigy", "dadapt", "pbt")
            ]
            for name, rm in rivals:
                if math.isfinite(rm) or math.isinf(rm):
                    out.append(
                        [c.name, f"{start}: HDET ahead of {name}", f"{hm:.3f} vs {rm:.3f}", _verdict(hm < rm)]
                    )
    return out


def _rate(c: Cell, shift: int) -> float:
    k = c.best + shift
    return c.info["oracle_rate"] * 10 ** ((k - c.best) / 2)


def _verdict(ok: bool) -> str:
    return "met" if ok else "**missed**"


def plot(c: Cell, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    grid = c.info["grid"]
    stats = [
        common.mean_spread(
            [c.runs.get(f"{c.name}/{s}/fixed/{k}", {}).get("metric", math.nan) for s in c.seeds]
        )
        for k in range(len(grid))
    ]
    left.errorbar(
        grid,
        [m for m, _ in stats],
        yerr=[sd for _, sd in stats],
        marker="o",
        color="black",
        label=NAMES["fixed"],
    )
    for arm, marker in (("hdet", "s"), ("hold", "^"), ("pbt", "v")):
        xs, ys = [], []
        for shift in START_SHIFTS.values():
            vals = [v for v in c.values(arm, shift) if math.isfinite(v)]
            if vals:
                xs.append(_rate(c, shift))
                ys.append(sum(vals) / len(vals))
        if xs:
            left.plot(xs, ys, marker=marker, linestyle="none", label=NAMES[arm], markersize=8, alpha=0.8)
    for arm, style in (("prodigy", ":"), ("dadapt", "-.")):
        vals = [v for v in c.values(arm, None) if math.isfinite(v)]
        if vals:
            left.axhline(sum(vals) / len(vals), linestyle=style, color="grey", label=NAMES[arm])
    left.set_xscale("log")
    left.set_xlabel("max rate the run starts at")
    left.set_ylabel("final validation metric (mean over seeds)")
    finite = [m for m, _ in stats if math.isfinite(m)]
    lrfree = [v for arm in LRFREE for v in c.values(arm, None) if math.isfinite(v)]
    if finite:
        low = min(finite + lrfree)  # the LR-free lines stay in view when they beat the grid
        left.set_ylim(low * 0.9, min(max(finite), 3 * min(finite)) * 1.1)
    left.legend(fontsize=7)
    left.set_title(f"{c.name}: final metric by start rate")
    for shift, color in zip(START_SHIFTS.values(), ("tab:blue", "tab:green", "tab:red"), strict=True):
        for s in c.seeds:
            r = c.runs.get(f"{c.name}/{s}/hdet/{c.best + shift}")
            if r and r.get("centres"):
                start = _rate(c, shift)
                right.plot(
                    range(1, len(r["centres"]) + 1),
                    [start * x for x in r["centres"]],
                    color=color,
                    alpha=0.7,
                    label=f"start {start:.2g}" if s == c.seeds[0] else None,
                )
    right.axhline(c.info["oracle_rate"], color="black", linestyle="--", label="oracle rate")
    right.set_yscale("log")
    right.set_xlabel("window")
    right.set_ylabel("max rate after the window's decision")
    right.set_title(f"{c.name}: HDET default's rate, every seed")
    right.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def report(summary: dict[str, Any], out: Path) -> str:
    img_dir = common.IMAGES if summary["mode"] == "full" else out / "img"
    machine = common.machine_line(summary["machine"])
    cells = [
        Cell(name, info, summary["runs"], info.get("seeds", summary["seeds"]))
        for name, info in summary["cells"].items()
    ]
    lead = (
        f"Command: `{summary['command']}`. Machine: {machine}. Seeds {summary['seeds']}, N = "
        f"{summary['replicas']} gloo processes, the same steps for every method. Cells: final validation "
        "metric / the oracle's (the best fixed rate of the grid, mean over seeds), mean ± sd over seeds; "
        "lower is better, 1.05 = 5% worse."
    )
    (out / "headline.md").write_text(lead + "\n\n" + headline_table(cells) + "\n")
    parts, target_rows = [lead], []
    for c in cells:
        img = img_dir / f"quality_{c.name.replace('/', '_')}.png"
        plot(c, img)
        parts += [
            f"### {c.name}: {c.info['windows']} windows of {c.info['sync_every']} steps, seeds {c.seeds}",
            "Oracle grid (fixed OneCycle, DDP):",
            grid_table(c),
            "From each start:",
            cell_table(c),
            f"![{c.name}](img/{img.name})",
        ]
        target_rows += targets(c)
    parts += ["### Targets", common.table(["cell", "target", "measured", "verdict"], target_rows)]
    text = "\n\n".join(parts) + "\n"
    (out / "quality.md").write_text(text)
    return text
