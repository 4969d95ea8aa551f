"""A stage's results as numbers: per-cell metric, ranks, mean rank, gaps to the reference, spread.

A `table` maps candidate -> cell -> metric, where a cell is one (seed, host) of the stage ("s1", "s1@a").
A failed cell is absent (or NaN). Everything here is a pure function of the table; no p-values, as the
protocol reports ranks, gaps and standard deviations.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

Table = dict[str, dict[str, float]]


def cell_key(seed: int, host: str | None = None) -> str:
    return f"s{seed}" if not host else f"s{seed}@{host}"


def clean(table: Table) -> Table:
    """Only finite values; candidates with none keep an empty row."""
    return {
        c: {k: float(v) for k, v in row.items() if v is not None and math.isfinite(v)}
        for c, row in table.items()
    }


def cell_ranks(table: Table, mode: str = "min") -> dict[str, dict[str, float]]:
    """Rank of each candidate within each cell (1 = best; ties share the average rank)."""
    table = clean(table)
    sign = 1.0 if mode == "min" else -1.0
    cells = sorted({k for row in table.values() for k in row})
    ranks: dict[str, dict[str, float]] = {c: {} for c in table}
    for cell in cells:
        entries = sorted((sign * row[cell], c) for c, row in table.items() if cell in row)
        i = 0
        while i < len(entries):
            j = i
            while j + 1 < len(entries) and entries[j + 1][0] == entries[i][0]:
                j += 1
            for _, c in entries[i : j + 1]:
                ranks[c][cell] = (i + j) / 2 + 1
            i = j + 1
    return ranks


def gap(value: float, reference: float, mode: str = "min") -> float:
    """How far behind the reference (positive = worse), in metric units."""
    return value - reference if mode == "min" else reference - value


@dataclass(frozen=True, slots=True)
class Summary:
    """One candidate's row of a stage."""

    metrics: dict[str, float]
    ranks: dict[str, float]
    mean: float | None
    std: float | None
    """Sample standard deviation over the candidate's cells (None with fewer than 2)."""
    mean_rank: float | None
    gaps: dict[str, float] = field(default_factory=dict)
    """Gap to the reference in each cell both have."""
    mean_gap: float | None = None


def summarize(table: Table, reference: str, mode: str = "min") -> dict[str, Summary]:
    table = clean(table)
    ranks = cell_ranks(table, mode)
    ref = table.get(reference, {})
    out = {}
    for c, row in table.items():
        values = list(row.values())
        gaps = {k: gap(v, ref[k], mode) for k, v in row.items() if k in ref}
        out[c] = Summary(
            metrics=dict(row),
            ranks=ranks[c],
            mean=statistics.fmean(values) if values else None,
            std=statistics.stdev(values) if len(values) > 1 else None,
            mean_rank=statistics.fmean(ranks[c].values()) if ranks[c] else None,
            gaps=gaps,
            mean_gap=statistics.fmean(gaps.values()) if gaps else None,
        )
    return out


def order_by_mean_rank(summaries: dict[str, Summary]) -> list[str]:
    """Candidates best first; ties broken by name. Candidates without results last."""

    def key(c: str) -> tuple:
        s = summaries[c]
        return (s.mean_rank is None, s.mean_rank or 0.0, c)

    return sorted(summaries, key=key)
