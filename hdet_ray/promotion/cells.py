"""From a study to its cells: one job spec per (candidate, seed, host, stage).

A cell's job is the study's `base` merged with the candidate's `overrides`, with the cell's `seed` and
the stage's budget. A cell of a `start: continue` stage, for a `continuable` candidate, resumes the model
and optimizer state of the same candidate's previous-stage cell at the same position (seed/host index,
wrapping) and trains the extra steps only (`stage.steps - previous.steps`) under a fresh schedule over
those steps (a warm restart), with its own seed for the data order. Everything else restarts.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from hdet_ray.promotion.protocol import Study, StudyError, merge
from hdet_ray.promotion.table import cell_key
from hdet_ray.spec import JobSpec, SpecError


@dataclass(frozen=True, slots=True)
class CellJob:
    id: str
    """'<stage>/<candidate>/<cell>', the key in the record."""
    stage: str
    candidate: str
    seed: int
    host: str | None
    spec: dict[str, Any]
    """The validated job spec (its `steps` is what this cell trains: the extra steps if continued)."""
    budget_steps: int
    """The stage's budget: total steps behind this cell's metric."""
    continue_from: str | None
    """The previous-stage cell whose checkpoint this one resumes, if any."""
    metric: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def cell_spec(study: Study, candidate: str, seed: int, steps: int) -> dict[str, Any]:
    data = merge(study.base, study.candidate(candidate).overrides)
    data = merge(data, {"seed": seed, "steps": steps})
    return JobSpec.parse(data, f"candidate {candidate!r}").model_dump(mode="json")


def stage_cells(
    study: Study, stage_index: int, candidates: list[str], finished: Collection[str] | None = None
) -> list[CellJob]:
    """The stage's cells for `candidates`. A cell whose previous-stage cell is not in `finished` (when
    given) restarts instead of continuing."""
    stage = study.stages[stage_index]
    prev = study.stages[stage_index - 1] if stage_index > 0 else None
    places = [(seed, host) for seed in stage.seeds for host in (stage.hosts or [None])]
    prev_places = [(s, h) for s in prev.seeds for h in (prev.hosts or [None])] if prev else []
    jobs = []
    for c in candidates:
        resume = stage.start == "continue" and study.candidate(c).continuable
        for i, (seed, host) in enumerate(places):
            steps, continue_from = stage.steps, None
            if resume:
                p_seed, p_host = prev_places[i % len(prev_places)]
                continue_from = f"{prev.name}/{c}/{cell_key(p_seed, p_host)}"
                if finished is not None and continue_from not in finished:
                    continue_from = None
                else:
                    steps = stage.steps - prev.steps
            key = cell_key(seed, host)
            jobs.append(
                CellJob(
                    f"{stage.name}/{c}/{key}",
                    stage.name,
                    c,
                    seed,
                    host,
                    cell_spec(study, c, seed, steps),
                    stage.steps,
                    continue_from,
                    study.metric,
                )
            )
    return jobs


def validate_cells(study: Study, max_replicas: int | None = None) -> None:
    """Build every candidate's job for every stage now, so a bad override fails before anything runs."""
    names = [c.name for c in study.candidates]
    for k, stage in enumerate(study.stages):
        try:
            jobs = stage_cells(study, k, names)
        except SpecError as e:
            raise StudyError(f"stages.{k} ({stage.name}): {e}") from None
        for job in jobs:
            if max_replicas is not None and job.spec["replicas"] > max_replicas:
                raise StudyError(
                    f"candidates.{job.candidate}: replicas={job.spec['replicas']}, but this "
                    f"executor runs at most {max_replicas} (use the run_job executor)"
                )


def checkpoint_path(root: Path, cell_id: str) -> Path:
    return root / "cells" / cell_id / "state.pt"
