"""Predeclared gates, checked on the numbers alone.

A rule takes the gate (its parameters), the stage's summaries and the candidates it judges, and returns
a `Verdict` per candidate: passed or not, by how much, and a one-line reason for the record.

Built in:
- `within_margin`: gap to the reference <= margin in *every* cell (a missing cell fails: it cannot be
  shown to be within). The case study's "within 0.010 val_bpb of the reference in every host-seed cell".
- `mean_gap`: mean gap to the reference over the shared cells <= margin ("a cheaper architecture must be
  within 0.020 of the reference in mean gap").
- `top_k`: the k best by mean rank pass.

Add one with `register_rule(name, evaluate, check)`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from hdet_ray.promotion.table import Summary, order_by_mean_rank

# Margins are compared with this slack so that 0.010 passes a 0.010 rule despite binary floats.
EPS = 1e-9


@dataclass(frozen=True, slots=True)
class Verdict:
    passed: bool
    by: float | None
    """The measured quantity against the threshold: the gap (worst cell or mean), or the place."""
    reason: str


Evaluate = Callable[..., dict[str, Verdict]]
Check = Callable[..., None]


@dataclass(frozen=True, slots=True)
class Rule:
    evaluate: Evaluate
    """(gate, summaries, candidates, reference) -> {candidate: Verdict}"""
    check: Check
    """(gate, where) -> None; raises ValueError naming `where.<field>` for a bad parameter."""


def _needs_margin(gate, where: str) -> None:
    if gate.margin is None:
        raise ValueError(f"{where}.margin: rule {gate.rule!r} needs a margin >= 0 (metric units)")


def _needs_k(gate, where: str) -> None:
    if gate.k is None:
        raise ValueError(f"{where}.k: rule {gate.rule!r} needs k >= 1")


def within_margin(
    gate,
    summaries: dict[str, Summary],
    candidates: Sequence[str],
    reference: str,
) -> dict[str, Verdict]:
    ref_cells = set(summaries[reference].metrics) if reference in summaries else set()
    out = {}
    for c in candidates:
        s = summaries[c]
        missing = sorted(ref_cells - set(s.gaps))
        if not s.gaps or missing:
            out[c] = Verdict(
                False,
                None,
                f"no result in cell(s) {missing or sorted(ref_cells)} to compare with {reference}",
            )
            continue
        cell, worst = max(s.gaps.items(), key=lambda kv: (kv[1], kv[0]))
        ok = worst <= gate.margin + EPS
        out[c] = Verdict(
            ok,
            worst,
            f"worst gap to {reference} {worst:+.4f} in cell {cell} {'<=' if ok else '>'} {gate.margin:.4f}",
        )
    return out


def mean_gap(
    gate,
    summaries: dict[str, Summary],
    candidates: Sequence[str],
    reference: str,
) -> dict[str, Verdict]:
    out = {}
    for c in candidates:
        g = summaries[c].mean_gap
        if g is None:
            out[c] = Verdict(False, None, f"no cell shared with {reference}")
            continue
        ok = g <= gate.margin + EPS
        out[c] = Verdict(
            ok,
            g,
            f"mean gap to {reference} {g:+.4f} over {len(summaries[c].gaps)} cell(s) "
            f"{'<=' if ok else '>'} {gate.margin:.4f}",
        )
    return out


def top_k(
    gate,
    summaries: dict[str, Summary],
    candidates: Sequence[str],
    reference: str,
) -> dict[str, Verdict]:
    order = [c for c in order_by_mean_rank(summaries) if c in candidates]
    out = {}
    for place, c in enumerate(order, 1):
        mr = summaries[c].mean_rank
        ok = place <= gate.k and mr is not None
        mr_text = "no result" if mr is None else f"mean rank {mr:.2f}"
        out[c] = Verdict(ok, float(place), f"{mr_text}, place {place} {'<=' if ok else '>'} top {gate.k}")
    return out


RULES: dict[str, Rule] = {
    "within_margin": Rule(within_margin, _needs_margin),
    "mean_gap": Rule(mean_gap, _needs_margin),
    "top_k": Rule(top_k, _needs_k),
}


def register_rule(name: str, evaluate: Evaluate, check: Check | None = None) -> None:
    """Add a rule usable as `gates: [{rule: <name>, ...}]`. Register before the study is parsed."""
    if name in RULES:
        raise ValueError(f"rule {name!r} is already registered")
    RULES[name] = Rule(evaluate, check or (lambda gate, where: None))
