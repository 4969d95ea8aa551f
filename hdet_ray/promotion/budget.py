"""Budget accounting in worker-hours, against counterfactuals.

A cell's cost is its workers x wall seconds, summed over every attempt (a crashed attempt costs too).
Spent per stage = the sum over its cells. The counterfactual "continue everyone from stage k" is what
the study would have cost had every candidate that ran stage k also run every later stage:

    later_k = sum_{j>k} n_k * cells_per_candidate_j * mean_cell_cost_j
    total_k = spent(stages <= k) + later_k

(mean_cell_cost_j is measured at stage j). In the case study's terms: 169.2 GPU-hours spent, against
192 (`later` from the 60-min stage: 4 candidates x 48) and 432 (from the 10-min stage: 9 x 48).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from hdet_ray.promotion.protocol import Study


@dataclass(frozen=True, slots=True)
class StageBudget:
    stage: str
    candidates: int
    cells: int
    worker_hours: float
    mean_cell_hours: float | None


@dataclass(frozen=True, slots=True)
class Counterfactual:
    from_stage: str
    candidates: int
    later_hours: float | None
    """Cost of running all `candidates` through every later stage (None: a later stage has no measure)."""
    total_hours: float | None
    """Spent up to and including `from_stage`, plus `later_hours`."""


@dataclass(frozen=True, slots=True)
class Budget:
    stages: list[StageBudget]
    spent_hours: float
    counterfactuals: list[Counterfactual]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def cells_per_candidate(study: Study, stage_index: int) -> int:
    stage = study.stages[stage_index]
    return len(stage.seeds) * max(len(stage.hosts), 1)


def account(study: Study, cells: Iterable[Mapping[str, Any]]) -> Budget:
    """`cells`: records with `stage`, `candidate` and `worker_seconds` (all attempts)."""
    by_stage: dict[str, list[Mapping[str, Any]]] = {s.name: [] for s in study.stages}
    for cell in cells:
        by_stage[cell["stage"]].append(cell)
    stages = []
    for s in study.stages:
        rows = by_stage[s.name]
        hours = [float(r["worker_seconds"]) / 3600.0 for r in rows]
        stages.append(
            StageBudget(
                s.name,
                len({r["candidate"] for r in rows}),
                len(rows),
                sum(hours),
                statistics.fmean(hours) if hours else None,
            )
        )
    counterfactuals = []
    spent_so_far = 0.0
    for k, sb in enumerate(stages):
        spent_so_far += sb.worker_hours
        if sb.cells == 0:
            break
        later: float | None = 0.0
        for j in range(k + 1, len(stages)):
            if stages[j].mean_cell_hours is None:
                later = None
                break
            later += sb.candidates * cells_per_candidate(study, j) * stages[j].mean_cell_hours
        counterfactuals.append(
            Counterfactual(sb.stage, sb.candidates, later, None if later is None else spent_so_far + later)
        )
    return Budget(stages, sum(s.worker_hours for s in stages), counterfactuals)
