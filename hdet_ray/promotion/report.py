"""The readable record: Markdown and a PNG plot (metric vs budget per candidate), from the JSON record.

Per stage and cell: the metric and rank; per candidate: mean, standard deviation over cells, mean rank,
mean gap to the reference; who advanced and by which rule, who stopped, by which gate and by how much;
the worker-hours per stage and the counterfactuals.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hdet_ray.promotion.protocol import Study
from hdet_ray.promotion.table import summarize


def _f(x: float | None, digits: int = 4) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def markdown(study: Study, record: dict[str, Any], tables: dict[str, dict]) -> str:
    ref = study.retained.reference
    lines = [
        f"# Study `{study.name}`",
        "",
        (
            f"Metric `{study.metric}` ({'lower' if study.mode == 'min' else 'higher'} is better); reference "
            f"`{ref}`, controls {', '.join(f'`{c}`' for c in study.retained.controls) or 'none'}."
        ),
        f"Definition frozen at {record['frozen_at']}, SHA-256 `{record['fingerprint']}`.",
        "",
        "Gates (declared before stage 1):",
        "",
    ]
    lines += [
        f"- `{g.rule}` margin={g.margin} k={g.k} stages={g.stages or 'all'} "
        f"candidates={g.candidates or 'all challengers'}"
        for g in study.gates
    ] or ["- none"]
    for stage in study.stages:
        decision = record["decisions"].get(stage.name)
        table = tables.get(stage.name) or {}
        if not table:
            continue
        s = summarize(table, ref, study.mode)
        cells = sorted({k for row in table.values() for k in row})
        lines += [
            "",
            f"## Stage `{stage.name}`: {stage.steps} steps, seeds {stage.seeds}"
            + (f", hosts {stage.hosts}" if stage.hosts else "")
            + f", start: {stage.start}",
            "",
        ]
        lines.append(
            "| candidate | "
            + " | ".join(f"{c} (rank)" for c in cells)
            + " | mean | std | mean rank | mean gap | outcome |"
        )
        lines.append("|---" * (len(cells) + 6) + "|")
        order = decision["order"] if decision else sorted(table)
        for cand in order:
            row = s[cand]
            out = decision["outcomes"][cand] if decision else None
            verdict = (
                "-"
                if out is None
                else (f"{'advanced' if out['advanced'] else 'stopped'}: {out['rule']} ({out['reason']})")
            )
            lines.append(
                f"| {cand} | "
                + " | ".join(
                    f"{_f(row.metrics.get(c))} ({row.ranks[c]:g})" if c in row.metrics else "failed"
                    for c in cells
                )
                + (
                    f" | {_f(row.mean)} | {_f(row.std)} | {_f(row.mean_rank, 2)} | "
                    f"{_f(row.mean_gap)} | {verdict} |"
                )
            )
        if decision and decision.get("winner"):
            lines += ["", f"Winner: **{decision['winner']}** (best mean rank among the accepted)."]
    budget = record.get("budget")
    if budget:
        lines += [
            "",
            "## Budget (worker-hours)",
            "",
            "| stage | candidates | cells | spent | mean per cell |",
            "|---|---|---|---|---|",
        ]
        lines += [
            f"| {b['stage']} | {b['candidates']} | {b['cells']} | {b['worker_hours']:.6f} | "
            f"{_f(b['mean_cell_hours'], 6)} |"
            for b in budget["stages"]
        ]
        lines += [
            f"| **total** | | | **{budget['spent_hours']:.6f}** | |",
            "",
            "Counterfactuals: had every candidate that ran a stage continued through every later stage:",
            "",
            "| from stage | candidates | later stages | study total |",
            "|---|---|---|---|",
        ]
        lines += [
            f"| {c['from_stage']} | {c['candidates']} | {_f(c['later_hours'], 6)} | "
            f"{_f(c['total_hours'], 6)} |"
            for c in budget["counterfactuals"]
        ]
    failed = [c for c in record["cells"].values() if c["status"] == "failed"]
    if failed:
        lines += ["", "## Failed cells", ""]
        lines += [
            f"- `{c['id']}` after {len(c['attempts'])} attempt(s): {c['attempts'][-1]['error']}"
            for c in failed
        ]
    return "\n".join(lines) + "\n"


def plot(study: Study, tables: dict[str, dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    budgets = {s.name: s.steps for s in study.stages}
    for cand in [c.name for c in study.candidates]:
        xs, ys, es = [], [], []
        for stage in study.stages:
            row = (tables.get(stage.name) or {}).get(cand)
            if not row:
                continue
            s = summarize({cand: row}, cand, study.mode)[cand]
            xs.append(budgets[stage.name])
            ys.append(s.mean)
            es.append(s.std or 0.0)
        if xs:
            style = "-o" if cand not in study.retained_set else "--s"
            ax.errorbar(xs, ys, yerr=es, fmt=style, capsize=3, label=cand)
    ax.set_xscale("log")
    ax.set_xlabel("budget (steps per replica)")
    ax.set_ylabel(f"{study.metric} (mean +- std over cells)")
    ax.set_title(f"study {study.name}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
