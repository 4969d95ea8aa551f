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


def span_window(rank, world, span):
    """One 12-step window with momentum on a two-curvature quadratic; each rank's expected -cos, from the
    parameters and the (averaged) gradient it saw before every step."""
    torch.manual_seed(0)
    model = torch.nn.Linear(2, 1, bias=False)
    opt = torch.optim.SGD(model.parameters(), lr=1.0, momentum=0.5)
    sched = HDETOneCycleLR(opt, max_lr=0.2, total_steps=48, sync_every=12, seed=3, hypergradient_span=span)
    seen = []  # registered after HDET's hooks, so it sees the averaged gradient the measurement reads
    opt.register_step_pre_hook(
        lambda *_: seen.append((model.weight.detach().clone(), model.weight.grad.detach().clone()))
    )
    curvature, target = torch.tensor([[0.05, 1.0]]), torch.ones(1, 2)
    for _ in range(12):
        loss = 0.5 * (curvature * (model.weight - target).pow(2)).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step(loss=loss)
    first = 0 if span is None else max(0, 11 - span)
    g, d = seen[11][1].double(), (seen[11][0] - seen[first][0]).double()
    expected = float(-(g * d).sum() / (g.norm() * d.norm()))
    sched.close()
    return sched.records[0].params["lr"].signal, expected


@pytest.mark.filterwarnings("ignore:.*averaged already")
@pytest.mark.parametrize("span", [None, 3, 11, 50])
def test_the_hypergradient_reads_the_last_span_steps_of_the_window(span):
    outs = run_ranks(span_window, 2, span)
    measured = {o[0] for o in outs}
    assert len(measured) == 1  # decided on rank 0, broadcast
    # the controller reads the median (upper) of the healthy ranks' measurements
    assert measured.pop() == pytest.approx(sorted(o[1] for o in outs)[1], rel=1e-9)


@pytest.mark.filterwarnings("ignore:.*averaged already")
def test_the_span_changes_what_is_read_and_is_checked():
    whole, last3 = run_ranks(span_window, 2, None)[0][1], run_ranks(span_window, 2, 3)[0][1]
    assert abs(whole - last3) > 0.01  # the step over the last 3 steps points elsewhere than the window's
    with pytest.raises(ValueError, match=r"hypergradient_span must be an integer >= 1 or None, got 0"):
        HDETOneCycleLR(
            torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0), 1.0, 10, hypergradient_span=0
        )
