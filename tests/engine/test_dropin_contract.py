"""The drop-in points of issue 12: step()'s contract, observe(), resuming from OneCycleLR, tensor lr, one
process equal to OneCycleLR, accessors, a checkpoint without weights, picklable errors."""

import copy
import io
import math
import pickle
import warnings

import pytest
import torch
from torch.optim.lr_scheduler import EPOCH_DEPRECATION_WARNING, OneCycleLR

from hdet_ray import HDETDivergedError, HDETOneCycleLR, HealthConfig
from hdet_ray.core.controller import Decision
from hdet_ray.engine.options import default_sync_every
from hdet_ray.spec import JobSpec


def _opt(lr=0.1, size=(4, 2), cls=torch.optim.SGD):
    torch.manual_seed(0)
    model = torch.nn.Linear(*size)
    kw = {"momentum": 0.9} if cls is torch.optim.SGD else {}
    return model, cls(model.parameters(), lr=lr, **kw)


def test_positional_epoch_is_onecycles_deprecated_epoch():
    _, a = _opt()
    _, b = _opt()
    ref, ours = OneCycleLR(a, max_lr=0.5, total_steps=100), HDETOneCycleLR(b, max_lr=0.5, total_steps=100)
    for i in range(99):
        a.step()
        b.step()
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            ours.step(i + 1)
        assert [str(w.message) for w in seen] == [EPOCH_DEPRECATION_WARNING]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ref.step(i + 1)
        assert ours.last_epoch == ref.last_epoch == i + 1
        assert ours.get_last_lr() == ref.get_last_lr()
    assert not any(r.rollback for r in ours.records)
    assert ours.offsets == {"lr": 0.0}


def test_step_epoch_keyword_works_like_torch():
    _, a = _opt()
    _, b = _opt()
    ref, ours = OneCycleLR(a, max_lr=0.5, total_steps=20), HDETOneCycleLR(b, max_lr=0.5, total_steps=20)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref.step(epoch=5)
        ours.step(epoch=5)
    assert ours.last_epoch == 5 and ours.get_last_lr() == ref.get_last_lr()
    assert ours.steps_done == 1  # the HDET window counts calls


@pytest.mark.parametrize("bad", [torch.tensor(0.7), 0.7])
def test_a_loss_passed_positionally_is_refused_with_the_fix(bad):
    _, b = _opt()
    ours = HDETOneCycleLR(b, max_lr=0.5, total_steps=20)
    with pytest.raises(TypeError, match=r"step\(loss=\.\.\.\) or observe\(loss\)"):
        ours.step(bad)


def test_a_loss_of_more_than_one_element_is_refused_with_the_fix():
    # a per-example loss (reduction="none") is not the step's loss: say so, not "shape '[]' is invalid"
    _, b = _opt()
    ours = HDETOneCycleLR(b, max_lr=0.5, total_steps=20)
    with pytest.raises(ValueError, match=r"loss must be the step's scalar training loss.*\(8,\)"):
        ours.step(loss=torch.ones(8))
    ours.step(loss=torch.ones(1))  # one element of any shape is a scalar
    assert ours.steps_done == 1


def test_observe_then_step_equals_step_with_loss():
    scheds = []
    for use_observe in (True, False):
        _, b = _opt()
        s = HDETOneCycleLR(b, max_lr=0.5, total_steps=30, sync_every=10)
        for i in range(30):
            loss = torch.tensor(1.0 / (i + 1))
            if use_observe:
                s.observe(loss)
                s.step()
            else:
                s.step(loss=loss)
        scheds.append(s)
    a, b = ([r.to_dict() for r in s.records] for s in scheds)
    assert a == b and len(a) == 3
    assert a[0]["losses"] == [pytest.approx(sum(1.0 / (i + 1) for i in range(10)) / 10)]


def test_observe_does_not_advance():
    _, b = _opt()
    s = HDETOneCycleLR(b, max_lr=0.5, total_steps=30, sync_every=2)
    lr = s.get_last_lr()
    for _ in range(5):
        s.observe(torch.tensor(1.0))
    assert s.last_epoch == 0 and s.get_last_lr() == lr and s.records == []


def test_a_plain_onecycle_checkpoint_continues_as_hdet():
    _, a = _opt(cls=torch.optim.AdamW)
    ref = OneCycleLR(a, max_lr=0.3, total_steps=90)
    for _ in range(37):
        a.step()
        ref.step()
    saved_sched, saved_opt = copy.deepcopy(ref.state_dict()), copy.deepcopy(a.state_dict())
    _, b = _opt(cls=torch.optim.AdamW)
    ours = HDETOneCycleLR(b, max_lr=0.3, total_steps=90, sync_every=10)
    b.load_state_dict(saved_opt)
    ours.load_state_dict(saved_sched)
    assert ours.last_epoch == 37 and ours.get_last_lr() == ref.get_last_lr()
    for step in range(37, 89):
        assert b.param_groups[0]["lr"] == a.param_groups[0]["lr"], step
        assert b.param_groups[0]["betas"] == a.param_groups[0]["betas"], step
        a.step()
        b.step()
        ref.step()
        ours.step(loss=torch.tensor(1.0))
    assert [r.step for r in ours.records] == [47, 57, 67, 77, 87]  # windows start where OneCycleLR stopped
    assert "hdet" in ours.state_dict()


def test_tensor_lr_is_filled_in_place_and_get_last_lr_returns_copies():
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.Adam(model.parameters(), lr=torch.tensor(0.01))
    lr_tensor = opt.param_groups[0]["lr"]
    twin = torch.optim.Adam(torch.nn.Linear(4, 2).parameters(), lr=torch.tensor(0.01))
    ref = OneCycleLR(twin, max_lr=0.1, total_steps=20)
    s = HDETOneCycleLR(opt, max_lr=0.1, total_steps=20, sync_every=1)
    first = s.get_last_lr()[0]
    assert opt.param_groups[0]["lr"] is lr_tensor and first is not lr_tensor
    before = float(first)
    for _ in range(12):
        opt.step()
        twin.step()
        s.step(loss=torch.tensor(1.0))
        ref.step()
        assert opt.param_groups[0]["lr"] is lr_tensor
        assert torch.equal(s.get_last_lr()[0], ref.get_last_lr()[0])
    assert float(first) == before  # the value returned after construction did not move with the optimizer
    assert '"base": 0.' in s.records[0].to_json()  # the records hold plain numbers
    s.get_last_lr()[0].fill_(123.0)
    assert float(lr_tensor) != 123.0


def test_one_process_equals_onecycle_even_with_blown_up_and_nan_losses():
    _, a = _opt()
    _, b = _opt()
    ref, ours = (
        OneCycleLR(a, max_lr=0.5, total_steps=60),
        HDETOneCycleLR(b, max_lr=0.5, total_steps=60, sync_every=5),
    )
    losses = [1.0] * 10 + [50.0] * 10 + [math.nan] * 10 + [2.3] * 30
    for loss in losses:
        a.step()
        b.step()
        ref.step()
        ours.step(loss=torch.tensor(loss))
        assert ours.get_last_lr() == ref.get_last_lr()
    assert len(ours.records) == 12 and not any(r.rollback for r in ours.records)
    assert ours.rollback_bytes == 0  # no snapshot with one process unless asked


def test_one_process_health_checks_are_opt_in():
    _, b = _opt()
    ours = HDETOneCycleLR(
        b, max_lr=0.5, total_steps=60, sync_every=5, health=HealthConfig(), rollback="memory"
    )
    assert ours.rollback_bytes == 4 * (4 * 2 + 2)  # one float32 copy of the parameters
    for loss in [1.0] * 5 + [math.nan] * 5:
        b.step()
        ours.step(loss=torch.tensor(loss))
    assert [r.rollback for r in ours.records] == [False, True]
    assert ours.factor() == pytest.approx(0.5)


def test_rollback_off_continues_at_the_cut_rate_from_the_finite_state():
    model, b = _opt()
    ours = HDETOneCycleLR(b, max_lr=0.5, total_steps=60, sync_every=5, health=HealthConfig(), rollback="off")
    for loss in [1.0] * 5 + [math.nan] * 5:
        b.step()
        ours.step(loss=torch.tensor(loss))
    assert ours.records[-1].rollback and ours.factor() == pytest.approx(0.5)
    assert all(torch.isfinite(p).all() for p in model.parameters())


def test_rollback_off_with_non_finite_parameters_raises_diverged():
    model, b = _opt()
    ours = HDETOneCycleLR(b, max_lr=0.5, total_steps=60, sync_every=5, health=HealthConfig(), rollback="off")
    with torch.no_grad():
        model.weight.fill_(math.nan)
    with pytest.raises(HDETDivergedError, match="rollback='off'"):
        for _ in range(5):
            ours.step(loss=torch.tensor(math.nan))


def test_checkpoint_holds_no_weights_and_resume_snapshot_is_taken_at_the_next_step():
    sizes = {}
    for width in (10, 1000):
        model, b = _opt(size=(width, width))
        s = HDETOneCycleLR(b, max_lr=0.5, total_steps=60, sync_every=5, rollback="memory", model=model)
        assert s.rollback_bytes == 4 * (width * width + width)
        for _ in range(7):
            b.step()
            s.step(loss=torch.tensor(1.0))
        buf = io.BytesIO()
        torch.save(s.state_dict(), buf)
        sizes[width] = len(buf.getvalue())
        fresh = HDETOneCycleLR(b, max_lr=0.5, total_steps=60, sync_every=5, rollback="memory", model=model)
        fresh.load_state_dict(s.state_dict())
        assert fresh.rollback_bytes == 0
        b.step()
        assert fresh.rollback_bytes == 4 * (width * width + width)
    assert abs(sizes[1000] - sizes[10]) < 100  # 1,001,000 parameters more, the same checkpoint size


def test_centre_and_factor_follow_the_decision():
    _, b = _opt()
    cut = math.log(0.25)

    def decide(window, record):
        return Decision(offsets={"lr": cut}, weights=(1.0,), note="scripted")

    s = HDETOneCycleLR(b, max_lr=0.5, total_steps=60, sync_every=5, decide=decide)
    assert s.factor() == 1.0 and s.centre() == s.get_last_lr()[0]
    for _ in range(5):
        b.step()
        s.step(loss=torch.tensor(1.0))
    assert s.factor() == pytest.approx(0.25)
    assert s.centre() == pytest.approx(s.state.base_now[0] * 0.25)
    assert s.get_last_lr()[0] == pytest.approx(s.centre())
    assert s.records[-1].note == "scripted"
    with pytest.raises(KeyError, match="not an explored hyperparameter"):
        s.factor("wd")


def test_diverged_error_survives_pickling():
    e = pickle.loads(pickle.dumps(HDETDivergedError(3, 75, "every replica non-finite")))
    assert (e.window, e.step, e.note) == (3, 75, "every replica non-finite")
    assert str(e) == "HDET run diverged at window 3 (step 75): every replica non-finite"


@pytest.mark.parametrize(
    ("field", "value", "pattern"),
    [
        ("rollback", "disk", r"rollback must be one of \('memory', 'off'\)"),
        ("sync_every", 0, r"sync_every must be an integer >= 1"),
        ("noise", -0.1, r"noise must be >= 0"),
        ("opening_spread", 0.5, r"opening_spread must be >= 1"),
        ("health", {"blowup_factor": 3}, r"health must be a HealthConfig"),
    ],
)
def test_bad_options_name_the_field_and_range(field, value, pattern):
    _, b = _opt()
    with pytest.raises(ValueError, match=pattern):
        HDETOneCycleLR(b, max_lr=0.5, total_steps=20, **{field: value})


def test_the_controller_sees_the_schedules_peak():
    # OneCycle's max_lr is the rate's peak: the evidence controller's climb rule compares the base with it
    _, b = _opt()
    seen = []

    def decide(window, record):
        p = window.params["lr"]
        seen.append((p.base, p.peak, p.next_base))
        return Decision(offsets={"lr": 0.0}, weights=(1.0,), note="scripted")

    s = HDETOneCycleLR(b, max_lr=0.5, total_steps=60, sync_every=5, decide=decide)
    for _ in range(60):
        b.step()
        s.step(loss=torch.tensor(1.0))
    assert [peak for _, peak, _ in seen] == [0.5] * 12 and seen[0][0] < seen[1][0] < 0.5
    # and where the base will be at the next window's end (a rollback in the first window cuts for it)
    assert [n for _, _, n in seen[:-1]] == pytest.approx([base for base, _, _ in seen[1:]], rel=1e-12)
    assert seen[-1][2] == pytest.approx(s.get_last_lr()[0])


@pytest.mark.parametrize(
    ("total_steps", "expected"),
    [(1, 1), (19, 1), (100, 5), (200, 10), (500, 25), (600, 25), (100_000, 25)],
)
def test_the_default_sync_period_gives_twenty_windows_of_at_most_25_steps(total_steps, expected):
    # 500 steps: 25, the setting; 50 (10 windows) left the MLP from 10x too high dead there
    _, b = _opt()
    s = HDETOneCycleLR(b, max_lr=0.5, total_steps=total_steps)
    assert s.options.sync_every == default_sync_every(total_steps) == expected
    assert JobSpec(steps=total_steps).sync_period == expected
