"""The promotion rules against hand-computed tables (pure: no Ray, no torch training)."""

import math

import pytest

from hdet_ray.promotion.budget import account
from hdet_ray.promotion.decisions import decide_stage
from hdet_ray.promotion.freeze import StudyChanged, changes, check_unchanged, fingerprint
from hdet_ray.promotion.protocol import Study, StudyError
from hdet_ray.promotion.rules import register_rule
from hdet_ray.promotion.table import cell_ranks, summarize


def study(**overrides):
    data = {
        "name": "case",
        "metric": "val_bpb",
        "candidates": [{"name": n} for n in ("ref", "ctrl", "a", "b", "c", "small")],
        "retained": {"reference": "ref", "controls": ["ctrl"]},
        "stages": [
            {"name": "s5", "steps": 5, "seeds": [0], "advance": 2},
            {"name": "s60", "steps": 60, "seeds": [1, 2], "advance": 2},
            {"name": "s12h", "steps": 720, "seeds": [3, 4]},
        ],
        "gates": [
            {"rule": "within_margin", "margin": 0.010, "stages": ["s12h"], "candidates": ["a", "b"]},
            {"rule": "mean_gap", "margin": 0.020, "stages": ["s12h"], "candidates": ["small"]},
        ],
    }
    data.update(overrides)
    return Study.parse(data)


def test_ranks_ties_share_the_average_and_mode_max_flips():
    table = {"x": {"s0": 1.0, "s1": 3.0}, "y": {"s0": 2.0, "s1": 3.0}, "z": {"s0": 0.5}}
    assert cell_ranks(table) == {"x": {"s0": 2.0, "s1": 1.5}, "y": {"s0": 3.0, "s1": 1.5}, "z": {"s0": 1.0}}
    assert cell_ranks(table, "max")["z"] == {"s0": 3.0}
    s = summarize(table, "y")
    assert s["x"].mean_rank == pytest.approx(1.75)
    assert s["x"].gaps == {"s0": -1.0, "s1": 0.0} and s["x"].mean_gap == pytest.approx(-0.5)
    assert s["x"].std == pytest.approx(math.sqrt(2.0)) and s["z"].std is None


def test_retained_reference_ranking_low_at_cheap_stages_still_reaches_the_final_stage():
    st = study()
    # cheap stage: the reference is last of six; top 2 challengers advance, ref and ctrl are kept
    screen = {
        "ref": {"s0": 3.40},
        "ctrl": {"s0": 3.35},
        "a": {"s0": 3.20},
        "b": {"s0": 3.22},
        "c": {"s0": 3.30},
        "small": {"s0": 3.25},
    }
    d0 = decide_stage(st, 0, screen)
    assert d0.order == ["a", "b", "small", "c", "ctrl", "ref"]
    assert d0.advanced == ["a", "b", "ctrl", "ref"]
    assert d0.outcomes["ref"].rule == "retained: reference" and "6.00" in d0.outcomes["ref"].reason
    assert d0.outcomes["small"].rule == "top_k(k=2)" and d0.outcomes["small"].by == 3.0
    assert d0.outcomes["c"].advanced is False
    # confirm stage: the reference is still worst in both cells, still kept
    confirm = {
        "ref": {"s1": 3.30, "s2": 3.31},
        "ctrl": {"s1": 3.29, "s2": 3.28},
        "a": {"s1": 3.25, "s2": 3.26},
        "b": {"s1": 3.27, "s2": 3.24},
    }
    d1 = decide_stage(st, 1, confirm)
    assert set(d1.advanced) == {"a", "b", "ctrl", "ref"}
    assert not d1.final and d1.winner is None


def test_within_margin_fails_on_one_cell_0011_behind_and_mean_gap_fails_at_0032():
    st = study()
    final = {
        "ref": {"s3": 3.250, "s4": 3.260},
        "ctrl": {"s3": 3.300, "s4": 3.300},
        "a": {"s3": 3.255, "s4": 3.271},  # 0.005 and 0.011 behind: fails the 0.010 all-cells rule
        "b": {"s3": 3.245, "s4": 3.270},  # -0.005 and exactly 0.010: passes
        "small": {"s3": 3.282, "s4": 3.292},
    }  # gaps 0.032, 0.032: mean 0.032 > 0.020
    d = decide_stage(st, 2, final)
    a, small = d.outcomes["a"], d.outcomes["small"]
    assert not a.advanced and a.rule == "gates[0] within_margin(margin=0.01)"
    assert a.by == pytest.approx(0.011) and "s4" in a.reason
    assert not small.advanced and small.rule == "gates[1] mean_gap(margin=0.02)"
    assert small.by == pytest.approx(0.032)
    assert d.outcomes["b"].advanced and d.outcomes["b"].rule == "passed"
    assert d.final and d.advanced == ["b", "ref", "ctrl"] and d.winner == "b"


def test_within_margin_treats_a_missing_cell_as_failing_and_a_failed_candidate_is_stopped():
    st = study()
    final = {
        "ref": {"s3": 3.25, "s4": 3.26},
        "a": {"s3": 3.25},
        "b": {},
        "ctrl": {"s3": 3.3, "s4": 3.3},
        "small": {"s3": 3.26, "s4": 3.27},
    }
    d = decide_stage(st, 2, final)
    assert not d.outcomes["a"].advanced and "['s4']" in d.outcomes["a"].reason
    assert d.outcomes["b"].rule == "failed"
    assert d.outcomes["small"].advanced and d.outcomes["small"].by is None  # passed: no stop reason


def test_a_user_rule_is_checked_on_the_numbers_alone():
    from hdet_ray.promotion.rules import RULES, Verdict

    def below(gate, summaries, candidates, reference):
        return {
            c: Verdict(summaries[c].mean <= gate.margin, summaries[c].mean, "absolute") for c in candidates
        }

    register_rule("absolute_below", below)
    try:
        st = study(gates=[{"rule": "absolute_below", "margin": 3.0}])
        d = decide_stage(
            st, 2, {"ref": {"s3": 3.1}, "ctrl": {"s3": 3.2}, "a": {"s3": 2.9}, "b": {"s3": 3.05}}
        )
        assert d.advanced == ["a", "ref", "ctrl"] and d.outcomes["b"].rule.startswith(
            "gates[0] absolute_below"
        )
    finally:
        RULES.pop("absolute_below")


@pytest.mark.parametrize(
    "change, field",
    [
        ({"gates": [{"rule": "within_margin"}]}, "gates.0.margin"),
        ({"gates": [{"rule": "nope", "margin": 1}]}, "gates.0.rule"),
        ({"retained": {"reference": "zzz"}}, "retained"),
        ({"stages": [{"name": "x", "steps": 0, "seeds": [0]}]}, "stages.0.steps"),
        ({"stages": [{"name": "x", "steps": 5, "seeds": [0], "start": "continue"}]}, "stages.0.start"),
    ],
)
def test_bad_study_names_the_field(change, field):
    with pytest.raises(StudyError) as e:
        study(**change)
    assert field in str(e.value)


def test_changing_a_gate_is_refused_naming_the_change():
    old = study().definition()
    new = study(
        gates=[
            {"rule": "within_margin", "margin": 0.015, "stages": ["s12h"], "candidates": ["a", "b"]},
            {"rule": "mean_gap", "margin": 0.020, "stages": ["s12h"], "candidates": ["small"]},
        ]
    )
    assert fingerprint(old) == fingerprint(study().definition())
    with pytest.raises(StudyChanged) as e:
        check_unchanged("case", old, new.definition())
    assert "gates.0.margin: 0.01 -> 0.015" in str(e.value) and "new study" in str(e.value)
    assert changes({"a": [1, 2]}, {"a": [1, 2, 3]}) == ["a: [1, 2] -> [1, 2, 3]"]


def test_budget_counterfactuals_by_hand():
    st = study()
    h = 3600.0
    cells = (
        [{"stage": "s5", "candidate": c, "worker_seconds": 1 * h} for c in "abcdef"]
        + [{"stage": "s60", "candidate": c, "worker_seconds": s * h} for c in "abcd" for s in (2, 4)]
        + [{"stage": "s12h", "candidate": c, "worker_seconds": 10 * h} for c in "ab" for _ in (0, 1)]
    )
    b = account(st, cells)
    assert [s.worker_hours for s in b.stages] == [6.0, 24.0, 40.0] and b.spent_hours == 70.0
    cf = {c.from_stage: c for c in b.counterfactuals}
    # from s5: 6 candidates x (2 cells x 3 h + 2 cells x 10 h) = 156 later; 6 spent before
    assert cf["s5"].later_hours == pytest.approx(156.0) and cf["s5"].total_hours == pytest.approx(162.0)
    assert cf["s60"].later_hours == pytest.approx(80.0) and cf["s60"].total_hours == pytest.approx(110.0)
    assert cf["s12h"].later_hours == 0.0 and cf["s12h"].total_hours == pytest.approx(70.0)
