"""Explored hyperparameters other than the rate, optimizer-state policies, noise, records (one process)."""

import json
import math

import pytest
import torch

from hdet_ray import HDETOneCycleLR, HyperParam, WindowRecord, register_applier
from hdet_ray.core.controller import Decision


def _setup(**kw):
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.2), torch.nn.Linear(4, 2))
    opt = torch.optim.AdamW(
        [{"params": model[0].parameters()}, {"params": model[2].parameters(), "lr": 0.1}],
        lr=0.1,
        weight_decay=0.01,
    )
    return model, opt


def _steer(offsets):
    """A decide hook (what the Ray actor plugs in) that sets fixed offsets."""

    def decide(window, record):
        return Decision(offsets={**{k: 0.0 for k in window.params}, **offsets}, weights=(1.0,))

    return decide


def _run_one_window(model, opt, sched, n=5):
    for _ in range(n):
        loss = model(torch.randn(8, 4)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step(loss=loss.detach())


def test_group_key_module_attribute_and_per_group_rate_follow_their_offsets():
    model, opt = _setup()
    explore = [
        HyperParam(name="lr_head", target="lr", groups=(1,)),
        HyperParam(name="wd", target="group:weight_decay"),
        HyperParam(
            name="beta1",
            target="group:betas[0]",
            scale="linear",
            spread="linear",
            size=0.0,
            bounds=(0.0, 0.99),
        ),
        HyperParam(
            name="dropout",
            target="module:Dropout.p",
            scale="linear",
            spread="linear",
            size=0.5,
            bounds=(0.0, 0.9),
        ),
    ]
    sched = HDETOneCycleLR(
        opt,
        max_lr=[0.1, 0.1],
        total_steps=20,
        sync_every=5,
        explore=explore,
        model=model,
        decide=_steer({"lr_head": math.log(3), "wd": math.log(2), "beta1": -0.05, "dropout": 0.1}),
    )
    ref_opt = torch.optim.AdamW(torch.nn.Linear(1, 1).parameters(), lr=0.1)
    ref = torch.optim.lr_scheduler.OneCycleLR(ref_opt, max_lr=0.1, total_steps=20)
    _run_one_window(model, opt, sched)
    for _ in range(5):
        ref_opt.step()
        ref.step()
    base_lr, base_beta = ref.get_last_lr()[0], ref_opt.param_groups[0]["betas"][0]
    g0, g1 = opt.param_groups
    assert g0["lr"] == base_lr  # group 0 is not explored: plain OneCycle
    assert g1["lr"] == pytest.approx(3 * base_lr)  # lr_head: offset log 3
    assert g0["weight_decay"] == pytest.approx(0.02) and g1["weight_decay"] == pytest.approx(0.02)
    assert g0["betas"][0] == pytest.approx(
        base_beta - 0.05
    )  # still cycled by OneCycle, shifted (linear scale)
    assert model[1].p == pytest.approx(0.3)  # (0.2 + 0.1) * rho, rho = 1 with one replica
    assert set(sched.records[0].params) == {"lr_head", "wd", "beta1", "dropout"}


def test_module_target_without_model_names_the_fix():
    _, opt = _setup()
    with pytest.raises(ValueError, match="pass model="):
        HDETOneCycleLR(
            opt, max_lr=0.1, total_steps=10, explore=[HyperParam(name="d", target="module:Dropout.p")]
        )


def test_unknown_group_key_lists_the_keys():
    _, opt = _setup()
    with pytest.raises(ValueError, match="no param-group key 'momentum'"):
        HDETOneCycleLR(
            opt, max_lr=0.1, total_steps=10, explore=[HyperParam(name="m", target="group:momentum")]
        )


def test_registered_applier_is_used():
    seen = []

    class Temperature:
        def __init__(self, hp, optimizer, model):
            self.base = 1.0

        def bases(self):
            return [self.base]

        def apply(self, values):
            seen.append(values[0])

        def state_dict(self):
            return {}

        def load_state_dict(self, state):
            pass

    register_applier("temperature", Temperature)
    model, opt = _setup()
    sched = HDETOneCycleLR(
        opt,
        max_lr=0.1,
        total_steps=10,
        sync_every=5,
        explore=[HyperParam(name="temp", target="temperature")],
        decide=_steer({"temp": math.log(1.5)}),
    )
    _run_one_window(model, opt, sched)
    assert seen[0] == 1.0 and seen[-1] == pytest.approx(1.5)


@pytest.mark.parametrize("policy", ["average", "keep", "reset"])
def test_optimizer_state_policies(policy):
    model, opt = _setup()
    sched = HDETOneCycleLR(opt, max_lr=0.1, total_steps=10, sync_every=5, optimizer_state=policy)
    _run_one_window(model, opt, sched)
    assert (len(opt.state) == 0) == (policy == "reset")


def test_warm_noisy_start_has_the_specified_scale():
    model = torch.nn.Linear(200, 200)
    before = torch.cat([p.detach().reshape(-1).clone() for p in model.parameters()])
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    HDETOneCycleLR(opt, max_lr=0.1, total_steps=10, model=model, noise=0.01, seed=5)
    after = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    expected_std = 0.01 * before.norm() / math.sqrt(before.numel())
    assert (after - before).std() == pytest.approx(float(expected_std), rel=0.05)


def test_records_serialize_to_strict_json_and_back():
    _, opt = _setup()
    sched = HDETOneCycleLR(opt, max_lr=0.1, total_steps=10, sync_every=5)
    for _ in range(5):
        opt.step()
        sched.step(loss=torch.tensor(math.nan))
    rec = sched.records[0]
    text = rec.to_json()  # allow_nan=False: NaN becomes null
    data = json.loads(text)
    assert data["losses"] == [None] and data["window"] == 0
    back = WindowRecord.from_dict(data)
    assert math.isnan(back.losses[0]) and back.params["lr"].multipliers == [1.0]
    # what health judged the replica on travels with it: its first, tail and lowest loss and its count
    assert data["first_losses"] == data["tail_losses"] == data["min_losses"] == [None] and data["counts"] == [
        5
    ]
    assert math.isnan(back.first_losses[0]) and back.counts == [5]


def test_non_persistent_buffers_are_neither_averaged_nor_judged():
    """A float attention mask holds -inf by design: it must not make a replica look dead."""
    model = torch.nn.Linear(4, 2)
    model.register_buffer("mask", torch.full((3,), -math.inf), persistent=False)
    model.register_buffer("stat", torch.zeros(3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = HDETOneCycleLR(opt, max_lr=0.1, total_steps=10, sync_every=5, model=model)
    for _ in range(5):
        opt.step()
        sched.step(loss=torch.tensor(1.0))
    rec = sched.records[0]
    assert rec.healthy == [True] and not rec.rollback
    assert torch.isinf(model.mask).all()
