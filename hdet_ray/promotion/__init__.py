"""Staged promotion across runs: cheap screens, replicated gates, frozen thresholds, an auditable record.

The protocol, rules, decisions, freeze and budget modules are pure (no Ray, no torch); `runner` runs a
study's cells on Ray, `cli` is `hdet promote STUDY.yaml`, `tune` applies the same rules to Tune trials.
"""

from hdet_ray.promotion.budget import Budget, account
from hdet_ray.promotion.decisions import Outcome, StageDecision, decide_stage
from hdet_ray.promotion.freeze import StudyChanged, fingerprint
from hdet_ray.promotion.protocol import Candidate, Gate, Retained, Stage, Study, StudyError
from hdet_ray.promotion.rules import RULES, Verdict, register_rule


def run_study(*args, **kwargs):
    """See `hdet_ray.promotion.runner.run_study` (imported on use: it needs Ray)."""
    from hdet_ray.promotion.runner import run_study as run

    return run(*args, **kwargs)


__all__ = [
    "RULES",
    "Budget",
    "Candidate",
    "Gate",
    "Outcome",
    "Retained",
    "Stage",
    "StageDecision",
    "Study",
    "StudyChanged",
    "StudyError",
    "Verdict",
    "account",
    "decide_stage",
    "fingerprint",
    "register_rule",
    "run_study",
]
