"""Controllers driven by scripted windows, checked against hand computations of the written formulas."""

import json
import math

import pytest

from hdet_ray.core.controller import (
    Controller,
    ControllerState,
    PaperController,
    ParamWindow,
    SlopeController,
    Window,
    centered_ranks,
    make_controller,
)
from hdet_ray.core.spread import log_spread, permutation

MULTS = log_spread(4, 2.0)  # replica r uses MULTS[r]: the higher the index, the higher the rate


def window(
    losses,
    *,
    mults=MULTS,
    healthy=None,
    index=0,
    step=100,
    total=1000,
    offset=0.0,
    base=1.0,
    opening=False,
    bounds=(-math.inf, math.inf),
    next_base=math.nan,
):
    values = tuple(base * math.exp(offset) * m for m in mults)
    p = ParamWindow(
        scale="log",
        base=base,
        offset=offset,
        coords=tuple(math.log(m) for m in mults),
        values=values,
        offset_bounds=bounds,
        next_base=next_base,
    )
    return Window(
        window=index,
        step=step,
        total_steps=total,
        losses=tuple(losses),
        healthy=tuple(healthy if healthy is not None else [True] * len(losses)),
        params={"lr": p},
        opening=opening,
    )


def run(controller, windows):
    state = controller.initial_state(["lr"])
    decisions = []
    for w in windows:
        state, d = controller.decide(state, w)
        decisions.append(d)
    return state, decisions


# -- the shared contract every moving controller must pass -------------------------------------------------
CONTRACT = [
    lambda: PaperController(),
    lambda: SlopeController(trust_windows=1),
    lambda: SlopeController(trust_windows=3),
    lambda: make_controller("slope", converge="fitness"),
    lambda: make_controller("evidence"),
    lambda: make_controller("evidence", bias_aware=False),
]


def permuted(i, loss_of_level):
    """Window i as the engine makes it: multipliers re-permuted across replicas (seeded), loss by level."""
    perm = permutation(4, 0, i, "lr")
    mults = [MULTS[perm[r]] for r in range(4)]
    return window([loss_of_level[perm[r]] for r in range(4)], mults=mults, index=i, step=100 * (i + 1))


@pytest.mark.parametrize("factory", CONTRACT)
def test_contract_higher_rate_better_moves_up(factory):
    _, ds = run(factory(), [permuted(i, [4.0, 3.0, 2.0, 1.0]) for i in range(4)])
    assert ds[-1].offsets["lr"] > 0


@pytest.mark.parametrize("factory", CONTRACT)
def test_contract_lower_rate_better_moves_down(factory):
    # 6 windows: the evidence controller moves down on healthy windows only once it has seen the run stall
    # (evidence_windows + 1 = 5 windows of loss history)
    _, ds = run(factory(), [permuted(i, [1.0, 2.0, 3.0, 4.0]) for i in range(6)])
    assert any(d.offsets["lr"] < 0 for d in ds)


@pytest.mark.parametrize("factory", [*CONTRACT, lambda: Controller()])
def test_contract_equal_losses_move_nothing(factory):
    state, ds = run(factory(), [window([2.0] * 4, index=i) for i in range(4)])
    assert all(d.offsets["lr"] == 0.0 for d in ds)
    assert not any(d.rollback for d in ds)
    assert state.windows == 4


@pytest.mark.parametrize("factory", [*CONTRACT, lambda: Controller()])
def test_contract_state_round_trips(factory):
    c = factory()
    state, _ = run(c, [window([4.0, 3.0, 2.0, 1.0], index=i) for i in range(3)])
    assert ControllerState.from_dict(state.to_dict()) == state


@pytest.mark.parametrize("factory", CONTRACT)
def test_contract_nan_ranks_worst(factory):
    # the highest-rate replica went NaN: its rate must not be favoured
    _, ds = run(
        factory(),
        [window([2.0, 2.0, 2.0, math.nan], healthy=[True, True, True, False], index=i) for i in range(3)],
    )
    assert ds[-1].offsets["lr"] <= 0


# -- hand computations --------------------------------------------------------------------------------------
def test_paper_controller_matches_the_equations():
    L = [1.0, 0.9, 0.8, 0.7]
    eta = [1.0, 2.0, 3.0, 4.0]
    sigma, beta, lam = 0.1, 0.9, 0.5
    # by hand: s = (mean(L) - L) / sigma = [-1.5, -0.5, 0.5, 1.5]; w = softmax(s)
    e = [math.exp(-1.5), math.exp(-0.5), math.exp(0.5), math.exp(1.5)]
    w = [x / sum(e) for x in e]
    delta = sum(wi * v for wi, v in zip(w, eta, strict=True)) - 2.5
    assert delta == pytest.approx(0.99265, abs=1e-5)
    v1 = (1 - beta) * delta
    p = ParamWindow(scale="log", base=2.5, offset=0.0, coords=(0.0,) * 4, values=tuple(eta))
    win = Window(window=0, step=10, total_steps=100, losses=tuple(L), healthy=(True,) * 4, params={"lr": p})
    c = PaperController(momentum=beta, temperature=sigma, step_size=lam)
    state, d = c.decide(c.initial_state(["lr"]), win)
    # Delta and v are in units of the centre (2.5); the first step equals the paper's additive one
    assert d.signal["lr"] == pytest.approx(delta / 2.5, rel=1e-12)
    assert d.velocity["lr"] == pytest.approx(v1 / 2.5, rel=1e-12)
    assert d.offsets["lr"] == pytest.approx(math.log((2.5 + lam * v1) / 2.5), rel=1e-12)
    # second window, same losses and values: v2 = beta*v1 + (1-beta)*Delta; centre *= (1 + lambda*v2)
    p2 = ParamWindow(scale="log", base=2.5, offset=d.offsets["lr"], coords=(0.0,) * 4, values=tuple(eta))
    win2 = Window(window=1, step=20, total_steps=100, losses=tuple(L), healthy=(True,) * 4, params={"lr": p2})
    _, d2 = c.decide(state, win2)
    centre2 = 2.5 + lam * v1
    v2 = beta * v1 / 2.5 + (1 - beta) * delta / centre2
    assert d2.velocity["lr"] == pytest.approx(v2, rel=1e-12)
    assert d2.offsets["lr"] == pytest.approx(math.log(centre2 * (1 + lam * v2) / 2.5), rel=1e-12)


def test_paper_controller_is_scale_free_under_an_annealing_base():
    """The same losses at a base 1000x smaller move the offset by the same amount (no runaway at the end)."""
    c = PaperController()
    moves = []
    for base in (1.0, 1e-3):
        p = ParamWindow(
            scale="log",
            base=base,
            offset=0.2,
            coords=(0.0,) * 4,
            values=tuple(base * math.exp(0.2) * m for m in MULTS),
        )
        win = Window(
            window=0,
            step=10,
            total_steps=100,
            losses=(4.0, 3.0, 2.0, 1.0),
            healthy=(True,) * 4,
            params={"lr": p},
        )
        moves.append(c.decide(c.initial_state(["lr"]), win)[1].offsets["lr"] - 0.2)
    assert moves[0] > 0 and moves[0] == pytest.approx(moves[1], rel=1e-9)


def test_centered_ranks():
    assert centered_ranks([4.0, 3.0, 2.0, 1.0]) == pytest.approx([-0.5, -1 / 6, 1 / 6, 0.5])
    assert centered_ranks([1.0, 1.0, 3.0]) == pytest.approx([0.25, 0.25, -0.5])
    assert centered_ranks([1.0, math.nan]) == [0.5, -0.5]


def test_slope_controller_matches_the_equations_and_clips():
    # fitness f = 0.5*[-1,-1/3,1/3,1], x = ln2*[-1,-1/3,1/3,1]  =>  slope b = 0.5 / ln 2
    b = 0.5 / math.log(2)
    c = SlopeController(momentum=0.9, step_size=0.1, clip=10.0, trust_windows=1)
    state, d = c.decide(c.initial_state(["lr"]), window([4.0, 3.0, 2.0, 1.0]))
    assert d.signal["lr"] == pytest.approx(b, rel=1e-12)
    assert d.velocity["lr"] == pytest.approx(0.1 * b, rel=1e-12)
    assert d.offsets["lr"] == pytest.approx(0.1 * 0.1 * b, rel=1e-12)
    # momentum: second identical window, v2 = 0.9 v1 + 0.1 b
    _, d2 = c.decide(state, window([4.0, 3.0, 2.0, 1.0], offset=d.offsets["lr"]))
    v2 = 0.9 * 0.1 * b + 0.1 * b
    assert d2.offsets["lr"] == pytest.approx(0.01 * b + 0.1 * v2, rel=1e-12)
    # clip: one window moves at most `clip`
    c = SlopeController(momentum=0.0, step_size=1.0, clip=0.05, trust_windows=1)
    _, d = c.decide(c.initial_state(["lr"]), window([4.0, 3.0, 2.0, 1.0]))
    assert d.offsets["lr"] == pytest.approx(0.05)
    # bounds on the total offset
    _, d = c.decide(c.initial_state(["lr"]), window([4.0, 3.0, 2.0, 1.0], offset=0.3, bounds=(-0.32, 0.32)))
    assert d.offsets["lr"] == pytest.approx(0.32)


def test_slope_trust_region_waits_for_agreement_and_resets_on_a_flip():
    c = SlopeController(momentum=0.5, step_size=1.0, clip=1.0, trust_windows=3)
    up, down = [4.0, 3.0, 2.0, 1.0], [1.0, 2.0, 3.0, 4.0]
    state = c.initial_state(["lr"])
    offsets = []
    for losses in (up, up, up, down, up):
        state, d = c.decide(state, window(losses, offset=offsets[-1] if offsets else 0.0))
        offsets.append(d.offsets["lr"])
    assert offsets[0] == 0.0 and offsets[1] == 0.0  # not yet 3 agreeing windows
    assert offsets[2] > 0.0  # third agreeing window: move
    assert offsets[3] == offsets[2]  # flip: hold...
    assert d.note and "flip" in d.note  # ...and the last flip reset momentum
    b = 0.5 / math.log(2)
    assert state.velocity["lr"] == pytest.approx(0.5 * b)  # reset to 0, then (1 - beta) * b


def test_warmup_and_freeze_hold_the_offset():
    c = SlopeController(trust_windows=1, warmup_steps=300, freeze_after=0.5)
    _, d = c.decide(c.initial_state(["lr"]), window([4.0, 3.0, 2.0, 1.0], step=100, total=1000))
    assert d.offsets["lr"] == 0.0 and "warm-up" in d.note
    _, d = c.decide(c.initial_state(["lr"]), window([4.0, 3.0, 2.0, 1.0], step=600, total=1000))
    assert d.offsets["lr"] == 0.0 and "frozen" in d.note
    _, d = c.decide(c.initial_state(["lr"]), window([4.0, 3.0, 2.0, 1.0], step=400, total=1000))
    assert d.offsets["lr"] > 0.0


def test_rollback_cuts_the_rate_and_diverges_after_max_rollbacks():
    c = SlopeController(rollback_cut=0.5, max_rollbacks=2)
    state = c.initial_state(["lr"])
    offset = 0.0
    for i in range(3):
        state, d = c.decide(state, window([math.nan] * 4, healthy=[False] * 4, offset=offset, index=i))
        assert d.rollback and d.weights == ()
        # to 0.5 x the lowest replica's value: MULTS[0] = 1/2 of the centre, so the centre x 1/4
        assert d.offsets["lr"] == pytest.approx(offset + math.log(0.5 * MULTS[0]))
        offset = d.offsets["lr"]
        assert d.diverged == (i == 2)
    assert state.consecutive_rollbacks == 3 and state.rollbacks == 3
    state, d = c.decide(state, window([1.0] * 4, offset=offset))
    assert not d.rollback and state.consecutive_rollbacks == 0


def test_a_rollback_while_the_schedule_rises_cuts_for_the_next_windows_end():
    # the evidence controller keeps the schedule's base: it rose 1.0 -> 2.0 in the window that failed, so the
    # cut assumes it doubles once more (0.5 x the lowest value, / 2)
    c = make_controller("evidence")
    state, _ = c.decide(c.initial_state(["lr"]), window([1.0] * 4, base=1.0, index=0))
    failed = window([math.nan] * 4, healthy=[False] * 4, base=2.0, index=1)
    state, d = c.decide(state, failed)
    lowest = 2.0 * MULTS[0]
    assert d.rollback and "ahead of the schedule's rise (x2" in d.note
    assert 2.0 * math.exp(d.offsets["lr"]) == pytest.approx(0.5 * lowest / 2.0)
    assert state.last_base == {"lr": 2.0}
    # off, or a falling schedule: 0.5 x the lowest value at this window's base
    off = make_controller("evidence", rollback_ahead=False)
    _, d = off.decide(off.decide(off.initial_state(["lr"]), window([1.0] * 4, base=1.0))[0], failed)
    assert 2.0 * math.exp(d.offsets["lr"]) == pytest.approx(0.5 * lowest)
    state, _ = c.decide(c.initial_state(["lr"]), window([1.0] * 4, base=3.0, index=0))
    _, d = c.decide(state, failed)
    assert 2.0 * math.exp(d.offsets["lr"]) == pytest.approx(0.5 * lowest) and "ahead" not in d.note


def test_a_rollback_in_the_first_window_can_cut_for_the_schedules_own_rise():
    # no last window to read the rise from: the scheduler says where the base is at the next window's end
    # (a short warm-up, pct_start=0.1, ends its rise there); without it, or where it falls: at this base
    lowest = 2.0 * MULTS[0]
    for c in (make_controller(name, rollback_ahead_first_window=True) for name in ("evidence", "slope")):
        failed = window([math.nan] * 4, healthy=[False] * 4, base=2.0, index=0, next_base=5.0)
        _, d = c.decide(c.initial_state(["lr"]), failed)
        assert d.rollback and "(x2.5 by the next window's end)" in d.note, d.note
        assert 2.0 * math.exp(d.offsets["lr"]) == pytest.approx(0.5 * lowest / 2.5)
        for next_base in (math.nan, 1.0):
            failed = window([math.nan] * 4, healthy=[False] * 4, base=2.0, index=0, next_base=next_base)
            _, d = c.decide(c.initial_state(["lr"]), failed)
            assert 2.0 * math.exp(d.offsets["lr"]) == pytest.approx(0.5 * lowest) and "ahead" not in d.note
    later = window([math.nan] * 4, healthy=[False] * 4, base=2.0, index=1, next_base=5.0)  # the others' rule
    slope = make_controller("slope", rollback_ahead_first_window=True)
    _, d = slope.decide(slope.initial_state(["lr"]), later)
    assert 2.0 * math.exp(d.offsets["lr"]) == pytest.approx(0.5 * lowest) and "ahead" not in d.note
    first = window([math.nan] * 4, healthy=[False] * 4, base=2.0, next_base=5.0)
    for off in (
        make_controller("evidence"),
        make_controller("evidence", rollback_ahead=False),
    ):  # the default
        _, d = off.decide(off.initial_state(["lr"]), first)
        assert 2.0 * math.exp(d.offsets["lr"]) == pytest.approx(0.5 * lowest)


def test_a_lone_survivor_of_three_or_more_rolls_back_and_of_two_holds():
    c = make_controller("evidence")
    state, _ = c.decide(c.initial_state(["lr"]), window([1.0] * 4, base=1.0, index=0))
    lone = window([0.5, math.nan, math.nan, math.nan], healthy=[True, False, False, False], base=1.0, index=1)
    after, d = c.decide(state, lone)
    # as with no healthy replica: 0.5 x the lowest replica's value (the survivor's here)
    assert d.rollback and d.weights == () and d.note.startswith("one healthy replica of 4: rolled back")
    assert d.offsets["lr"] == pytest.approx(math.log(0.5 * MULTS[0]))
    assert after.rollbacks == 1 and after.consecutive_rollbacks == 1
    # two healthy replicas, or one of two, is no rollback; with the setting off a lone survivor holds
    assert not c.decide(state, window([0.5, 0.6, math.nan, math.nan], healthy=[True, True, False, False]))[
        1
    ].rollback
    pair = window([0.5, math.nan], mults=(0.8, 1.25), healthy=[True, False], base=1.0, index=1)
    assert not c.decide(c.initial_state(["lr"]), pair)[1].rollback
    off = make_controller("evidence", rollback_lone_survivor=False)
    _, d = off.decide(off.decide(off.initial_state(["lr"]), window([1.0] * 4, base=1.0, index=0))[0], lone)
    assert not d.rollback and d.offsets["lr"] == 0.0 and d.note == "fewer than two healthy losses"


def test_converge_weights():
    healthy = [True, True, False, True]
    losses = [3.0, 1.0, math.nan, 2.0]
    d = make_controller("hold", converge="mean").decide(
        ControllerState({"lr": 0}, {"lr": 0}, {"lr": ()}), window(losses, healthy=healthy)
    )[1]
    assert d.weights == pytest.approx((1 / 3, 1 / 3, 0.0, 1 / 3))
    d = make_controller("hold", converge="best").decide(
        ControllerState({"lr": 0}, {"lr": 0}, {"lr": ()}), window(losses, healthy=healthy)
    )[1]
    assert d.weights == (0.0, 1.0, 0.0, 0.0)
    d = make_controller("hold", converge="fitness").decide(
        ControllerState({"lr": 0}, {"lr": 0}, {"lr": ()}), window(losses, healthy=healthy)
    )[1]
    assert sum(d.weights) == pytest.approx(1.0) and d.weights[2] == 0.0
    assert d.weights[1] > d.weights[3] > d.weights[0]


def test_opening_window_centres_one_level_below_the_best_replica():
    mults = log_spread(4, 10.0)
    # replica 2 (third level) has the lowest loss; by default the centre goes one level below it
    losses = [3.0, 2.0, 1.0, 9.0]
    _, d = SlopeController().decide(
        SlopeController().initial_state(["lr"]), window(losses, mults=mults, opening=True)
    )
    assert d.offsets["lr"] == pytest.approx(math.log(mults[1]))
    assert d.weights == (0.0, 0.0, 1.0, 0.0)  # the state converges onto the best replica itself
    c = SlopeController(opening_step_down=0)
    _, d = c.decide(c.initial_state(["lr"]), window(losses, mults=mults, opening=True))
    assert d.offsets["lr"] == pytest.approx(math.log(mults[2]))
    c = SlopeController(opening_step_down=5)  # never below the lowest level tried
    _, d = c.decide(c.initial_state(["lr"]), window(losses, mults=mults, opening=True))
    assert d.offsets["lr"] == pytest.approx(math.log(mults[0]))


def test_unknown_controller_and_settings_are_named():
    with pytest.raises(ValueError, match="controller must be one of"):
        make_controller("adam")
    with pytest.raises(ValueError, match="no setting"):
        make_controller("paper", clip=0.1)
    with pytest.raises(ValueError, match="momentum"):
        make_controller("slope", momentum=1.5)


# -- the evidence controller ---------------------------------------------------------------------------------
def schedule_windows(losses, bases, **kw):
    """One window per base value; losses are given per multiplier level and re-permuted like the engine's."""
    out = []
    for i, b in enumerate(bases):
        perm = permutation(4, 0, i, "lr")
        out.append(
            window(
                [losses[perm[r]] for r in range(4)],
                mults=[MULTS[perm[r]] for r in range(4)],
                index=i,
                step=10 * (i + 1),
                base=b,
                **kw,
            )
        )
    return out


def test_evidence_needs_two_windows_and_doubles_its_step():
    # flat schedule, higher rate better every window: rho = 1, z = sqrt(3k); z >= 2 from k = 2 on. After a
    # move the evidence starts afresh (it was about the old centre), so moves come every other window
    c = make_controller("evidence", shard_correction=False)
    state, ds, offset = c.initial_state(["lr"]), [], 0.0
    for i in range(7):  # the engine feeds each decision's offset into the next window (and re-permutes)
        perm = permutation(4, 0, i, "lr")
        state, d = c.decide(
            state,
            window(
                [[4.0, 3.0, 2.0, 1.0][perm[r]] for r in range(4)],
                mults=[MULTS[perm[r]] for r in range(4)],
                index=i,
                step=10 * (i + 1),
                offset=offset,
            ),
        )
        ds.append(d)
        offset = d.offsets["lr"]
    assert [round(d.velocity["lr"], 4) for d in ds[:2]] == [round(math.sqrt(3), 4), round(math.sqrt(6), 4)]
    offsets = [d.offsets["lr"] for d in ds]
    assert offsets == pytest.approx([0.0, 0.25, 0.25, 0.75, 0.75, 1.5, 1.5])  # 0.25, 0.5, then max_step 0.75
    assert [d.acted for d in ds] == [False, True, False, True, False, True, False]


def test_evidence_holds_on_noise():
    import random

    rng = random.Random(0)
    c = make_controller("evidence")
    windows = [window([rng.random() for _ in range(4)], index=i, step=10 * (i + 1)) for i in range(400)]
    _, ds = run(c, windows)
    moves = sum(d.acted for d in ds)
    assert moves / len(ds) < 0.06  # one-sided 2.3% a direction at z = 2, windows overlap: a few percent


def test_evidence_never_follows_the_anneals_bias():
    # annealing base, lower rate better every window: exactly what the short-horizon bias produces: hold
    c = make_controller("evidence")
    bases = [1.0 * 0.8**i for i in range(6)]
    _, ds = run(c, schedule_windows([1.0, 2.0, 3.0, 4.0], bases))
    assert all(d.offsets["lr"] == 0.0 for d in ds)
    assert "bias" in ds[-1].note
    # ...but higher rate better while annealing beats the bias: move up
    _, ds = run(c, schedule_windows([4.0, 3.0, 2.0, 1.0], bases))
    assert ds[-1].offsets["lr"] > 0
    # rising base (warm-up): higher better while the loss falls fast is the bias (hold), lower better beats
    # it (move down once stalled)
    rising = [0.1 * 1.5**i for i in range(6)]
    _, ds = run(c, falling_windows(0.6, rising, losses=(4.0, 3.0, 2.0, 1.0)))  # 8x in 4 windows
    assert all(d.offsets["lr"] == 0.0 for d in ds)
    assert "bias" in ds[-1].note
    _, ds = run(c, schedule_windows([1.0, 2.0, 3.0, 4.0], rising))
    assert any(d.offsets["lr"] < 0 for d in ds)
    # without bias_aware it follows whatever it sees
    _, ds = run(make_controller("evidence", bias_aware=False), schedule_windows([1.0, 2.0, 3.0, 4.0], bases))
    assert any(d.offsets["lr"] < 0 for d in ds)


def falling_windows(level_per_window, bases, losses=(1.0, 2.0, 3.0, 4.0), top_excluded=False):
    """schedule_windows with every loss scaled by level_per_window**i (< 1: the run's loss falls);
    top_excluded: the replica at the highest level is unhealthy in every window."""
    out = []
    for i, w in enumerate(schedule_windows(list(losses), bases)):
        fields = {f: getattr(w, f) for f in w.__dataclass_fields__}
        fields["losses"] = tuple(x * level_per_window**i for x in w.losses)
        if top_excluded:
            top = max(w.params["lr"].coords)
            fields["healthy"] = tuple(c != top for c in w.params["lr"].coords)
        out.append(Window(**fields))
    return out


def test_evidence_holds_a_move_down_while_the_loss_still_falls_fast():
    # rising base, lower rate better every window (the pattern of replicas at and below the edge of stability
    # while the run learns fast): with the loss halving every 2 windows, hold; once it has stalled, move down
    rising = [0.1 * 1.2**i for i in range(8)]
    c = make_controller("evidence")
    _, ds = run(c, falling_windows(2**-0.5, rising))
    assert all(d.offsets["lr"] == 0.0 for d in ds)
    assert "falls fast" in ds[-1].note and "whether it stalls" in ds[2].note
    _, ds = run(c, falling_windows(0.95, rising))  # 19% in 4 windows: stalled enough
    assert any(d.offsets["lr"] < 0 for d in ds)
    # stall_ratio=None restores the move; an exclusion (instability) is never held by it
    _, ds = run(make_controller("evidence", stall_ratio=None), falling_windows(2**-0.5, rising))
    assert any(d.offsets["lr"] < 0 for d in ds)
    _, ds = run(c, falling_windows(2**-0.5, rising, top_excluded=True))
    assert any(d.offsets["lr"] < 0 for d in ds)
    # and a move up is never held by it (it only guards against the edge's pull down)
    _, ds = run(c, falling_windows(2**-0.5, [1.0 * 0.8**i for i in range(8)], losses=(4.0, 3.0, 2.0, 1.0)))
    assert any(d.offsets["lr"] > 0 for d in ds)


def test_evidence_down_stall_ratio_holds_a_move_down_on_a_slower_fall():
    rising = [0.1 * 1.2**i for i in range(8)]
    # 28% in 4 windows: stalled for stall_ratio 0.5, still falling for down_stall_ratio 0.75
    _, ds = run(make_controller("evidence"), falling_windows(0.92, rising))
    assert any(d.offsets["lr"] < 0 for d in ds)
    _, ds = run(make_controller("evidence", down_stall_ratio=0.75), falling_windows(0.92, rising))
    assert all(d.offsets["lr"] == 0.0 for d in ds) and "falls fast" in ds[-1].note
    # 19% in 4 windows: stalled for both
    _, ds = run(make_controller("evidence", down_stall_ratio=0.75), falling_windows(0.95, rising))
    assert any(d.offsets["lr"] < 0 for d in ds)
    with pytest.raises(ValueError, match="down_stall_ratio"):
        make_controller("evidence", down_stall_ratio=0.0)


def test_evidence_climbs_in_the_rise_once_the_run_has_stalled():
    # rising base, higher rate better every window (a too-low rate, or the rise's own bias). While the loss
    # halves every 2 windows it is the bias: hold. With the loss barely falling (5% a window) the rate is too
    # low: move up from window 3 (`earliest_climb`), the stall test reading the windows after the first (its
    # loss is the init's), its ratio scaled to their number
    rising = [0.1 * 1.2**i for i in range(10)]
    c = make_controller("evidence")
    _, ds = run(c, falling_windows(0.6, rising, losses=(4.0, 3.0, 2.0, 1.0)))  # 8x in 4 windows
    assert all(d.offsets["lr"] == 0.0 for d in ds)
    stalled = falling_windows(0.95, rising, losses=(4.0, 3.0, 2.0, 1.0))
    _, ds = run(c, stalled)
    moved = [i for i, d in enumerate(ds) if d.acted]
    assert moved and moved[0] == 3 and ds[3].offsets["lr"] > 0
    # a first window that fell fast does not count; 25% a window after it does (2 windows: 0.56 < 0.5**0.5)
    from dataclasses import replace

    first_fast = [
        replace(w, losses=tuple(x * (3.0 if i == 0 else 1.0) for x in w.losses))
        for i, w in enumerate(stalled)
    ]
    assert [i for i, d in enumerate(run(c, first_fast)[1]) if d.acted][:1] == [3]
    _, ds = run(c, falling_windows(0.6, rising, losses=(4.0, 3.0, 2.0, 1.0)))
    assert not any(d.acted for d in ds)
    # earliest_climb=5 is the old rule (the stall test's full span of 4 windows after the first); the
    # windows 3 and 4 it holds would count toward the climb (`held_up_counts`), here off to see the doubling
    # (and `rise_rollback`: the tie window below is the run's lowest loss, and the next one's rise from it
    # would roll back)
    c = make_controller("evidence", earliest_climb=5, held_up_counts=False, rise_rollback=None)
    _, ds = run(c, stalled)
    moved = [i for i, d in enumerate(ds) if d.acted]
    assert moved and moved[0] == 5 and ds[5].offsets["lr"] > 0
    # the steps double while the evidence for the next move builds up, even through a window with no effect
    # (a run of moves ends only on a full pool without a verdict): window 6 ties, 7 is not enough, 8 moves
    tie = Window(**{**{f: getattr(stalled[6], f) for f in Window.__dataclass_fields__}, "losses": (1.0,) * 4})
    _, ds = run(c, [*stalled[:6], tie, *stalled[7:]])
    moved = [i for i, d in enumerate(ds) if d.acted]
    steps = [ds[i].offsets["lr"] - ds[i - 1].offsets["lr"] for i in moved]
    assert moved[:2] == [5, 8] and steps[:2] == pytest.approx([0.25, 0.5])
    # while the base is below half the schedule's peak, the higher replicas' lead is the warm-up's own low
    # rate: held (here the base reaches half its peak at window 7)
    peak = 2 * rising[7]
    _, ds = run(c, [replace(w, params={"lr": replace(w.params["lr"], peak=peak)}) for w in stalled])
    assert [i for i, d in enumerate(ds) if d.acted][:1] == [7] and "bias" in ds[6].note
    # off: the old rule (never the bias's way on healthy windows)
    _, ds = run(
        make_controller("evidence", climb_when_stalled=False),
        falling_windows(0.95, rising, losses=(4.0, 3.0, 2.0, 1.0)),
    )
    assert all(d.offsets["lr"] == 0.0 for d in ds)


def test_evidence_climb_stall_ratio_loosens_the_climb_once_the_stall_test_has_its_full_span():
    # the loss falls 25% a window (0.32x in 4 windows): too fast for `stall_ratio` (0.5), stalled for the
    # climb's own test (`climb_stall_ratio` 0.25), which acts only from window 5; windows 3 and 4 keep the
    # scaled `stall_ratio` test (a fine-tune's new head learns fast there)
    rising = [0.1 * 1.2**i for i in range(10)]
    falling = falling_windows(0.75, rising, losses=(4.0, 3.0, 2.0, 1.0))
    assert not any(d.acted for d in run(make_controller("evidence", climb_stall_ratio=None), falling)[1])
    _, ds = run(make_controller("evidence"), falling)
    moved = [i for i, d in enumerate(ds) if d.acted]
    assert moved and moved[0] == 5 and ds[5].offsets["lr"] > 0
    # moves down keep `stall_ratio`: the same fall with the lower rate winning is held
    down = falling_windows(0.75, rising)
    assert all(d.offsets["lr"] == 0.0 for d in run(make_controller("evidence"), down)[1])
    with pytest.raises(ValueError, match="climb_stall_ratio"):
        make_controller("evidence", climb_stall_ratio=0.0)


def test_evidence_a_loss_at_or_below_zero_has_no_stall_ratio():
    # a flat schedule whose hypergradient says "lower" from window 1 on, the loss barely falling: on positive
    # losses the stall test passes and the rate moves down at window 4, then again once a fresh pool is full
    # (window 8). A log-density's loss crosses zero (windows 5 on): "fell by less than half" has no meaning
    # there, so the run counts as not stalled and holds, instead of reading the last positive windows
    from dataclasses import replace

    def measured(i, h, loss):
        return replace(window([loss] * 4, index=i, step=10 * (i + 1)), hypergradient=h)

    signs = [0.3] + [-0.3] * 9
    c = make_controller("evidence")
    _, ds = run(c, [measured(i, h, 1.0 - 0.01 * i) for i, h in enumerate(signs)])
    assert [i for i, d in enumerate(ds) if d.acted] == [4, 8]
    crossing = [measured(i, h, 1.0 - 0.01 * i if i < 5 else -0.5 - 0.01 * i) for i, h in enumerate(signs)]
    _, ds = run(c, crossing)
    assert [i for i, d in enumerate(ds) if d.acted] == [4]
    assert "at or below zero" in ds[8].note


def test_evidence_reads_the_hypergradient_as_a_sign_test_behind_the_same_gates():
    from dataclasses import replace

    def measured(i, h, base=1.0):  # equal losses: only the hypergradient says anything
        return replace(window([2.0] * 4, index=i, step=10 * (i + 1), base=base), hypergradient=h)

    c = make_controller("evidence")
    assert c.wants_hypergradient and not make_controller("evidence", signal="rank").wants_hypergradient
    # flat schedule, the step fell short 4 windows running: z = 4 / sqrt(4) = 2, a move at the 4th, not before
    _, ds = run(c, [measured(i, 0.3) for i in range(4)])
    assert [d.acted for d in ds] == [False, False, False, True] and ds[-1].offsets["lr"] == 0.25
    assert ds[-1].signal["lr"] == 0.3 and ds[-1].velocity["lr"] == pytest.approx(2.0)
    # one window that overshot among them: no move
    _, ds = run(c, [measured(i, h) for i, h in enumerate([0.3, -0.1, 0.3, 0.3])])
    assert not any(d.acted for d in ds)
    # annealing base, overshooting every window: what the anneal's bias produces, so hold
    _, ds = run(c, [measured(i, -0.3, base=0.85**i) for i in range(5)])
    assert all(d.offsets["lr"] == 0.0 for d in ds) and "bias" in ds[-1].note
    # a window without a measurement (NaN) uses the replicas' rank test, and restarts the pool
    state, _ = run(c, [measured(i, 0.3) for i in range(3)])
    state, d = c.decide(state, window([4.0, 3.0, 2.0, 1.0], index=3, step=40))
    assert not d.acted and "lr" in state.evidence and "lr#hypergradient" not in state.evidence
    assert ControllerState.from_dict(state.to_dict()) == state
    # signal='rank' ignores it
    _, ds = run(make_controller("evidence", signal="rank"), [measured(i, 0.3) for i in range(4)])
    assert not any(d.acted for d in ds)


def test_evidence_keeps_climbing_while_the_hypergradient_agrees_and_holds_it_late_in_the_anneal():
    from dataclasses import replace

    def measured(i, h, base=1.0, losses=(2.0,) * 4):
        return replace(window(list(losses), index=i, step=10 * (i + 1), base=base), hypergradient=h)

    # flat schedule, short every window: the 4th window moves, then every agreeing window moves again,
    # the step doubling (0.25, 0.5, 0.75, 0.75): x9.5 in 4 moves instead of 16 windows (each window here is at
    # offset 0, so a decision's offset is its step)
    _, ds = run(make_controller("evidence"), [measured(i, 0.3) for i in range(7)])
    assert [d.acted for d in ds] == [False, False, False, True, True, True, True]
    assert [d.offsets["lr"] for d in ds[3:]] == pytest.approx([0.25, 0.5, 0.75, 0.75])
    # one window that overshot ends the run of moves: the pool must fill with agreeing signs again
    hs = [0.3, 0.3, 0.3, 0.3, -0.1, 0.3, 0.3, 0.3, 0.3]
    _, ds = run(make_controller("evidence"), [measured(i, h) for i, h in enumerate(hs)])
    assert [i for i, d in enumerate(ds) if d.acted] == [3, 8] and ds[8].offsets["lr"] == 0.25
    # off: every move needs a fresh pool of 4
    _, ds = run(make_controller("evidence", continue_up=False), [measured(i, 0.3) for i in range(8)])
    assert [i for i, d in enumerate(ds) if d.acted] == [3, 7]
    # moves down start afresh (a stalled run, flat schedule): one move per 4 windows, at most max_step_down
    _, ds = run(make_controller("evidence"), [measured(i, -0.3) for i in range(17)])
    assert [i for i, d in enumerate(ds) if d.acted] == [4, 8, 12, 16]
    assert [d.offsets["lr"] for d in ds if d.acted] == pytest.approx([-0.25, -0.5, -0.5, -0.5])
    _, ds = run(make_controller("evidence", max_step_down=0.75), [measured(i, -0.3) for i in range(13)])
    assert [d.offsets["lr"] for d in ds if d.acted] == pytest.approx([-0.25, -0.5, -0.75])
    with pytest.raises(ValueError, match="max_step_down"):
        make_controller("evidence", max_step_down=0.1)
    # and once the rate has come down (here a rollback left the offset lower), moves up start afresh too
    down = [
        replace(measured(i, 0.3), params={"lr": replace(w.params["lr"], offset=-1.0 if i >= 2 else 0.0)})
        for i, w in enumerate(measured(j, 0.3) for j in range(8))
    ]
    state, ds = run(make_controller("evidence"), down)
    assert [i for i, d in enumerate(ds) if d.acted] == [3, 7] and state.came_down == {"lr": True}
    # late in the anneal (base below half its peak, half the anneal's steps behind it: from the peak at step
    # 10 to the end at 100, from step 55 on) the hypergradient is held: the schedule makes every step fall
    # short there, whatever the rate
    bases = [1.0, 0.9, 0.8, 0.7, 0.6, 0.45, 0.4, 0.35, 0.3, 0.25]
    annealed = [replace(measured(i, 0.3, base=b), total_steps=100) for i, b in enumerate(bases)]
    state, ds = run(make_controller("evidence"), annealed)
    assert [i for i, d in enumerate(ds) if d.acted] == [3, 4]
    assert all("late in the anneal" in d.note for d in ds[5:]) and state.peak_base == {"lr": 1.0}
    assert state.peak_step == {"lr": 10} and ControllerState.from_dict(state.to_dict()) == state
    _, ds = run(make_controller("evidence", late_anneal=None), annealed)
    assert all(d.acted for d in ds[3:])
    # `late_anneal_steps`: of 200 steps, half the anneal is not behind before step 105, though the base is
    # below half its peak from step 60 (a three-phase schedule is so a quarter of the way through): read to
    # the end; without it the base alone decides
    long = [replace(w, total_steps=200) for w in annealed]
    for settings, acted in (({}, list(range(3, 10))), ({"late_anneal_steps": None}, [3, 4])):
        state, ds = run(make_controller("evidence", **settings), long)
        assert [i for i, d in enumerate(ds) if d.acted] == acted
    # a state saved before the peak's step was kept (a checkpoint of an older version) resumes on the base
    c = make_controller("evidence")
    state, _ = run(c, long[:5])
    old = ControllerState.from_dict({k: v for k, v in state.to_dict().items() if k != "peak_step"})
    assert old.peak_step == {} and "late in the anneal" in c.decide(old, long[5])[1].note
    with pytest.raises(ValueError, match="late_anneal_steps must be in"):
        make_controller("evidence", late_anneal_steps=1.5)
    # an excluded replica late in the anneal is still read (instability is not the schedule's doing)
    late_bad = [
        replace(w, healthy=(True, True, True, False), losses=(1.0, 2.0, 3.0, 9.0))
        for w in [measured(i, -0.3, base=b) for i, b in enumerate(bases)]
    ]
    _, ds = run(make_controller("evidence"), late_bad)
    assert any(d.acted and d.offsets["lr"] < 0 for d in ds[5:])
    with pytest.raises(ValueError, match="late_anneal"):
        make_controller("evidence", late_anneal=1.5)


def test_evidence_keeps_a_run_of_moves_up_going_through_the_rise_once_it_has_begun():
    from dataclasses import replace

    # a rate too low in the rise: stalled for 6 windows, so the climb (from window 5 here) moves at 5 and 6;
    # then the moves work and the loss falls 70% a window, while the hypergradient still says "higher"
    rising = [0.1 * 1.2**i for i in range(13)]
    levels = [0.95**i if i < 7 else 0.95**6 * 0.3 ** (i - 6) for i in range(13)]

    def measured(i, h=0.3):
        return replace(
            window([2.0 * levels[i]] * 4, index=i, step=10 * (i + 1), base=rising[i]), hypergradient=h
        )

    # the windows 3 and 4 that earliest_climb=5 holds would start the run at 0.75 (`held_up_counts`): off
    # here, to see the run's own doubling; the climb's stall test is `stall_ratio`'s (one window's 70% fall
    # after four slow ones is 0.26x in 4 windows, which `climb_stall_ratio` 0.25 reads as stalled)
    late = {"earliest_climb": 5, "held_up_counts": False, "climb_stall_ratio": None}
    _, ds = run(make_controller("evidence", **late), [measured(i) for i in range(12)])
    assert [i for i, d in enumerate(ds) if d.acted] == [5, 6, 7, 8, 9, 10, 11]
    assert [d.offsets["lr"] for d in ds[5:9]] == pytest.approx([0.25, 0.5, 0.75, 0.75])
    # the run ends at the first window that says "lower"; then the bias and the stall test gate again
    hs = [0.3] * 8 + [-0.1, 0.3, 0.3, 0.3, 0.3]
    _, ds = run(make_controller("evidence", **late), [measured(i, h) for i, h in enumerate(hs)])
    assert [i for i, d in enumerate(ds) if d.acted] == [5, 6, 7] and "bias" in ds[12].note
    # off: the fast fall after the second move reads as the rise's bias, and holds the run at x2.1
    _, ds = run(
        make_controller("evidence", **late, run_through_bias=False),
        [measured(i) for i in range(12)],
    )
    assert [i for i, d in enumerate(ds) if d.acted] == [5, 6] and "bias" in ds[7].note


def test_evidence_takes_no_move_up_once_the_training_set_is_fitted():
    from dataclasses import replace

    def measured(i, loss, h=0.3):  # flat schedule; the run started at loss 2.0
        return replace(window([loss] * 4, index=i, step=10 * (i + 1)), hypergradient=h, initial_loss=2.0)

    # above the floor the pool of "higher" moves as before, from the 4th window
    _, ds = run(make_controller("evidence", fit_floor=1e-3), [measured(i, 0.01) for i in range(6)])
    assert [i for i, d in enumerate(ds) if d.acted] == [3, 4, 5]
    # below 1e-3 x the start the training loss no longer tells the rate: a run of moves up ends there
    levels = [0.01, 0.01, 0.01, 0.01, 0.01, 0.0015, 0.0015, 0.0015]
    _, ds = run(make_controller("evidence", fit_floor=1e-3), [measured(i, x) for i, x in enumerate(levels)])
    assert [i for i, d in enumerate(ds) if d.acted] == [3, 4]
    assert all("training set is fitted" in d.note for d in ds[5:])
    # moves down are not held by it (a rate too high can fit the training set too)
    _, ds = run(make_controller("evidence", fit_floor=1e-3), [measured(i, 0.001, -0.3) for i in range(5)])
    assert ds[4].acted and ds[4].offsets["lr"] < 0
    # None, or an unknown start: no floor
    _, ds = run(make_controller("evidence", fit_floor=None), [measured(i, 0.001) for i in range(4)])
    assert ds[3].acted
    unknown = [replace(measured(i, 0.001), initial_loss=math.nan) for i in range(4)]
    _, ds = run(make_controller("evidence", fit_floor=1e-3), unknown)
    assert ds[3].acted
    with pytest.raises(ValueError, match="fit_floor"):
        make_controller("evidence", fit_floor=1.0)


def test_evidence_carries_a_pool_for_higher_from_the_rise_into_the_anneal():
    from dataclasses import replace

    bases = [0.2, 0.4, 0.6, 0.8, 1.0, 0.99, 0.95, 0.9, 0.85]  # 5 windows of rise, then the anneal

    def windows(hs):  # the loss halves every window: in the rise the climb rule cannot act
        return [
            replace(window([2.0 * 0.5**i] * 4, index=i, step=10 * (i + 1), base=bases[i]), hypergradient=h)
            for i, h in enumerate(hs)
        ]

    state, ds = run(make_controller("evidence"), windows([0.3] * 9))
    assert not any(d.acted for d in ds[:5]) and "bias" in ds[4].note
    # the anneal's first window says "higher" too, against its bias: it moves, and the run goes on
    assert [i for i, d in enumerate(ds) if d.acted] == [5, 6, 7, 8]
    assert ControllerState.from_dict(state.to_dict()) == state
    # off: the anneal gathers its own pool of 4 first
    _, ds = run(make_controller("evidence", carry_into_anneal=False), windows([0.3] * 9))
    assert [i for i, d in enumerate(ds) if d.acted] == [8]
    # a pool for "lower" at the rise's end is the anneal's bias already: started afresh (a run whose first
    # pool said "lower" moves in the rise by a rule of its own, `high_start_runs_down`, off here)
    _, ds = run(make_controller("evidence", high_start_runs_down=False), windows([-0.3] * 9))
    assert not any(d.acted for d in ds)
    # and the anneal's window must agree: one that says "lower" leaves the pool without a verdict
    _, ds = run(make_controller("evidence"), windows([0.3] * 5 + [-0.3, 0.3]))
    assert not any(d.acted for d in ds)


def test_evidence_a_run_that_began_by_saying_higher_holds_a_later_lower():
    from dataclasses import replace

    def measured(i, h, healthy=(True,) * 4):
        # a stalled run on a flat schedule: the stall and bias rules let any verdict through
        return replace(
            window(
                [2.0, 2.0, 2.0, 9.0 if not healthy[3] else 2.0],
                healthy=list(healthy),
                index=i,
                step=10 * (i + 1),
            ),
            hypergradient=h,
        )

    # the first pool says "higher" in all 4 windows (a move up), a pool of "lower" later is the greedy bias
    hs = [0.3] * 4 + [-0.3] * 8
    state, ds = run(make_controller("evidence"), [measured(i, h) for i, h in enumerate(hs)])
    assert [i for i, d in enumerate(ds) if d.acted] == [3]
    assert state.first_verdict == {"lr": 1} and "began by saying higher" in ds[-1].note
    assert ControllerState.from_dict(state.to_dict()) == state
    # off: each full pool of "lower" moves
    _, ds = run(
        make_controller("evidence", low_start_holds_down=False), [measured(i, h) for i, h in enumerate(hs)]
    )
    assert [i for i, d in enumerate(ds) if d.acted] == [3, 7, 11]
    # a first pool that was not all "higher" keeps its moves down (from 10x too high it says "lower" early)
    hs = [0.3, 0.3, -0.3, 0.3] + [-0.3] * 8
    state, ds = run(make_controller("evidence"), [measured(i, h) for i, h in enumerate(hs)])
    assert state.first_verdict == {"lr": 0} and [d.offsets["lr"] < 0 for d in ds if d.acted] == [True, True]
    # `mixed_start_holds_down` (measured, off by default) holds those too
    state, ds = run(
        make_controller("evidence", mixed_start_holds_down=True), [measured(i, h) for i, h in enumerate(hs)]
    )
    assert not any(d.acted for d in ds) and "began by saying neither way throughout" in ds[-1].note

    # `mixed_start_holds_falling`: after a mixed first pool a move down is held while the loss has fallen in
    # every window since the first (a rate near its best turns to "lower" as the warm-up raises it, its loss
    # still falling); a window that rose (a rate past the edge) keeps the move
    def sloped(levels):
        return [
            replace(window([x] * 4, index=i, step=10 * (i + 1)), hypergradient=h)
            for i, (x, h) in enumerate(zip(levels, hs, strict=True))
        ]

    falling = [2.0 * 0.97**i for i in range(len(hs))]
    without = run(make_controller("evidence", mixed_start_holds_falling=False), sloped(falling))[1]
    assert [i for i, d in enumerate(without) if d.acted] == [7, 11]
    state, ds = run(make_controller("evidence"), sloped(falling))
    assert state.first_verdict == {"lr": 0} and not any(d.acted for d in ds)
    assert "fallen in every window since" in ds[7].note
    # window 6 rose: the move at window 7 is kept, and once the rate has come down later ones are too
    spiked = [*falling[:6], falling[5] * 1.5, *falling[7:]]
    _, ds = run(make_controller("evidence"), sloped(spiked))
    assert [i for i, d in enumerate(ds) if d.acted] == [7, 11]
    # a rise that has left the span holds again: window 2 rose, window 7's span (windows 3-7) fell throughout
    early = [*falling[:2], falling[1] * 1.5, *falling[3:]]
    assert not any(d.acted for d in run(make_controller("evidence"), sloped(early))[1])
    # an unstable replica is evidence of its own: windows that exclude one still move down
    hs = [0.3] * 4 + [-0.3] * 4
    unhealthy = (True, True, True, False)
    ds = run(
        make_controller("evidence"),
        [measured(i, h, unhealthy if i >= 4 else (True,) * 4) for i, h in enumerate(hs)],
    )[1]
    assert ds[-1].acted and ds[-1].offsets["lr"] < ds[3].offsets["lr"]


def test_evidence_a_run_whose_first_pool_said_lower_throughout_runs_down_through_the_rise():
    from dataclasses import replace

    bases = [0.04, 0.2, 0.4, 0.6, 0.8, 1.0, 0.99, 0.95, 0.9, 0.85]  # 6 windows of rise, then the anneal

    def windows(hs):  # the loss halves every window: the stall test holds any move down on healthy windows
        return [
            replace(window([2.0 * 0.5**i] * 4, index=i, step=10 * (i + 1), base=bases[i]), hypergradient=h)
            for i, h in enumerate(hs)
        ]

    # the signs alone (`run_down_on_plateau` off, the rule until 2026-12-05): the loss's fall is not read
    on = make_controller("evidence", high_start_runs_down=True, run_down_on_plateau=False)
    state, ds = run(on, windows([-0.3] * 10))
    assert state.first_verdict == {"lr": -1}
    # it moves at the first full pool, and the kept pool moves again each window, doubling to max_step_down
    # (these windows all sit at offset 0, so each decision's offset is its step)
    assert [i for i, d in enumerate(ds) if d.acted] == [3, 4, 5]
    assert [d.offsets["lr"] for d in ds[3:6]] == pytest.approx([-0.25, -0.5, -0.5])
    # in the anneal "lower" is the schedule's bias, and the stall test applies again: held
    assert not any(d.acted for d in ds[6:]) and "points down" in ds[-1].note
    assert ControllerState.from_dict(state.to_dict()) == state
    # the run ends at the first window that says "higher"
    _, ds = run(on, windows([-0.3] * 4 + [0.3, -0.3]))
    assert [i for i, d in enumerate(ds) if d.acted] == [3]
    # a first pool that was mixed, or all "higher", never does: there the stall test holds
    for hs in ([-0.3, 0.3, -0.3, -0.3] + [-0.3] * 2, [0.3] * 4 + [-0.3] * 2):
        state, ds = run(on, windows(hs))
        assert not any(d.acted and d.offsets["lr"] < 0 for d in ds) and state.first_verdict["lr"] >= 0
    # off: the stall test holds the same run
    _, ds = run(make_controller("evidence", high_start_runs_down=False), windows([-0.3] * 10))
    assert not any(d.acted for d in ds) and "still falls fast" in ds[4].note


def test_evidence_runs_down_from_a_first_pool_of_lower_only_where_the_loss_has_stopped_falling():
    from dataclasses import replace

    bases = [0.04, 0.2, 0.4, 0.6, 0.8, 1.0, 0.99, 0.95, 0.9, 0.85]  # 6 windows of rise, then the anneal

    def windows(losses):  # every window says "lower"
        return [
            replace(window([x] * 4, index=i, step=10 * (i + 1), base=bases[i]), hypergradient=-0.3)
            for i, x in enumerate(losses)
        ]

    def run_moves(ws, **settings):
        _, ds = run(make_controller("evidence", **settings), ws)
        return [(i, d.offsets["lr"]) for i, d in enumerate(ds) if d.acted]

    def moves(losses):
        return run_moves(windows(losses))

    # past the edge of stability the loss stops falling as the warm-up raises the rate: it runs down from
    # the window that completes the first pool while the loss still does not fall (a 10x too high LM); at
    # window 5 the loss has given back 31% of what the run had learned, which rolls back (`rise_rollback`)
    assert run_moves(windows([3.9, 2.8, 2.6, 2.7, 2.8, 3.0, 2.9, 2.9]), rise_rollback=None) == [
        (3, -0.25),
        (4, -0.5),
        (5, -0.5),
    ]
    _, ds = run(make_controller("evidence"), windows([3.9, 2.8, 2.6, 2.7, 2.8, 3.0]))
    assert [i for i, d in enumerate(ds) if d.rollback] == [5]
    _, ds = run(make_controller("evidence"), windows([3.9, 2.8, 2.6, 2.7]))
    assert "the loss stopped falling: a rate too high" in ds[3].note  # the trajectory says why it moved
    # a window whose loss falls is no run down: there the ordinary rule decides (it moves on a stalled loss,
    # the pool kept from the run down, and holds one that falls fast), and a flat window after that window
    # starts no run down again
    assert moves([3.9, 2.8, 2.6, 2.7, 2.6, 2.6]) == [(3, -0.25), (4, -0.5)]
    assert moves([3.9, 2.8, 2.6, 2.7, 1.3, 1.2]) == [(3, -0.25)]
    # at a good rate the loss still falls when the first pool is complete: no run down, whatever the signs
    # (a regression under Adam, an MLP on spiral data), and a flat window later starts none: the decisions
    # are those of the controller without the rule (one ordinary move down once the loss has stalled)
    good = windows([1.0, 0.9, 0.8, 0.7, 0.7, 0.7, 0.7])
    without = run(make_controller("evidence", high_start_runs_down=False), good)[1]
    assert run(make_controller("evidence"), good)[1] == without
    assert [(i, d.offsets["lr"]) for i, d in enumerate(without) if d.acted] == [(4, -0.25)]
    # the stall test still holds a move down while the loss falls fast
    _, ds = run(make_controller("evidence"), windows([2.0 * 0.5**i for i in range(6)]))
    assert not any(d.acted for d in ds) and "still falls fast" in ds[4].note
    # a loss that stops falling only after the first pool is complete and stays below window 1's: the run down
    # has passed (one ordinary move on the stalled loss, its pool then afresh); `run_down_starts_late` (off)
    # starts it there
    late = [3.9, 2.8, 2.6, 2.5, 2.6, 2.7]
    assert moves(late) == [(4, -0.25)]
    _, ds = run(make_controller("evidence", run_down_starts_late=True), windows(late))
    assert [(i, d.offsets["lr"]) for i, d in enumerate(ds) if d.acted] == [(4, -0.25), (5, -0.5)]
    # `run_down_on_new_high` (on) starts it later only where the loss is the highest since the first window
    # (the run gave back what it had learned while the rate rose); `late` never got back above window 1's 2.8
    assert moves(late) == run_moves(windows(late), run_down_on_new_high=False)
    risen = [3.9, 2.8, 2.6, 2.5, 2.9, 3.0]  # window 4 gives back 29% of it: `rise_rollback`, here off
    assert run_moves(windows(risen), rise_rollback=None) == [(4, -0.25), (5, -0.5)]
    _, ds = run(make_controller("evidence", rise_rollback=None), windows(risen))
    assert "the loss stopped falling: a rate too high" in ds[4].note
    assert run_moves(windows(risen), run_down_on_new_high=False, rise_rollback=None) == [(4, -0.25)]
    # only in the rise's run-down windows: a new high after window 2 * (evidence_windows - 1) starts none
    assert moves([3.9, 2.8, 2.6, 2.5, 2.4, 2.3, 2.2, 2.9]) == moves([3.9, 2.8, 2.6, 2.5, 2.4, 2.3, 2.2, 2.2])


def test_evidence_rolls_back_a_window_of_the_rise_that_undid_what_the_run_had_learned():
    from dataclasses import replace

    bases = [0.04, 0.2, 0.4, 0.6, 0.8, 1.0, 0.99, 0.95, 0.9, 0.85]  # 6 windows of rise, then the anneal

    def windows(losses):  # every window says "higher": no move down interferes
        return [
            replace(window([x] * 4, index=i, step=10 * (i + 1), base=bases[i]), hypergradient=0.3)
            for i, x in enumerate(losses)
        ]

    def rollbacks(losses, **settings):
        _, ds = run(make_controller("evidence", **settings), windows(losses))
        return [i for i, d in enumerate(ds) if d.rollback]

    # a byte LM 10x too high under AdamW: the warm-up's rate lifts its loss from 2.6 to 3.1 with every replica
    # healthy, giving back 38% of what it had learned since the first window (3.9): undone, the rate cut as
    # for a failed window (0.5 x the lowest replica's, and ahead of the rise: x 0.6 / 0.8)
    lm = [3.9, 2.8, 2.7, 2.6, 3.1]
    assert rollbacks(lm) == [4]
    _, ds = run(make_controller("evidence"), windows(lm))
    assert "giving back 0.38 of what the run had learned: rolled back" in ds[4].note
    assert "healthy replica" not in ds[4].note  # every replica passed: the note says why instead
    assert ds[4].offsets["lr"] == pytest.approx(math.log(0.5 * min(MULTS) * 0.6 / 0.8))
    # not where it rose less than 1.1x, nor where it gave back less than 20% (a loss near its floor: 0.1 to
    # 0.12 is 1.2x, yet 0.5% of the run's progress; 5.0 down to 2.6, then 2.9: 1.12x, 12.5%), nor with the
    # rule off
    assert rollbacks([3.9, 2.8, 2.7, 2.6, 2.8]) == []
    assert rollbacks([3.9, 1.0, 0.5, 0.1, 0.12]) == []
    assert rollbacks([5.0, 2.8, 2.7, 2.6, 2.9]) == []
    assert rollbacks(lm, rise_rollback=None) == []
    assert rollbacks(lm, rise_giveback=0.5) == []
    # a quarter given back rolls back (the quality LM's seed 0 from 10x too high: 1.11x, 25%); it did not
    # under the 0.3 of the rule's first days
    quarter = [3.9, 2.8, 2.7, 2.6, 2.93]
    assert rollbacks(quarter) == [4]
    assert rollbacks(quarter, rise_giveback=0.3) == []
    # not on a window that left a replica out (health has judged it), nor in the anneal
    left_out = windows(lm)
    left_out[4] = replace(left_out[4], healthy=(True, True, True, False))
    _, ds = run(make_controller("evidence"), left_out)
    assert not any(d.rollback for d in ds)
    assert rollbacks([3.9, 2.8, 2.7, 2.6, 2.5, 2.4, 3.0]) == []  # window 6: the base fell
    # once only: after a rollback (or a restart) what the run had learned is no longer known
    assert rollbacks([3.9, 2.8, 2.7, 2.6, 3.1, 3.4]) == [4]
    # the state carries it through a checkpoint
    state, _ = run(make_controller("evidence"), windows(lm[:4]))
    assert state.learned == pytest.approx((math.log(3.9), math.log(2.6)))
    assert ControllerState.from_dict(json.loads(json.dumps(state.to_dict()))) == state


def test_evidence_reads_a_first_pool_again_without_a_first_window_of_higher():
    from dataclasses import replace

    bases = [0.04, 0.2, 0.4, 0.6, 0.8, 1.0, 0.99, 0.95, 0.9, 0.85]  # 6 windows of rise, then the anneal

    def windows(signs, losses):
        return [
            replace(window([x] * 4, index=i, step=10 * (i + 1), base=bases[i]), hypergradient=0.3 * h)
            for i, (h, x) in enumerate(zip(signs, losses, strict=True))
        ]

    def moves(signs, losses, **settings):
        _, ds = run(make_controller("evidence", **settings), windows(signs, losses))
        return [(i, d.offsets["lr"]) for i, d in enumerate(ds) if d.acted]

    flat = [3.9, 2.8, 2.6, 2.5, 2.6, 2.7, 2.8]  # stopped falling by window 3
    # the initialisation's first window says "higher" at any rate; the windows after it say "lower" and the
    # loss has stopped falling: the pool of windows 1-4 is the first pool, and the rate runs down from there
    assert moves([1, -1, -1, -1, -1, -1, -1], flat) == [(4, -0.25), (5, -0.5)]
    _, ds = run(make_controller("evidence"), windows([1, -1, -1, -1, -1], flat[:5]))
    assert "the first pool it judged said lower throughout" in ds[4].note
    # read with the first window, that pool is mixed and starts no run down: one ordinary move on the stalled
    # loss, whose pool then starts afresh
    assert moves([1, -1, -1, -1, -1, -1, -1], flat, first_pool_skips_first_higher=False) == [(4, -0.25)]
    # only a first window of "higher" is skipped, and only once: other mixed pools are judged as they are
    for signs in ([-1, 1, -1, -1, -1, -1, -1], [1, 1, -1, -1, -1, -1, -1], [1, -1, 1, -1, -1, -1, -1]):
        assert moves(signs, flat) == moves(signs, flat, first_pool_skips_first_higher=False)
    # a loss that still falls when the later pool is complete (a good rate): no run down, one ordinary move
    # on the stalled loss; read with the first window the pool is mixed, and `mixed_start_holds_falling`
    # holds that move while the loss falls in every window
    falling = [3.9, 2.8, 2.6, 2.5, 2.4, 2.3, 2.2]
    assert moves([1, -1, -1, -1, -1, -1, -1], falling) == [(4, -0.25)]
    assert moves([1, -1, -1, -1, -1, -1, -1], falling) == moves(
        [1, -1, -1, -1, -1, -1, -1],
        falling,
        first_pool_skips_first_higher=False,
        mixed_start_holds_falling=False,
    )
    assert moves([1, -1, -1, -1, -1, -1, -1], falling, first_pool_skips_first_higher=False) == []


def test_evidence_narrows_the_spread_once_the_run_has_shown_its_rate_is_not_too_high():
    from dataclasses import replace

    bases = [0.2, 0.4, 0.6, 0.8, 1.0, 0.99, 0.95, 0.9]  # the rise, then the anneal

    def windows(hs, offsets=None):  # the loss halves every window: in the rise no move is allowed
        offsets = offsets or [0.0] * len(hs)
        return [
            replace(
                window([2.0 * 0.5**i] * 4, index=i, step=10 * (i + 1), base=bases[i], offset=o),
                hypergradient=h,
            )
            for i, (h, o) in enumerate(zip(hs, offsets, strict=True))
        ]

    # the first pool of 4 says "higher" throughout and the centre has not moved: no spread from then on
    state, ds = run(make_controller("evidence", settled_width=0.0), windows([0.3] * 4 + [-0.3] * 2))
    assert [d.widths for d in ds] == [{}, {}, {}, {"lr": 0.0}, {"lr": 0.0}, {"lr": 0.0}]
    assert not any(d.acted for d in ds) and state.widths == {"lr": 0.0}
    assert ControllerState.from_dict(state.to_dict()) == state
    # a setting in between
    _, ds = run(make_controller("evidence", settled_width=0.5), windows([0.3] * 4))
    assert ds[-1].widths == {"lr": 0.5}
    # any move of the centre brings the full spread back for good: here a rollback left the offset lower
    state, ds = run(
        make_controller("evidence", settled_width=0.0), windows([0.3] * 6, offsets=[0.0] * 5 + [-0.7])
    )
    assert ds[4].widths == {"lr": 0.0} and ds[5].widths == {} and state.came_down == {"lr": True}
    # the rollback itself (no healthy replica) restores it at once
    state, _ = run(make_controller("evidence", settled_width=0.0), windows([0.3] * 4))
    state, d = make_controller("evidence", settled_width=0.0).decide(
        state, replace(windows([0.3] * 5)[4], healthy=(False,) * 4, losses=(math.nan,) * 4)
    )
    assert d.rollback and d.widths == {} and state.widths == {}
    # a first pool that was not "higher" throughout (a rate too high says "lower" early) keeps the spread
    _, ds = run(make_controller("evidence", settled_width=0.0), windows([0.3, 0.3, -0.3, 0.3, 0.3, 0.3]))
    assert all(d.widths == {} for d in ds)
    # off (the default), and only read with the hypergradient
    _, ds = run(make_controller("evidence"), windows([0.3] * 6))
    assert all(d.widths == {} for d in ds)
    _, ds = run(make_controller("evidence", settled_width=0.0, signal="rank"), windows([0.3] * 6))
    assert all(d.widths == {} for d in ds)
    with pytest.raises(ValueError, match="settled_width"):
        make_controller("evidence", settled_width=1.5)


def test_evidence_an_exclusion_does_not_skip_the_test():
    # one window with the top replica excluded: strong but single evidence -> no move yet (z = 1.73)
    c = make_controller("evidence")
    _, ds = run(c, [window([1.0, 2.0, 3.0, 9.0], healthy=[True, True, True, False], index=0, step=10)])
    assert ds[0].offsets["lr"] == 0.0
    # two such windows while annealing: instability, not the horizon's bias, so the bias does not block it
    bases = [1.0, 0.8]
    _, ds = run(
        c,
        [
            window(
                [1.0, 2.0, 3.0, 9.0], healthy=[True, True, True, False], index=i, step=10 * (i + 1), base=b
            )
            for i, b in enumerate(bases)
        ],
    )
    assert ds[-1].offsets["lr"] < 0


def test_evidence_settings_are_validated():
    with pytest.raises(ValueError, match="z_threshold"):
        make_controller("evidence", z_threshold=0)
    with pytest.raises(ValueError, match="max_step"):
        make_controller("evidence", step_size=0.5, max_step=0.1)
    with pytest.raises(ValueError, match="stall_ratio"):
        make_controller("evidence", stall_ratio=1.5)
    with pytest.raises(ValueError, match="climb_from"):
        make_controller("evidence", climb_from=0.0)
    with pytest.raises(ValueError, match="signal must be one of"):
        make_controller("evidence", signal="loss")
    with pytest.raises(ValueError, match="rise_rollback"):
        make_controller("evidence", rise_rollback=1.0)
    with pytest.raises(ValueError, match="rise_giveback"):
        make_controller("evidence", rise_giveback=-0.1)


def test_evidence_removes_a_shards_own_difficulty():
    # a small real effect (each level up lowers the loss by 1%) under 2% noise, and replica 0's shard is
    # simply easier (20% lower loss whatever it runs). Multipliers are re-permuted each window, so the shard's
    # offset is noise that hides the effect; estimating it from earlier windows and taking it out finds the
    # effect sooner. Flat schedule, so the bias rule plays no part.
    import random

    def windows(seed):
        rng = random.Random(seed)
        out = []
        for i in range(30):
            perm = permutation(4, seed, i, "lr")
            losses = [
                (0.8 if r == 0 else 1.0) * (1 - 0.01 * perm[r]) * (1 + 0.02 * rng.random()) for r in range(4)
            ]
            out.append(window(losses, mults=[MULTS[perm[r]] for r in range(4)], index=i, step=10 * (i + 1)))
        return out

    def first_move(controller, ws):
        _, ds = run(controller, ws)
        return next((i for i, d in enumerate(ds) if d.acted), len(ds))

    seeds = range(20)
    corrected = [first_move(make_controller("evidence"), windows(s)) for s in seeds]
    raw = [first_move(make_controller("evidence", shard_correction=False), windows(s)) for s in seeds]
    assert sum(corrected) < sum(raw)


def test_evidence_a_climb_on_the_first_full_pool_starts_one_step_further():
    from dataclasses import replace

    # the rise from half the peak (the climb need not wait), the loss falling 3% a window (stalled)
    bases = [0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.0, 1.0]

    def moves(hs, **settings):  # these windows all sit at offset 0, so each decision's offset is its step
        windows = [
            window([2.0 * 0.97**i] * 4, index=i, step=10 * (i + 1), base=b) for i, b in enumerate(bases)
        ]
        windows = [
            replace(w, hypergradient=h, params={"lr": replace(w.params["lr"], peak=1.0)})
            for w, h in zip(windows, hs, strict=True)
        ]
        state, ds = run(make_controller("evidence", **settings), windows)
        assert ControllerState.from_dict(state.to_dict()) == state
        return [(i, d.offsets["lr"]) for i, d in enumerate(ds) if d.acted]

    # the first pool says "higher" throughout and the climb acts on it: one of its earlier windows counts
    assert moves([0.3] * 8)[:3] == [(3, 0.5), (4, 0.75), (5, 0.75)]
    assert moves([0.3] * 8, first_pool_counts=0)[:3] == [(3, 0.25), (4, 0.5), (5, 0.75)]
    assert moves([0.3] * 8, first_pool_counts=3)[0] == (3, 0.75)
    # a first pool that was mixed: the climb acts on a later pool, from step_size
    assert moves([-0.3] + [0.3] * 7)[:2] == [(4, 0.25), (5, 0.5)]
    with pytest.raises(ValueError, match="first_pool_counts must be >= 0"):
        make_controller("evidence", first_pool_counts=-1)


def test_evidence_windows_of_higher_held_by_the_bias_count_toward_the_climb_with_held_up_counts():
    from dataclasses import replace

    # the rise (the loss halves every window, so the climb may not act and the bias holds "higher"), then a
    # flat peak where the pool, refilled, moves up
    bases = [0.2, 0.4, 0.6, 0.8, 0.9, 0.95] + [1.0] * 8
    windows = [
        replace(window([2.0 * 0.5**i] * 4, index=i, step=10 * (i + 1), base=b), hypergradient=0.3)
        for i, b in enumerate(bases)
    ]
    held = "points the way the schedule's bias does"

    def moves(**settings):  # these windows all sit at offset 0, so each decision's offset is its step
        state, ds = run(make_controller("evidence", **settings), windows)
        assert sum(held in d.note for d in ds) == 4
        assert ControllerState.from_dict(state.to_dict()) == state
        return [(i, d.offsets["lr"]) for i, d in enumerate(ds) if d.acted]

    # the loss halves through the held windows: the hold was the horizon's pull, and the run starts afresh
    # (`held_up_when_stalled`) as it does with held_up_counts off
    assert moves() == [(10, 0.25), (11, 0.5), (12, 0.75), (13, 0.75)]
    assert moves(held_up_counts=False) == moves()
    # without that gate the four held windows carry the run, which starts at max_step
    every = {"held_up_counts": True, "held_up_when_stalled": False}
    assert moves(**every) == [(10, 0.75), (11, 0.75), (12, 0.75), (13, 0.75)]
    # held_up_max caps what the held windows add: one of them makes the first step twice step_size
    assert moves(**every, held_up_max=1) == [(10, 0.5), (11, 0.75), (12, 0.75), (13, 0.75)]
    # a run whose loss barely falls (5% a window) is too low: its windows held while the base was under half
    # the schedule's peak (`climb_from`: 3, 4 and 5) count, and the climb's first move at window 6 is 0.75
    stalled = [
        replace(w, losses=(2.0 * 0.95**i,) * 4, params={"lr": replace(w.params["lr"], peak=2.0)})
        for i, w in enumerate(windows)
    ]
    state, ds = run(make_controller("evidence"), stalled)
    acted = [(i, d.offsets["lr"]) for i, d in enumerate(ds) if d.acted]
    assert acted[0] == (6, 0.75) and sum(held in d.note for d in ds) == 3
    assert ControllerState.from_dict(state.to_dict()) == state
    _, ds = run(make_controller("evidence", held_up_counts=False), stalled)
    assert next((i, d.offsets["lr"]) for i, d in enumerate(ds) if d.acted) == (6, 0.25)
    # the stall is read across the whole hold, not at the move alone: a loss that halved through the held
    # windows and then went flat (5% a window from window 6) has stalled by the move at 10, but its hold was
    # the pull
    levels = [2.0 * 0.5 ** min(i, 5) * 0.95 ** max(i - 5, 0) for i in range(len(windows))]
    flat_late = [replace(w, losses=(x,) * 4) for w, x in zip(windows, levels, strict=True)]
    _, ds = run(make_controller("evidence"), flat_late)
    assert next((i, d.offsets["lr"]) for i, d in enumerate(ds) if d.acted) == (10, 0.25)
    _, ds = run(make_controller("evidence", held_up_when_stalled=False), flat_late)
    assert next((i, d.offsets["lr"]) for i, d in enumerate(ds) if d.acted) == (10, 0.75)
    # however long the hold: through a long warm-up (the base reaches half its peak at window 10) a loss that
    # falls 10% a window has stalled by the climb's test at 10, but it more than halved from window 3 on, and
    # the held windows do not count
    rise = [0.1 * 1.1**i for i in range(12)]
    slow = [window([2.0 * 0.9**i] * 4, index=i, step=10 * (i + 1), base=b) for i, b in enumerate(rise)]
    slow = [
        replace(w, hypergradient=0.3, params={"lr": replace(w.params["lr"], peak=2 * rise[10])}) for w in slow
    ]
    _, ds = run(make_controller("evidence"), slow)
    assert next((i, d.offsets["lr"]) for i, d in enumerate(ds) if d.acted) == (10, 0.25)
    _, ds = run(make_controller("evidence", held_up_when_stalled=False), slow)
    assert next((i, d.offsets["lr"]) for i, d in enumerate(ds) if d.acted) == (10, 0.75)
    with pytest.raises(ValueError, match="held_up_max must be >= 0"):
        make_controller("evidence", held_up_max=-1)
    # a full pool that then says neither way drops what was held: the next climb starts at step_size again
    hs = [0.3] * 6 + [0.3, -0.3, 0.3, -0.3] + [0.3] * 4
    split = [replace(w, hypergradient=h) for w, h in zip(windows, hs, strict=True)]
    _, ds = run(make_controller("evidence", **every), split)
    assert [(i, d.offsets["lr"]) for i, d in enumerate(ds) if d.acted] == [(13, 0.25)]


def test_evidence_a_failed_top_replica_ends_a_run_of_moves_up():
    from dataclasses import replace

    # the rise from half the peak, the loss falling 3% a window (stalled), the hypergradient "higher"
    # throughout; in window 4 one replica fails
    bases = [0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.0, 1.0]

    def moves(failed, **settings):
        windows = []
        for i, b in enumerate(bases):
            healthy = [r != failed for r in range(4)] if i == 4 else None
            w = window([2.0 * 0.97**i] * 4, index=i, step=10 * (i + 1), base=b, healthy=healthy)
            windows.append(replace(w, hypergradient=0.3, params={"lr": replace(w.params["lr"], peak=1.0)}))
        state, ds = run(make_controller("evidence", **settings), windows)
        assert ControllerState.from_dict(state.to_dict()) == state
        return [(i, d.offsets["lr"]) for i, d in enumerate(ds) if d.acted], ds

    # no failure: the run of moves up goes on (0.5, 0.75, ...)
    ran, _ = moves(None)
    assert ran[:3] == [(3, 0.5), (4, 0.75), (5, 0.75)]
    # the top replica (the highest rate, MULTS[3]) fails in window 4: no move there, the run ends, and its
    # pool starts afresh, so the next move up waits for a full pool of its own (window 8 is past the end)
    ran, ds = moves(3)
    assert ran == [(3, 0.5)]
    assert "the top replica failed; the climb ends" in ds[4].note
    # a lower replica failing is not the canary: the run goes on
    ran, _ = moves(0)
    assert ran[:3] == [(3, 0.5), (4, 0.75), (5, 0.75)]
    # off: the failed top replica does not end the run
    ran, _ = moves(3, canary_ends_climb=False)
    assert ran[:3] == [(3, 0.5), (4, 0.75), (5, 0.75)]


def test_every_scheduler_controller_and_health_setting_is_named_in_the_engine_docs():
    import dataclasses
    from pathlib import Path

    from hdet_ray.core import controller

    text = (Path(__file__).resolve().parents[2] / "docs" / "engine.md").read_text()
    from hdet_ray.core.health import HealthConfig
    from hdet_ray.engine.options import HDETOptions

    configs = [controller.ControllerConfig, controller.PaperConfig, controller.SlopeConfig]
    configs += [controller.EvidenceConfig, HealthConfig, HDETOptions]
    missing = {
        f"{c.__name__}.{f.name}"
        for c in configs
        for f in dataclasses.fields(c)
        if f"`{f.name}`" not in text and f"`{f.name}=" not in text
    }
    assert not missing, f"docs/engine.md does not name {sorted(missing)}"


def test_evidence_starts_afresh_when_what_trains_changes():
    from dataclasses import replace

    def measured(i, h, restart=False):
        w = window([2.0] * 4, index=i, step=10 * (i + 1), base=1.0)
        return replace(w, hypergradient=h, restart=restart)

    # flat schedule, short every window: the 4th window moves and each agreeing window after it moves again
    _, ds = run(make_controller("evidence"), [measured(i, 0.3) for i in range(6)])
    assert [i for i, d in enumerate(ds) if d.acted] == [3, 4, 5]
    # a body unfrozen in window 4 (`Window.restart`): the run of moves and its pool were about the head
    # alone, so window 4 starts a new pool, which moves at its fourth window, from step_size again
    state, ds = run(make_controller("evidence"), [measured(i, 0.3, restart=i == 4) for i in range(8)])
    assert [i for i, d in enumerate(ds) if d.acted] == [3, 7]
    assert ds[7].offsets["lr"] == pytest.approx(0.25) and "what trains changed" in ds[4].note
    assert state.came_down == {"lr": False}  # what the run saw of the edge stays
    # the other controllers keep no evidence: the flag changes nothing there
    for name in ("paper", "slope"):
        plain = run(make_controller(name), [measured(i, 0.3) for i in range(6)])[1]
        flagged = run(make_controller(name), [measured(i, 0.3, restart=i == 4) for i in range(6)])[1]
        assert [d.offsets for d in plain] == [d.offsets for d in flagged]
