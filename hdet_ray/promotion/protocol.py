"""A study definition: candidates, stages, the retained set and predeclared gates.

A study is declared once, in a YAML/JSON file, and frozen before its first run (see `freeze.py`).
Every (candidate, seed, host, stage) cell is one job of this project: the study's `base` job spec with
the candidate's `overrides`, the cell's seed and the stage's budget in steps.

    name: digits-promotion
    metric: val_loss            # lower is better (mode: min)
    base: {task: digits, replicas: 1, steps: 40, sync_every: 10}
    candidates:
      - {name: ref, overrides: {schedule: {max_lr: 0.01}}}
      - {name: fast, overrides: {schedule: {max_lr: 0.05}}, continuable: false}
    retained: {reference: ref, controls: []}
    stages:
      - {name: screen, steps: 40, seeds: [0], advance: 4}
      - {name: confirm, steps: 120, seeds: [1, 2], advance: 3, start: continue}
      - {name: final, steps: 240, seeds: [3, 4]}
    gates:
      - {rule: within_margin, margin: 0.010, stages: [final]}
      - {rule: mean_gap, margin: 0.020, candidates: [small]}

No Ray, no torch: this file is plain data with validation (pydantic), so errors name the field.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from hdet_ray.spec import Document, SpecError


class StudyError(SpecError):
    """A study definition that does not validate; `str()` names every bad field."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Candidate(_Model):
    """A named configuration: the study's base job spec plus these overrides (merged key by key)."""

    name: str = Field(..., pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    overrides: dict[str, Any] = Field(default_factory=dict)
    continuable: bool = Field(
        True, description="A later stage may continue from this candidate's checkpoint."
    )


class Stage(_Model):
    """One round of runs: every live candidate x seed x host, at this budget."""

    name: str = Field(..., pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    steps: int = Field(..., ge=1, le=10_000_000, description="Budget in optimizer steps per replica.")
    seeds: list[int] = Field(..., min_length=1, max_length=64)
    hosts: list[str] = Field(
        default_factory=list,
        max_length=64,
        description="Host labels; cells run on Ray nodes with resource 'host:<label>'.",
    )
    advance: int | None = Field(
        None, ge=1, description="How many advance by mean rank (besides the retained)."
    )
    start: Literal["restart", "continue"] = Field(
        "restart",
        description="continue: resume each continuable candidate from its previous-stage checkpoint.",
    )

    @model_validator(mode="after")
    def _check(self) -> Stage:
        if len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"seeds: must be distinct, got {self.seeds}")
        if len(set(self.hosts)) != len(self.hosts):
            raise ValueError(f"hosts: must be distinct, got {self.hosts}")
        return self


class Gate(_Model):
    """A predeclared rule. Built-in rules (see `rules.py`): within_margin, mean_gap, top_k."""

    rule: str = Field(..., min_length=1, max_length=64)
    margin: float | None = Field(None, ge=0, description="Allowed gap to the reference, in metric units.")
    k: int | None = Field(None, ge=1, description="top_k: how many pass.")
    stages: list[str] | None = Field(None, description="Stages it applies at (default: every stage).")
    candidates: list[str] | None = Field(
        None, description="Candidates it applies to (default: all but retained)."
    )


class Retained(_Model):
    reference: str = Field(..., description="The candidate gaps are measured against; always advances.")
    controls: list[str] = Field(default_factory=list, description="Always advance, whatever their rank.")


class Study(Document):
    """A staged-promotion study. Field order is the YAML's; see the module docstring."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    _what: ClassVar[str] = "study"
    _error: ClassVar[type[SpecError]] = StudyError

    name: str = Field(..., pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    metric: str = Field("val_loss", min_length=1, max_length=64)
    mode: Literal["min", "max"] = "min"
    base: dict[str, Any] = Field(
        default_factory=dict, description="The job spec every candidate starts from."
    )
    candidates: list[Candidate] = Field(..., min_length=1, max_length=256)
    retained: Retained
    stages: list[Stage] = Field(..., min_length=1, max_length=16)
    gates: list[Gate] = Field(default_factory=list, max_length=64)
    retries: int = Field(1, ge=0, le=10, description="Extra attempts for a crashed cell before it is failed.")

    @model_validator(mode="after")
    def _check(self) -> Study:
        from hdet_ray.promotion.rules import RULES

        names = [c.name for c in self.candidates]
        if len(set(names)) != len(names):
            raise ValueError(f"candidates: names must be unique, got {names}")
        for who in [self.retained.reference, *self.retained.controls]:
            if who not in names:
                raise ValueError(f"retained: {who!r} is not a candidate; candidates: {names}")
        stage_names = [s.name for s in self.stages]
        if len(set(stage_names)) != len(stage_names):
            raise ValueError(f"stages: names must be unique, got {stage_names}")
        if self.stages[0].start == "continue":
            raise ValueError(
                f"stages.0.start: the first stage has nothing to continue from ({self.stages[0].name})"
            )
        for i in range(1, len(self.stages)):
            if self.stages[i].steps <= self.stages[i - 1].steps and self.stages[i].start == "continue":
                raise ValueError(
                    f"stages.{i}.steps: a continued stage needs more than the previous budget "
                    f"({self.stages[i - 1].steps}), got {self.stages[i].steps}"
                )
        for i, g in enumerate(self.gates):
            if g.rule not in RULES:
                raise ValueError(f"gates.{i}.rule: unknown rule {g.rule!r}; known: {sorted(RULES)}")
            RULES[g.rule].check(g, f"gates.{i}")
            for s in g.stages or []:
                if s not in stage_names:
                    raise ValueError(f"gates.{i}.stages: {s!r} is not a stage; stages: {stage_names}")
            for c in g.candidates or []:
                if c not in names:
                    raise ValueError(f"gates.{i}.candidates: {c!r} is not a candidate; candidates: {names}")
        return self

    @property
    def retained_set(self) -> list[str]:
        return [self.retained.reference, *[c for c in self.retained.controls if c != self.retained.reference]]

    def candidate(self, name: str) -> Candidate:
        return next(c for c in self.candidates if c.name == name)

    def stage_index(self, name: str) -> int:
        return [s.name for s in self.stages].index(name)

    def definition(self) -> dict[str, Any]:
        """The canonical content that is hashed and frozen (every field, defaults included)."""
        return self.model_dump(mode="json")


def merge(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """`base` with `overrides` applied key by key; nested mappings merge, everything else replaces."""
    out = dict(base)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out
