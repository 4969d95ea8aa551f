"""With one process, HDETOneCycleLR is OneCycleLR: same signature, same defaults, the same values (==)."""

import copy
import inspect
import subprocess
import sys

import pytest
import torch
from torch.optim.lr_scheduler import OneCycleLR

from hdet_ray import HDETOneCycleLR


def test_import_pulls_in_neither_ray_nor_fastapi():
    code = "import sys, hdet_ray; print(sorted(m for m in ('ray', 'fastapi') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_signature_contains_every_onecycle_parameter_with_its_default():
    ours = inspect.signature(HDETOneCycleLR).parameters
    for name, p in inspect.signature(OneCycleLR).parameters.items():
        assert name in ours, name
        assert ours[name].default == p.default, name
        assert ours[name].kind in (p.kind, inspect.Parameter.POSITIONAL_OR_KEYWORD), name
    extra = [n for n in ours if n not in inspect.signature(OneCycleLR).parameters]
    assert all(ours[n].kind == inspect.Parameter.KEYWORD_ONLY for n in extra)


def _pair(opt_cls, **kw):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    twin = copy.deepcopy(model)
    a = opt_cls(model.parameters(), lr=0.1)
    b = opt_cls(twin.parameters(), lr=0.1)
    return model, twin, a, b, OneCycleLR(a, **kw), HDETOneCycleLR(b, **kw)


def _momentum(opt):
    g = opt.param_groups[0]
    return g["betas"][0] if "betas" in g else g["momentum"]


@pytest.mark.parametrize("opt_cls", [torch.optim.SGD, torch.optim.AdamW])
@pytest.mark.parametrize("anneal", ["cos", "linear"])
@pytest.mark.parametrize("three_phase", [False, True])
def test_values_equal_onecycle_exactly(opt_cls, anneal, three_phase):
    kw = {"max_lr": 0.5, "total_steps": 120, "anneal_strategy": anneal, "three_phase": three_phase}
    model, twin, a, b, ref, ours = _pair(opt_cls, **kw)
    x = torch.randn(16, 4)
    for step in range(120):
        assert a.param_groups[0]["lr"] == b.param_groups[0]["lr"], step
        assert _momentum(a) == _momentum(b), step
        assert ref.get_last_lr() == ours.get_last_lr(), step
        for m, opt in ((model, a), (twin, b)):
            opt.zero_grad()
            loss = m(x).pow(2).mean()
            loss.backward()
            opt.step()
        ref.step()
        ours.step(loss=loss.detach())
    assert len(ours.records) == 20  # one replica still syncs (a no-op average): the default, 120 // 20 steps


@pytest.mark.parametrize("opt_cls", [torch.optim.SGD, torch.optim.AdamW])
def test_state_dict_mid_run_reproduces_the_rest_exactly(opt_cls):
    kw = {"max_lr": 0.3, "total_steps": 90}
    _, _, _, b, _, ours = _pair(opt_cls, **kw)
    rest = []
    saved = None
    for step in range(89):
        if step == 37:
            saved = copy.deepcopy(ours.state_dict())
            saved_opt = copy.deepcopy(b.state_dict())
        if step >= 37:
            rest.append((b.param_groups[0]["lr"], _momentum(b)))
        b.step()
        ours.step(loss=torch.tensor(1.0 / (step + 1)))
    _, _, _, b2, _, fresh = _pair(opt_cls, **kw)
    b2.load_state_dict(saved_opt)
    fresh.load_state_dict(saved)
    again = []
    for step in range(37, 89):
        again.append((b2.param_groups[0]["lr"], _momentum(b2)))
        b2.step()
        fresh.step(loss=torch.tensor(1.0 / (step + 1)))
    assert again == rest
    assert [r.to_dict() for r in fresh.records] == [r.to_dict() for r in ours.records]


def test_bad_hdet_options_name_the_field():
    opt = torch.optim.SGD(torch.nn.Linear(2, 2).parameters(), lr=0.1)
    with pytest.raises(ValueError, match="sync_every"):
        HDETOneCycleLR(opt, max_lr=0.1, total_steps=10, sync_every=11)
    with pytest.raises(ValueError, match="fanout"):
        HDETOneCycleLR(opt, max_lr=0.1, total_steps=10, fanout="ring")
    with pytest.raises(ValueError, match="optimizer_state"):
        HDETOneCycleLR(opt, max_lr=0.1, total_steps=10, optimizer_state="merge")
    with pytest.raises(ValueError, match="unknown target"):
        from hdet_ray import HyperParam

        HDETOneCycleLR(opt, max_lr=0.1, total_steps=10, explore=[HyperParam(name="x", target="nowhere")])
    with pytest.raises(ValueError, match="Expected positive integer total_steps"):
        HDETOneCycleLR(opt, max_lr=0.1, total_steps=0)


class CountingTensor(torch.Tensor):
    """A loss tensor that counts every conversion to a Python number."""

    reads = 0

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func in (
            torch.Tensor.item,
            torch.Tensor.tolist,
            torch.Tensor.__float__,
            torch.Tensor.__bool__,
            torch.Tensor.__int__,
            torch.Tensor.numpy,
        ):
            CountingTensor.reads += 1
        return super().__torch_function__(func, types, args, kwargs or {})


def test_step_with_a_loss_never_reads_it_on_the_host():
    opt = torch.optim.SGD(torch.nn.Linear(2, 2).parameters(), lr=0.1)
    sched = HDETOneCycleLR(opt, max_lr=0.1, total_steps=200, sync_every=100)
    CountingTensor.reads = 0
    for i in range(99):
        sched.step(loss=torch.tensor(1.0 + i).as_subclass(CountingTensor))
    assert CountingTensor.reads == 0
    assert len(sched.records) == 0
    sched.step(loss=torch.tensor(5.0).as_subclass(CountingTensor))  # the sync reads the window once
    assert len(sched.records) == 1
    assert sched.records[0].losses == [pytest.approx(sum(range(1, 100)) / 100 + 5.0 / 100)]


def test_scheduler_leaves_the_global_rng_alone():
    model = torch.nn.Linear(2, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    state = torch.random.get_rng_state()
    sched = HDETOneCycleLR(opt, max_lr=0.1, total_steps=100, sync_every=10, noise=0.01, model=model, seed=3)
    for _ in range(100):
        opt.step()
        sched.step(loss=torch.tensor(1.0))
    assert torch.equal(torch.random.get_rng_state(), state)
