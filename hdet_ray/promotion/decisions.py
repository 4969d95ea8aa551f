"""Who advances after a stage, and why: a pure function of the study and the stage's table.

Order of judgement, for the candidates that ran the stage:
1. a candidate with no result in any cell is stopped as `failed`;
2. every gate that applies at this stage judges its candidates; failing any gate stops a challenger
   (retained candidates are judged and recorded, but never stopped);
3. of the challengers left, the stage's `advance` best by mean rank go on (`top_k`), the rest stop;
4. the reference and controls always go on (`retained`).
At the last stage nothing advances; the survivors are `accepted`, and the `winner` is the best of the
accepted by mean rank.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from hdet_ray.promotion.protocol import Gate, Study
from hdet_ray.promotion.rules import RULES, Verdict, top_k
from hdet_ray.promotion.table import Summary, Table, order_by_mean_rank, summarize


@dataclass(frozen=True, slots=True)
class Outcome:
    candidate: str
    advanced: bool
    rule: str
    """The rule that decided: 'retained: reference', 'top_k', a gate's rule, 'failed', 'passed'."""
    reason: str
    by: float | None = None


@dataclass(frozen=True, slots=True)
class StageDecision:
    stage: str
    order: list[str]
    """Candidates best first by mean rank."""
    outcomes: dict[str, Outcome]
    verdicts: dict[str, dict[str, Verdict]] = field(default_factory=dict)
    """gate label -> candidate -> Verdict, for every gate that applied (retained included)."""
    final: bool = False
    winner: str | None = None

    @property
    def advanced(self) -> list[str]:
        return [c for c in self.order if self.outcomes[c].advanced]

    @property
    def stopped(self) -> list[str]:
        return [c for c in self.order if not self.outcomes[c].advanced]

    def to_dict(self) -> dict[str, Any]:
        return {
            "stage": self.stage,
            "order": self.order,
            "final": self.final,
            "winner": self.winner,
            "advanced": self.advanced,
            "stopped": self.stopped,
            "outcomes": {c: asdict(o) for c, o in self.outcomes.items()},
            "verdicts": {g: {c: asdict(v) for c, v in vs.items()} for g, vs in self.verdicts.items()},
        }


def gate_label(i: int, gate: Gate) -> str:
    param = f"margin={gate.margin}" if gate.margin is not None else f"k={gate.k}"
    return f"gates[{i}] {gate.rule}({param})"


def decide_stage(study: Study, stage_index: int, table: Table) -> StageDecision:
    stage = study.stages[stage_index]
    final = stage_index == len(study.stages) - 1
    reference = study.retained.reference
    retained = set(study.retained_set)
    summaries = summarize(table, reference, study.mode)
    order = order_by_mean_rank(summaries)
    outcomes: dict[str, Outcome] = {}

    for c in order:
        if summaries[c].mean_rank is None:
            outcomes[c] = Outcome(c, False, "failed", "no cell of this stage finished")
    alive = [c for c in order if c not in outcomes]

    verdicts: dict[str, dict[str, Verdict]] = {}
    for i, gate in enumerate(study.gates):
        if gate.stages is not None and stage.name not in gate.stages:
            continue
        judged = [
            c for c in alive if (c in gate.candidates if gate.candidates is not None else c not in retained)
        ]
        if not judged:
            continue
        label = gate_label(i, gate)
        verdicts[label] = RULES[gate.rule].evaluate(gate, summaries, judged, reference)
        for c, v in verdicts[label].items():
            if not v.passed and c not in retained and c not in outcomes:
                outcomes[c] = Outcome(c, False, label, v.reason, v.by)

    challengers = [c for c in alive if c not in retained and c not in outcomes]
    if stage.advance is not None:
        ranked = top_k(Gate(rule="top_k", k=stage.advance), summaries, challengers, reference)
        for c, v in ranked.items():
            if not v.passed:
                outcomes[c] = Outcome(c, False, f"top_k(k={stage.advance})", v.reason, v.by)
            else:
                outcomes[c] = Outcome(c, True, f"top_k(k={stage.advance})", v.reason, v.by)
    for c in challengers:
        outcomes.setdefault(c, Outcome(c, True, "passed", "passed every gate that applied"))
    for c in alive:
        if c in retained:
            role = "reference" if c == reference else "control"
            outcomes[c] = Outcome(c, True, f"retained: {role}", _rank_text(summaries[c]))

    winner = None
    if final:
        accepted = [c for c in order if outcomes[c].advanced]
        winner = accepted[0] if accepted else None
    return StageDecision(stage.name, order, outcomes, verdicts, final, winner)


def _rank_text(s: Summary) -> str:
    return f"kept regardless of rank (mean rank {s.mean_rank:.2f})"
