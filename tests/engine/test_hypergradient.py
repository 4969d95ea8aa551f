"""The window hypergradient the evidence controller reads: measured on real gloo processes (4 ranks).

On a quadratic with curvature a, the first window of two steps ends with the gradient a * e1 after one step
e1 = (1 - lr * a) * e0 along -e0: -cos(g, step) is +1 where lr * a < 1 (the step fell short) and -1 where
1 < lr * a < 2 (it overshot). OneCycle's rate at the first steps is max_lr / 25; max_lr 25 makes it ~1.
"""

import pytest
import torch

from hdet_ray import HDETOneCycleLR
from tests.engine.conftest import run_ranks


def quadratic_window(rank, world, curvature, controller_settings):
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 1, bias=False)
    opt = torch.optim.SGD(model.parameters(), lr=1.0, momentum=0.0)
    sched = HDETOneCycleLR(
        opt,
        max_lr=25.0,
        total_steps=1000,
        sync_every=2,
        cycle_momentum=False,
        seed=3,
        controller_settings=controller_settings,
    )
    target = torch.ones(1, 8)
    for _ in range(4):
        loss = 0.5 * curvature * (model.weight - target).pow(2).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step(loss=loss)
    from benchmarks.memory import held_bytes

    saved = sched.state_dict()  # the window start is not part of it
    memory = held_bytes(sched, model, opt)
    sched.close()
    return [r.params["lr"].signal for r in sched.records], saved, memory


# the ranks share one target, so their gradients are equal: the double-average warning is expected here
@pytest.mark.filterwarnings("ignore:.*averaged already")
@pytest.mark.parametrize(("curvature", "sign"), [(0.1, 1.0), (1.5, -1.0)])
def test_the_hypergradient_is_the_same_on_every_rank_and_says_short_or_overshot(curvature, sign):
    outs = run_ranks(quadratic_window, 4, curvature, None)
    signals = [o[0] for o in outs]
    assert all(s == signals[0] for s in signals)  # every rank applies the same averaged gradient
    assert len(signals[0]) == 2
    for h in signals[0]:
        assert h == pytest.approx(sign, abs=1e-6)  # one dimension of motion: the cosine is +-1
    assert "#hypergradient" in str(outs[0][1])  # the sign pool is in the controller's saved state


@pytest.mark.filterwarnings("ignore:.*averaged already")
def test_the_rank_signal_measures_nothing_and_keeps_no_window_start():
    hyper = run_ranks(quadratic_window, 4, 0.1, None)[0]
    rank = run_ranks(quadratic_window, 4, 0.1, {"signal": "rank"})[0]
    assert "#hypergradient" not in str(rank[1])
    assert hyper[2] - rank[2] == 8 * 4  # the window's start: 4 bytes per parameter, only when measured
