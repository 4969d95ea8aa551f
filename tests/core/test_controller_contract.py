"""The contract every registered controller keeps (as Optuna runs one suite over all its samplers).

Each test runs once per entry of `hdet_ray.core.controller.CONTROLLERS`, so a new controller is checked
as soon as it is registered: its initial state, holding before warm-up, rollback when no replica is
healthy, offsets inside their bounds, decisions as values (inputs untouched, the same answer twice),
converge weights, and a state that survives to_dict/from_dict and JSON. What each controller does with a
healthy window is its own business (tests/core/test_controller.py checks that against hand computations).
"""

from __future__ import annotations

import copy
import json
import math
import random

import pytest

from hdet_ray.core.controller import (
    CONTROLLERS,
    Controller,
    ControllerState,
    Decision,
    ParamWindow,
    Window,
    make_controller,
)
from hdet_ray.core.spread import coordinates, linear_spread, log_spread

NAMES = ("lr", "weight_decay")
REPLICAS = 4
LR_COORDS = tuple(coordinates(log_spread(REPLICAS, 2.0), "log"))
WD_COORDS = tuple(coordinates(linear_spread(REPLICAS, 0.5), "linear"))
BOUNDS = {"lr": (-2.0, 0.3), "weight_decay": (-0.01, 0.02)}


def param(scale: str, base: float, offset: float, coords, bounds) -> ParamWindow:
    center = base * math.exp(offset) if scale == "log" else base + offset
    values = tuple(center * math.exp(c) if scale == "log" else center * (1 + c) for c in coords)
    return ParamWindow(
        scale=scale, base=base, offset=offset, coords=coords, values=values, offset_bounds=bounds
    )


def window(state: ControllerState, losses, *, healthy=None, step=500, total=1000, opening=False) -> Window:
    """A window whose offsets are the state's (as the engine applies them) and whose bounds are BOUNDS."""
    return Window(
        window=state.windows,
        step=step,
        total_steps=total,
        losses=tuple(losses),
        healthy=tuple(healthy if healthy is not None else [math.isfinite(x) for x in losses]),
        params={
            "lr": param("log", 3e-3, state.offsets["lr"], LR_COORDS, BOUNDS["lr"]),
            "weight_decay": param(
                "linear", 0.05, state.offsets["weight_decay"], WD_COORDS, BOUNDS["weight_decay"]
            ),
        },
        opening=opening,
    )


# The higher-rate replicas did clearly better: a signal every moving controller acts on.
HIGHER_IS_BETTER = (2.0, 1.5, 1.0, 0.5)


@pytest.fixture(params=sorted(CONTROLLERS), ids=str)
def name(request) -> str:
    return request.param


def build(name: str, **settings) -> Controller:
    # trust_windows=1 (where the controller has one) so a single window can move it
    defaults = {"trust_windows": 1} if "trust_windows" in _settings(name) else {}
    return make_controller(name, **{**defaults, **settings})


def _settings(name: str) -> set[str]:
    from dataclasses import fields

    return {f.name for f in fields(CONTROLLERS[name].Config)}


def test_the_registry_names_each_class_by_its_name():
    assert CONTROLLERS and all(
        cls.name == key and issubclass(cls, Controller) for key, cls in CONTROLLERS.items()
    )


def test_initial_state_is_zero_for_every_name(name):
    state = build(name).initial_state(NAMES)
    assert state == ControllerState(
        offsets={n: 0.0 for n in NAMES}, velocity={n: 0.0 for n in NAMES}, signs={n: () for n in NAMES}
    )
    assert (state.windows, state.rollbacks, state.consecutive_rollbacks) == (0, 0, 0)


def test_holds_before_warm_up(name):
    controller = build(name, warmup_steps=600)
    state = controller.initial_state(NAMES)
    new, decision = controller.decide(state, window(state, HIGHER_IS_BETTER, step=500))
    assert decision.offsets == {"lr": 0.0, "weight_decay": 0.0}
    assert not decision.acted and not decision.rollback and "warm-up" in decision.note
    assert new.offsets == state.offsets and new.windows == 1


def test_rolls_back_and_cuts_the_rate_when_no_replica_is_healthy(name):
    controller = build(name, rollback_cut=0.5, max_rollbacks=1)
    state = controller.initial_state(NAMES)
    losses = (math.nan, math.inf, 9.0, 9.0)
    state, first = controller.decide(state, window(state, losses, healthy=[False] * REPLICAS))
    assert first.rollback and first.acted and not first.diverged and first.weights == ()
    # to 0.5 x the lowest replica's value (centre / 2 for a log spread of 2): the centre x 1/4, on the log
    # axis
    assert first.offsets["lr"] == pytest.approx(math.log(0.25))
    assert first.offsets["weight_decay"] == 0.0  # only rollback_param is cut
    assert state.velocity == {n: 0.0 for n in NAMES} and state.rollbacks == 1
    state, second = controller.decide(state, window(state, losses, healthy=[False] * REPLICAS))
    assert second.rollback and second.diverged  # 2 consecutive > max_rollbacks 1
    assert second.offsets["lr"] == pytest.approx(BOUNDS["lr"][0])  # log(1/16) is below the bound: clamped
    assert state.consecutive_rollbacks == 2
    state, healthy = controller.decide(state, window(state, HIGHER_IS_BETTER))
    assert not healthy.rollback and state.consecutive_rollbacks == 0 and state.rollbacks == 2


def test_offsets_stay_within_their_bounds(name):
    controller = build(name)
    state = controller.initial_state(NAMES)
    rng = random.Random(7)
    for k in range(60):
        losses = [rng.choice([rng.uniform(0.1, 3.0), math.nan]) for _ in range(REPLICAS)]
        if k % 3 == 0:  # runs of a strong signal push against the bounds
            losses = list(HIGHER_IS_BETTER if k < 30 else reversed(HIGHER_IS_BETTER))
        if k % 10 == 9:  # and rollbacks cut the rate towards the lower one
            losses = [math.nan] * REPLICAS
        w = window(state, losses, step=10 * (k + 1), total=600, opening=(k == 1))
        state, decision = controller.decide(state, w)
        for n, (lo, hi) in BOUNDS.items():
            assert lo <= decision.offsets[n] <= hi, (k, n, decision)
            assert decision.offsets[n] == state.offsets[n]
            assert all(math.isfinite(v) for v in (*decision.signal.values(), *decision.velocity.values()))


def test_decisions_are_values(name):
    controller = build(name)
    state = controller.initial_state(NAMES)
    state, _ = controller.decide(state, window(state, HIGHER_IS_BETTER))
    w = window(state, (1.0, 0.9, math.nan, 0.7))
    state_before, window_before = copy.deepcopy(state), copy.deepcopy(w)
    new, decision = controller.decide(state, w)
    assert state == state_before and w == window_before  # the inputs are untouched
    assert controller.decide(state, w) == (new, decision)  # the same inputs, the same answer
    assert isinstance(decision, Decision)
    decision.offsets["lr"] = 123.0  # the Decision shares no mutable part with the new state
    decision.velocity["lr"] = 123.0
    assert new.offsets["lr"] != 123.0 and new.velocity["lr"] != 123.0


def test_converge_weights_cover_the_healthy_replicas(name):
    for policy in ("mean", "fitness", "best"):
        controller = build(name, converge=policy)
        state = controller.initial_state(NAMES)
        _, decision = controller.decide(state, window(state, (1.0, math.nan, 0.8, 0.9)))
        assert len(decision.weights) == REPLICAS and sum(decision.weights) == pytest.approx(1.0)
        assert decision.weights[1] == 0.0 and all(w >= 0 for w in decision.weights), policy


def test_state_round_trips_through_to_dict_and_json(name):
    controller = build(name)
    state = controller.initial_state(NAMES)
    for losses in (HIGHER_IS_BETTER, (1.0, 1.1, 0.9, 1.2), (math.nan,) * REPLICAS, HIGHER_IS_BETTER):
        state, _ = controller.decide(state, window(state, losses))
    assert state.windows == 4 and state.rollbacks == 1
    assert ControllerState.from_dict(state.to_dict()) == state
    assert ControllerState.from_dict(json.loads(json.dumps(state.to_dict()))) == state


def test_an_unknown_setting_names_itself(name):
    with pytest.raises(ValueError, match=r"no setting\(s\) \['no_such_setting'\]"):
        make_controller(name, no_such_setting=1)
