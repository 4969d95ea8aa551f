"""The OneCycleLR cases PyTorch's own scheduler tests cover, run on both OneCycleLR and HDETOneCycleLR.

Expected lists are worked out by hand from OneCycleLR's definition (max_lr 25, div_factor 25 -> initial 1,
final_div_factor 2 -> min 0.5, 10 steps, pct_start 0.3 -> the peak at step 2).
"""

import math
import pickle
import warnings

import pytest
import torch
from torch.optim.lr_scheduler import OneCycleLR

from hdet_ray import HDETOneCycleLR

# the arguments of the hand-computed cases
LINEAR = {
    "max_lr": 25,
    "final_div_factor": 2,
    "base_momentum": 1,
    "max_momentum": 22,
    "total_steps": 10,
    "anneal_strategy": "linear",
}
BOTH = pytest.mark.parametrize("cls", [OneCycleLR, HDETOneCycleLR], ids=["OneCycleLR", "HDETOneCycleLR"])
# linear, two phases: 1 -> 25 over steps 0..2, then 25 -> 0.5 over steps 2..9 (7 equal steps of 3.5)
LINEAR_LR = [1, 13, 25, 21.5, 18, 14.5, 11, 7.5, 4, 0.5]
LINEAR_MOMENTUM = [22, 11.5, 1, 4, 7, 10, 13, 16, 19, 22]  # 22 -> 1, then 1 -> 22 in steps of 3
# three phases: 1 -> 25 (steps 0..2), 25 -> 1 (2..4), 1 -> 0.5 (4..9, steps of 0.1)
THREE_PHASE_LR = [1, 13, 25, 13, 1, 0.9, 0.8, 0.7, 0.6, 0.5]
THREE_PHASE_MOMENTUM = [22, 11.5, 1, 11.5, 22, 22, 22, 22, 22, 22]


def _cos(start, end, pct):
    return end + (start - end) / 2 * (1 + math.cos(math.pi * pct))


COS_LR = [_cos(1, 25, k / 2) for k in range(3)] + [_cos(25, 0.5, k / 7) for k in range(1, 8)]
COS_MOMENTUM = [_cos(22, 1, k / 2) for k in range(3)] + [_cos(1, 22, k / 7) for k in range(1, 8)]


def _sgd(groups=1):
    return torch.optim.SGD(
        [{"params": [torch.nn.Parameter(torch.zeros(2))]} for _ in range(groups)], lr=0.05, momentum=0.9
    )


def _run(sched, opt, steps=10, key="momentum"):
    lrs, moms = [], []
    for _ in range(steps):
        g = opt.param_groups[0]
        lrs.append(g["lr"])
        moms.append(g["betas"][0] if key == "betas" else g[key])
        opt.step()
        sched.step()
    return lrs, moms


@BOTH
@pytest.mark.parametrize(
    ("anneal", "three_phase", "lr", "momentum"),
    [
        ("linear", False, LINEAR_LR, LINEAR_MOMENTUM),
        ("linear", True, THREE_PHASE_LR, THREE_PHASE_MOMENTUM),
        ("cos", False, COS_LR, COS_MOMENTUM),
    ],
)
def test_values_match_the_hand_computed_lists(cls, anneal, three_phase, lr, momentum):
    opt = _sgd()
    s = cls(opt, **{**LINEAR, "anneal_strategy": anneal}, three_phase=three_phase)
    lrs, moms = _run(s, opt, 9)  # the 10th value is set by the 9th step; stepping past 10 raises
    lrs.append(opt.param_groups[0]["lr"])
    moms.append(opt.param_groups[0]["momentum"])
    assert lrs == pytest.approx(lr, rel=1e-12)
    assert moms == pytest.approx(momentum, rel=1e-12)


@BOTH
def test_adam_cycles_beta1(cls):
    opt = torch.optim.Adam([torch.nn.Parameter(torch.zeros(2))], lr=0.05, betas=(0.9, 0.999))
    s = cls(opt, **LINEAR)
    lrs, moms = _run(s, opt, 9, key="betas")
    assert lrs == pytest.approx(LINEAR_LR[:9], rel=1e-12) and moms == pytest.approx(
        LINEAR_MOMENTUM[:9], rel=1e-12
    )
    assert opt.param_groups[0]["betas"][1] == 0.999


@BOTH
def test_epochs_times_steps_per_epoch_and_a_max_lr_per_group(cls):
    opt = _sgd(groups=2)
    s = cls(
        opt,
        max_lr=[25, 50],
        epochs=2,
        steps_per_epoch=5,
        final_div_factor=2,
        anneal_strategy="linear",
        cycle_momentum=False,
    )
    assert s.total_steps == 10
    seen = []
    for _ in range(9):
        seen.append([g["lr"] for g in opt.param_groups])
        opt.step()
        s.step()
    assert [a for a, _ in seen] == pytest.approx(LINEAR_LR[:9], rel=1e-12)
    assert [b for _, b in seen] == pytest.approx([2 * x for x in LINEAR_LR[:9]], rel=1e-12)


@BOTH
def test_stepping_past_total_steps_raises(cls):
    opt = _sgd()
    s = cls(opt, max_lr=1.0, total_steps=3)
    opt.step()
    for _ in range(2):
        s.step()
    with pytest.raises(ValueError, match="Tried to step 4 times"):
        s.step()
        s.step()


@BOTH
@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"total_steps": 10, "anneal_strategy": "exp"}, "anneal_strategy must be one of 'cos' or 'linear'"),
        ({"total_steps": 10, "pct_start": 1.1}, "Expected float between 0 and 1 pct_start"),
        ({"total_steps": 10, "pct_start": -0.1}, "Expected float between 0 and 1 pct_start"),
        ({}, "You must define either total_steps OR"),
        ({"epochs": 2}, "steps_per_epoch"),
        ({"total_steps": -1}, "Expected positive integer total_steps"),
        ({"total_steps": 10, "max_lr": [1.0, 2.0]}, "max_lr must have the same length"),
    ],
)
def test_bad_arguments_raise_onecycles_errors(cls, kwargs, match):
    kwargs = {"max_lr": 1.0, **kwargs}
    with pytest.raises(ValueError, match=match):
        cls(_sgd(), **kwargs)


@BOTH
def test_cycle_momentum_needs_an_optimizer_with_momentum(cls):
    opt = torch.optim.Rprop([torch.nn.Parameter(torch.zeros(2))], lr=0.05)
    with pytest.raises(ValueError, match="optimizer must support momentum"):
        cls(opt, max_lr=1.0, total_steps=10)


@BOTH
def test_state_dict_pickles_and_resumes(cls):
    opt = _sgd()
    s = cls(opt, **LINEAR)
    for _ in range(4):
        opt.step()
        s.step()
    saved = pickle.loads(pickle.dumps(s.state_dict()))
    opt2 = _sgd()
    s2 = cls(opt2, **LINEAR)
    s2.load_state_dict(saved)
    assert s2.last_epoch == 4 and s2.get_last_lr() == s.get_last_lr()
    lrs, _ = _run(s2, opt2, 5)
    assert lrs[1:] == pytest.approx(LINEAR_LR[5:9], rel=1e-12)


@BOTH
def test_get_last_lr_and_last_epoch_follow_each_step(cls):
    opt = _sgd()
    s = cls(
        opt, max_lr=25, final_div_factor=2, total_steps=10, anneal_strategy="linear", cycle_momentum=False
    )
    assert s.last_epoch == 0 and s.get_last_lr() == [pytest.approx(1.0)]
    for k in range(1, 9):
        opt.step()
        s.step()
        assert s.last_epoch == k
        assert s.get_last_lr() == [pytest.approx(LINEAR_LR[k], rel=1e-12)]


@BOTH
def test_scheduler_stepped_before_the_optimizer_warns(cls):
    opt = _sgd()
    s = cls(opt, max_lr=1.0, total_steps=10)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        s.step()
    assert any("before `optimizer.step()`" in str(w.message) for w in seen)
