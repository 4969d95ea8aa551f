"""The shared gradient that an unstable replica cannot poison, on 4 real gloo processes."""

import math

import pytest
import torch

from hdet_ray.engine.fanout import GradientScale, average_gradients
from tests.engine.conftest import run_ranks

GRADS = {0: [1.0, 0.0], 1: [0.0, 1.0], 2: [math.nan, 0.0], 3: [1e6, 0.0]}


def poisoned_step(rank, world):
    p = torch.nn.Parameter(torch.zeros(2))
    p.grad = torch.tensor(GRADS[rank])
    average_gradients([p])
    return p.grad.tolist()


def test_a_nan_or_huge_gradient_from_one_rank_does_not_reach_the_shared_gradient():
    # norms 1, 1, non-finite, 1e6: the lower median is 1, so rank 3's gradient is cut to norm 3 = [3, 0];
    # rank 2 (NaN) contributes nothing; the mean over the 3 finite ranks: ([1, 0] + [0, 1] + [3, 0]) / 3
    outs = run_ranks(poisoned_step, 4)
    for g in outs:
        assert g == pytest.approx([4 / 3, 1 / 3], rel=1e-6)  # float32 gradients
    # unclipped, the mean would have been (1e6 + 1) / 3 along the first axis
    assert max(abs(x) for g in outs for x in g) < 2


def ddp_poisoned_step(rank, world):
    """A user's DDP script with HDET: the DDP-wrapped model passed as `model=`, a gradient clip between
    backward() and step(). The gradient of the loss w.r.t. the weight is the rank's GRADS row."""
    from hdet_ray import HDETOneCycleLR

    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(2, 1, bias=False))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = HDETOneCycleLR(opt, max_lr=0.1, total_steps=10, sync_every=5, model=model)
    x = torch.tensor([GRADS[rank]])
    model(x).sum().backward()
    after_backward = model.module.weight.grad.reshape(-1).tolist()
    norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), 1e9))  # what a user's clip reads
    held = not model.require_backward_grad_sync
    scheduler.close()
    return {"grad": after_backward, "norm": norm, "held": held, "released": model.require_backward_grad_sync}


def test_under_a_users_ddp_the_shared_gradient_is_still_poison_proof_and_clipped_after_averaging():
    # DDP's plain mean would be NaN on every rank; the scheduler holds DDP off and averages as above
    outs = run_ranks(ddp_poisoned_step, 4)
    for o in outs:
        assert o["grad"] == pytest.approx([4 / 3, 1 / 3], rel=1e-6)
        assert o["norm"] == pytest.approx(math.hypot(4 / 3, 1 / 3), rel=1e-6)  # the clip saw the mean
        assert o["held"] and o["released"]  # no_sync() while the scheduler lives, DDP's sync back after


def scaled_overflow(rank, world, overflow_ranks):
    """One mixed-precision step with torch's GradScaler (on CPU, float32) at a scale of 2^100, the same on
    every rank as it is in a real run: an input of 1e30 makes the scaled gradient overflow to inf on the
    ranks in `overflow_ranks`; the others' (input 4) stay finite."""
    from hdet_ray import HDETOneCycleLR

    model = torch.nn.Linear(2, 1, bias=False)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = HDETOneCycleLR(opt, max_lr=0.1, total_steps=10, sync_every=5, model=model)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**100)
    before = model.weight.detach().clone()
    x = 1e30 if rank in overflow_ranks else 4.0
    scaler.scale(model(torch.tensor([[x, x]])).sum()).backward()
    finite = bool(torch.isfinite(model.weight.grad).all())
    scaler.step(opt)
    scaler.update()
    scheduler.close()
    moved = not torch.equal(model.weight.detach(), before)
    return {"finite": finite, "moved": moved, "scale": scaler.get_scale()}


@pytest.mark.parametrize("overflow_ranks", [(0, 1, 2, 3), (3,)])
def test_a_grad_scaler_sees_an_overflow_that_every_rank_had_and_backs_off(overflow_ranks):
    # DDP hands every rank inf when one overflows, and the scaler skips the step and halves its scale. The
    # shared gradient leaves a non-finite rank out; with every rank out there is no gradient to average, and
    # a mean of zero (what the count's floor of 1 made) hid the overflow: the scaler stepped and kept its
    # scale, so every later step overflowed too. One rank of four: the others' mean is a real gradient
    outs = run_ranks(scaled_overflow, 4, overflow_ranks)
    everyone = len(overflow_ranks) == 4
    for o in outs:
        assert o["finite"] is not everyone
        assert o["moved"] is not everyone  # skipped where nothing finite was left, stepped otherwise
        assert o["scale"] == 2.0**99 if everyone else 2.0**100  # backed off, or kept


NOISY = {0: [1.0, 0.0], 1: [0.0, 1.0], 2: [1.0, 0.0], 3: [10.0, 0.0]}


def noisy_step(rank, world, floor):
    p = torch.nn.Parameter(torch.zeros(2))
    p.grad = torch.tensor(NOISY[rank])
    average_gradients([p], floor=None if floor is None else torch.tensor(floor, dtype=torch.float64))
    return p.grad.tolist()


@pytest.mark.parametrize("floor, expected", [(None, [5 / 4, 1 / 4]), (4.0, [3.0, 1 / 4])])
def test_the_clip_bound_is_the_larger_of_this_steps_median_and_the_runs_ordinary_norm(floor, expected):
    # norms 1, 1, 1, 10: against this step's median (1) rank 3 is cut to norm 3; with a floor of 4 (a run
    # whose healthy windows have seen gradients of norm 4) its 10 is shard noise, under 3 x 4, and counts
    outs = run_ranks(noisy_step, 4, floor)
    for g in outs:
        assert g == pytest.approx(expected, rel=1e-6)


def test_the_ordinary_norm_keeps_only_windows_that_ended_healthy():
    scale = GradientScale()
    scale.observe(torch.tensor([1.0, 2.0, 3.0, 50.0], dtype=torch.float64))  # lower median 2
    scale.observe(torch.tensor([0.5, 1.0, math.inf, math.inf], dtype=torch.float64))  # inf median: ignored
    assert scale.floor is None
    scale.end_window(healthy=True)
    assert float(scale.floor) == 2.0
    scale.observe(torch.tensor([40.0, 50.0, 60.0, 70.0], dtype=torch.float64))  # a window that lost replicas
    scale.end_window(healthy=False)
    assert float(scale.floor) == 2.0
    scale.observe(torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=torch.float64))  # smaller norms never lower it
    scale.end_window(healthy=True)
    assert float(scale.floor) == 2.0
    again = GradientScale()
    again.load_state_dict(scale.state_dict(), torch.device("cpu"))
    assert float(again.floor) == 2.0
    fresh = GradientScale()
    fresh.load_state_dict({}, torch.device("cpu"))  # a checkpoint from before the floor existed
    assert fresh.floor is None
