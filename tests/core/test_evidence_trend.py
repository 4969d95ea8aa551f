"""The evidence controller's first step, `read_trend`: the window's loss as the run sees it, checked against
hand computations of its level, stall tests and flags (the controller's decisions are tested in
tests/core/test_controller.py)."""

import math

import pytest

from hdet_ray.core.controller import ControllerState, ParamWindow, Window
from hdet_ray.core.evidence import EvidenceConfig, read_trend

CFG = EvidenceConfig()  # evidence_windows 4, stall_ratio 0.5, climb_stall_ratio 0.25, fit_floor 1e-3


def trend(levels, losses, *, healthy=None, initial_loss=math.nan, cfg=CFG):
    """read_trend at the window after `levels` (the earlier windows' median losses, every one healthy)."""
    state = ControllerState(
        offsets={"lr": 0.0},
        velocity={"lr": 0.0},
        signs={"lr": ()},
        windows=len(levels) + 1,
        recent_loss=tuple(math.log(x) for x in levels)[-(cfg.evidence_windows + 1) :],
    )
    p = ParamWindow(
        scale="log", base=1.0, offset=0.0, coords=(0.0,) * len(losses), values=(1.0,) * len(losses)
    )
    window = Window(
        window=len(levels),
        step=10 * (len(levels) + 1),
        total_steps=1000,
        losses=tuple(losses),
        healthy=tuple(healthy if healthy is not None else [True] * len(losses)),
        params={"lr": p},
        initial_loss=initial_loss,
    )
    return read_trend(cfg, state, window)[0]


def test_a_loss_that_still_halves_holds_a_move_down_and_reads_as_a_steady_fall():
    # window 4: median 0.3 against 1.0 four windows back, below stall_ratio 0.5
    t = trend([1.0, 0.8, 0.6, 0.45], [0.29, 0.3, 0.3, 0.31])
    assert t.index == 4 and t.level == pytest.approx(math.log(0.3))
    assert t.falling == "while the loss still falls fast" and t.falling_down == t.falling
    assert t.steady and not t.plateau and not t.new_high
    assert t.since_first == pytest.approx(tuple(math.log(x) for x in (0.8, 0.6, 0.45, 0.3)))
    assert not t.stalled_after_first  # the climb's scaled test on windows 1-4: 0.3 / 0.8 < 0.5 ** (3 / 4)


def test_a_loss_back_above_every_window_since_the_first_is_a_new_high_and_a_plateau():
    t = trend([1.0, 0.8, 0.7, 0.75], [0.84, 0.85, 0.86, 0.9])  # median 0.855 > 0.8, 0.7, 0.75
    assert t.falling == ""  # 0.855 / 1.0 is above 0.5: the run has stalled
    assert t.plateau and t.new_high and not t.steady
    assert t.stalled_after_first  # the climb's scaled test on windows 1-4: 0.855 / 0.8 > 0.5 ** (3 / 4)


def test_past_the_first_span_the_climb_reads_its_own_looser_stall_test_over_the_last_windows():
    # window 5: the span is windows 1-5 (the first has left it), 0.6 / 1.0 above climb_stall_ratio 0.25
    # and above stall_ratio 0.5: stalled for both; every window of the span fell
    t = trend([2.0, 1.0, 0.9, 0.8, 0.7], [0.6] * 4)
    assert t.index == 5 and t.falling == "" and t.stalled_after_first
    assert t.since_first == t.recent and t.steady
    t = trend([2.0, 1.0, 0.9, 0.8, 0.7], [0.3] * 4)  # 0.3 / 1.0: below 0.5, above 0.25
    assert t.falling == "while the loss still falls fast" and t.stalled_after_first


def test_before_the_span_is_full_the_stall_is_unknown_and_the_climb_reads_the_windows_after_the_first():
    # window 3: the climb's scaled test on windows 1-3: 0.8 -> 0.75 is above 0.5 ** (2 / 4) = 0.71
    t = trend([2.0, 0.8, 0.78], [0.74, 0.75, 0.76, 0.75])
    assert t.falling == "before the run has shown whether it stalls"
    assert t.stalled_after_first
    t = trend([2.0, 0.8, 0.6], [0.5, 0.5, 0.5, 0.5])  # 0.8 -> 0.5: below 0.71
    assert not t.stalled_after_first


def test_a_replica_left_out_is_no_part_of_the_level_and_the_window_counts_as_excluded():
    t = trend([1.0, 0.9], [0.5, 0.6, 0.7, 50.0], healthy=[True, True, True, False])
    assert t.excluded and t.level == pytest.approx(math.log(0.6))
    assert math.isnan(t.losses[3]) and all(math.isfinite(x) for x in t.losses[:3])


def test_a_loss_at_or_below_zero_has_no_level_and_starts_the_stall_test_afresh():
    t = trend([1.0, 0.8, 0.6, 0.5], [-0.2, 0.1, 0.3, 0.4])
    assert math.isnan(t.level) and t.recent == ()
    assert t.falling == "while the loss is at or below zero (no ratio to judge a stall by)"
    assert not t.fitted and not t.plateau and not t.steady


def test_a_loss_below_the_fit_floor_of_the_runs_start_reads_as_fitted():
    start = 2.3
    assert trend([1.0], [0.002, 0.002, 0.002, 0.002], initial_loss=start).fitted  # below 0.0023
    assert not trend([1.0], [0.003, 0.003, 0.003, 0.003], initial_loss=start).fitted
    assert not trend([1.0], [0.002] * 4).fitted  # the run's start unknown: no floor
