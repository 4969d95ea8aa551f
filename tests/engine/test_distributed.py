"""Real torch.distributed: 4 gloo processes spawned by the test, one replica each."""

import math
from functools import partial

import pytest
import torch
import torch.distributed as dist
from torch.optim.lr_scheduler import OneCycleLR

from hdet_ray import HDETDivergedError, HDETOneCycleLR, learning_rate
from hdet_ray.core.spread import linear_spread, permutation
from tests.engine.conftest import run_ranks

COLLECTIVES = (
    "all_reduce",
    "all_gather",
    "broadcast",
    "all_gather_into_tensor",
    "reduce_scatter",
    "all_to_all",
    "gather",
    "scatter",
    "reduce",
    "barrier",
    "all_gather_object",
    "broadcast_object_list",
)


class CollectiveCounter:
    """Wraps every torch.distributed collective in this process and counts calls."""

    def __init__(self):
        self.calls: list[str] = []
        self._saved = {}
        for name in COLLECTIVES:
            fn = getattr(dist, name)
            self._saved[name] = fn

            def wrapper(*a, _fn=fn, _name=name, **k):
                self.calls.append(_name)
                return _fn(*a, **k)

            setattr(dist, name, wrapper)

    def take(self) -> list[str]:
        out, self.calls = self.calls, []
        return out


def _model():
    return torch.nn.Sequential(
        torch.nn.Linear(3, 8),
        torch.nn.BatchNorm1d(8),
        torch.nn.ReLU(),
        torch.nn.Linear(8, 8),
        torch.nn.ReLU(),
        torch.nn.Linear(8, 2),
    )


def _flat(model):
    return torch.cat(
        [
            t.detach().reshape(-1).clone()
            for t in list(model.parameters()) + list(model.buffers())
            if t.is_floating_point()
        ]
    )


def spread_and_converge(rank, world, auto_lr):
    torch.manual_seed(100 + rank)  # each rank's global RNG differs: permutations must still agree
    model = _model()
    opt = torch.optim.AdamW(model.parameters(), lr=0.01)
    counter = CollectiveCounter()
    sched = HDETOneCycleLR(
        opt,
        max_lr=0.05,
        total_steps=30,
        sync_every=5,
        fanout="local",
        explore=[learning_rate("linear", 0.3)],
        model=model,
        seed=7,
        auto_lr=auto_lr,
        controller="slope",
        controller_settings={"trust_windows": 1, "step_size": 1.0} if auto_lr else None,
    )
    counter.take()  # construction broadcasts rank 0's start
    ref = OneCycleLR(
        torch.optim.AdamW(torch.nn.Linear(1, 1).parameters(), lr=0.01), max_lr=0.05, total_steps=30
    )
    out = {
        "lr": [],
        "base": [],
        "beta1": [],
        "ref_beta1": [],
        "mults": [],
        "offsets": [],
        "pre": [],
        "post": [],
        "per_step_collectives": [],
        "per_sync_collectives": [],
    }
    g = torch.Generator().manual_seed(rank)
    for step in range(30):
        out["lr"].append(opt.param_groups[0]["lr"])
        out["base"].append(ref.get_last_lr()[0])
        out["beta1"].append(opt.param_groups[0]["betas"][0])
        out["ref_beta1"].append(ref.optimizer.param_groups[0]["betas"][0])
        out["mults"].append(sched.multipliers["lr"])
        out["offsets"].append(sched.offsets["lr"])
        x = torch.randn(16, 3, generator=g)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        # scripted window loss: the higher this rank's rate, the lower its loss
        scripted = torch.tensor(1.0 / sched.multipliers["lr"])
        syncing = (step + 1) % 5 == 0
        if syncing:
            out["pre"].append(_flat(model))
        sched.step(loss=scripted)
        (out["per_sync_collectives"] if syncing else out["per_step_collectives"]).append(counter.take())
        if syncing:
            out["post"].append(_flat(model))
        ref.optimizer.step()
        ref.step()
    out["all_mults"] = [list(r.params["lr"].multipliers) for r in sched.records]
    out["records"] = [r.to_dict() for r in sched.records]
    return out


@pytest.fixture(scope="module")
def held():
    return run_ranks(spread_and_converge, 4, False)


@pytest.fixture(scope="module")
def steered():
    return run_ranks(spread_and_converge, 4, True)


def test_rates_follow_the_configured_spread(held):
    levels = linear_spread(4, 0.3)
    for rank, out in enumerate(held):
        for step in range(30):
            window = step // 5
            expected = levels[permutation(4, 7, window, "lr")[rank]]
            assert out["mults"][step] == expected
            assert out["lr"][step] == pytest.approx(out["base"][step] * expected, rel=1e-12)
    # every window uses each multiplier exactly once across the 4 ranks
    for step in range(30):
        assert sorted(out["mults"][step] for out in held) == pytest.approx(levels)


def test_permutations_agree_on_every_rank_and_change_between_windows(held):
    assert all(out["all_mults"] == held[0]["all_mults"] for out in held)
    assert len({tuple(m) for m in held[0]["all_mults"]}) > 1


def test_after_each_sync_ranks_are_bitwise_equal_and_hold_the_mean(held):
    for w in range(6):
        posts = [out["post"][w] for out in held]
        assert all(torch.equal(posts[0], p) for p in posts[1:])
        mean = torch.stack([out["pre"][w] for out in held]).double().mean(0)
        rel = (posts[0].double() - mean).norm() / mean.norm()
        assert rel < 1e-6
        # and the replicas really had diverged before the sync
        assert not torch.equal(held[0]["pre"][w], held[1]["pre"][w])


def test_local_mode_is_silent_between_syncs_and_constant_per_sync(held):
    for out in held:
        assert all(calls == [] for calls in out["per_step_collectives"])
        per_sync = out["per_sync_collectives"]
        assert all(calls == per_sync[0] for calls in per_sync)
        # one all-gather of the window losses and ONE flat all-reduce for all 14 tensors of the model + Adam
        assert per_sync[0] == ["all_gather", "all_reduce"]


def test_auto_lr_off_still_averages(held):
    assert all(out["offsets"] == [0.0] * 30 for out in held)
    assert len(held[0]["post"]) == 6


def test_steering_keeps_the_onecycle_shape_and_momentum_cycling(steered):
    out = steered[0]
    assert out["offsets"][-1] > 0.0  # higher rates had lower loss: the base moved up
    for step in range(30):
        expected = out["base"][step] * math.exp(out["offsets"][step]) * out["mults"][step]
        assert out["lr"][step] == pytest.approx(expected, rel=1e-12)
        assert out["beta1"][step] == out["ref_beta1"][step]  # momentum keeps cycling after auto-LR starts
    # and the base schedule still anneals: no gamma growing the rate (the reference code grew it ~400x)
    assert out["base"][-1] < out["base"][0] / 100
    assert out["lr"][-1] < max(out["lr"]) / 100


# -- shared_grad: the paper's update rule --------------------------------------------------------------------
def shared_grad_step(rank, world):
    model = torch.nn.Linear(3, 1, bias=False)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.0)
    HDETOneCycleLR(
        opt,
        max_lr=0.1,
        total_steps=10,
        sync_every=10,
        fanout="shared_grad",
        cycle_momentum=False,
        explore=[learning_rate("log", 2.0)],
        seed=1,
    )
    theta0 = model.weight.detach().clone()  # equal on every rank (broadcast at construction)
    # gradients that differ by rank but within the clip (3x the median norm): the plain mean applies
    x = torch.full((4, 3), 1.0 + 0.1 * rank)
    loss = (model(x) - (2.0 + 0.2 * rank)).pow(2).mean()
    (own_grad,) = torch.autograd.grad(loss, model.weight, retain_graph=True)  # accumulates nothing
    opt.zero_grad()
    counter = CollectiveCounter()
    loss.backward()  # the average ends the backward pass, as DDP's all-reduce does
    calls = counter.take()
    after_backward = model.weight.grad.detach().clone()  # what a gradient clip here would see
    opt.step()
    return {
        "theta0": theta0,
        "grad": own_grad,
        "after_backward": after_backward,
        "lr": opt.param_groups[0]["lr"],
        "theta1": model.weight.detach(),
        "calls": calls,
        "calls_in_step": counter.take(),
    }


def test_shared_grad_applies_the_mean_gradient_with_each_ranks_rate():
    outs = run_ranks(shared_grad_step, 4)
    g_mean = torch.stack([o["grad"] for o in outs]).mean(0)
    assert len({o["lr"] for o in outs}) == 4  # four different rates
    for o in outs:
        assert torch.equal(o["theta0"], outs[0]["theta0"])
        expected = o["theta0"] - o["lr"] * g_mean  # theta_r <- theta_r - eta_r * g_mean
        assert torch.allclose(o["theta1"], expected, rtol=1e-6, atol=1e-7)
        # averaged by the end of backward(): a clip between backward() and step() sees the mean, as under DDP
        assert torch.allclose(o["after_backward"], g_mean, rtol=1e-6, atol=1e-7)
        # the ranks' gradient norms and which parameters have a gradient (one all-gather, for the clip and
        # for parameters some rank did not use), then one flat gradient all-reduce, in the backward pass;
        # none in the step
        assert o["calls"] == ["all_gather", "all_reduce"] and o["calls_in_step"] == []


def compiled_run(rank, world, backend):
    """20 steps of a small MLP whose forward is `torch.compile`d with `backend` ("none": eager), returning
    the gradient each backward pass leaves, the final weights and the trajectory's offsets."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.0)
    scheduler = HDETOneCycleLR(opt, max_lr=0.1, total_steps=20, sync_every=5, cycle_momentum=False, seed=1)
    forward = model if backend == "none" else torch.compile(model, backend=backend)
    grads = []
    for step in range(20):
        x = torch.full((4, 3), 1.0 + 0.1 * rank + 0.01 * step)
        loss = (forward(x) - (2.0 + 0.2 * rank)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
        opt.step()
        scheduler.step(loss=loss)
    weights = torch.cat([p.detach().flatten() for p in model.parameters()])
    return {
        "grads": torch.stack(grads),
        "weights": weights,
        "offsets": [r.params["lr"].new_offset for r in scheduler.records],
    }


def test_a_compiled_model_gets_the_same_shared_gradient_and_trajectory_as_eager():
    # torch.compile traces the forward and builds the backward ahead of time (AOT autograd); the shared
    # gradient's average runs from hooks at the end of the backward pass, which must still fire. The
    # "aot_eager" backend runs that path without generating C++ (inductor gave the same here, slower).
    eager, compiled = run_ranks(compiled_run, 2, "none"), run_ranks(compiled_run, 2, "aot_eager")
    for e, c in zip(eager, compiled, strict=True):
        assert torch.allclose(e["grads"], c["grads"], rtol=1e-5, atol=1e-7)
        assert torch.allclose(e["weights"], c["weights"], rtol=1e-5, atol=1e-7)
        assert len(c["offsets"]) == 4 and c["offsets"] == eager[0]["offsets"]
    # and it is the shared gradient: both ranks apply one mean gradient, not their own
    assert torch.equal(compiled[0]["grads"][0], compiled[1]["grads"][0])


class _Branchy(torch.nn.Module):
    """`extra` is used on rank 0's batches only (a per-rank branch, as routing or layer drop make), `never`
    on none."""

    def __init__(self):
        super().__init__()
        self.a, self.extra, self.never, self.b = (torch.nn.Linear(3, 4), torch.nn.Linear(4, 4),
                                                  torch.nn.Linear(4, 4), torch.nn.Linear(4, 1))  # fmt: skip

    def forward(self, x, rank):
        h = torch.tanh(self.a(x))
        return self.b(self.extra(h) if rank == 0 else h)


def branchy_run(rank, world, ddp, **options):
    """The first backward's gradients (under DDP with find_unused_parameters, or under HDET with `options`),
    then, under HDET, 10 more steps (or the error that stopped them)."""
    torch.manual_seed(0)
    model = _Branchy()
    x = torch.full((2, 3), 1.0 + rank)
    if ddp:
        wrapped = torch.nn.parallel.DistributedDataParallel(model, find_unused_parameters=True)
        wrapped(x, rank).pow(2).mean().backward()
        return {n: p.grad for n, p in model.named_parameters()}
    opt = torch.optim.SGD(model.parameters(), lr=0.01)  # OneCycle cycles its momentum: buffers once stepped
    scheduler = HDETOneCycleLR(opt, max_lr=0.01, total_steps=11, sync_every=5, seed=1, **options)
    first = None
    try:
        for _ in range(11):
            loss = model(x, rank).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            first = first or {
                n: None if p.grad is None else p.grad.clone() for n, p in model.named_parameters()
            }
            opt.step()
            scheduler.step(loss=loss)
    except RuntimeError as e:
        return {"error": str(e)}
    return {"first": first, "records": len(scheduler.records)}


def test_a_parameter_some_ranks_do_not_use_gets_the_mean_gradient_as_under_ddp():
    # a parameter with a gradient on some ranks only made the shared gradient's all-reduce differ in size
    # across ranks, and gloo aborted the process ("Received data size doesn't match expected size"); now it
    # carries zeros where unused, and every rank gets the mean, as DDP with find_unused_parameters gives
    ddp, hdet = run_ranks(branchy_run, 2, True), run_ranks(branchy_run, 2, False)
    for d, h in zip(ddp, hdet, strict=True):
        assert h["records"] == 2
        for name, grad in d.items():
            if name.startswith("never"):  # used by no rank: no gradient, as under DDP
                assert grad is None and h["first"][name] is None
            else:
                assert torch.allclose(h["first"][name], grad, rtol=1e-6, atol=1e-7), name
    assert torch.count_nonzero(hdet[1]["first"]["extra.weight"]) > 0  # rank 1 got rank 0's share
    # under `local` each rank steps only what its batches used, and the momentum buffers it then has are
    # averaged at the sync (optimizer_state="average"): their sizes differ across ranks, and the sync says so
    # on every rank instead of gloo aborting the process; with optimizer_state="keep" the run goes on
    stopped = run_ranks(partial(branchy_run, fanout="local"), 2, False)
    for out in stopped:
        assert "differ in size across ranks" in out["error"] and "optimizer_state='keep'" in out["error"]
    kept = run_ranks(partial(branchy_run, fanout="local", optimizer_state="keep"), 2, False)
    assert [out["records"] for out in kept] == [2, 2]


class _Routed(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(3, 4), torch.nn.Linear(4, 1)
        self.experts = torch.nn.ModuleList(torch.nn.Linear(4, 4) for _ in range(2))

    def forward(self, x, expert):
        h = torch.tanh(self.a(x))
        return self.b(h if expert is None else self.experts[expert](h))


def routed_grads(rank, world, ddp):
    """Each backward pass's gradients as the routing changes per step (no optimizer step, so every pass sees
    the same weights): no rank uses an expert, then rank 0 alone uses expert 0, then each rank uses one."""
    torch.manual_seed(0)
    model = _Routed()
    x = torch.full(
        (2, 3), 1.0 + 0.1 * rank
    )  # close inputs: no rank's norm is 3x another's (the clip's bound)
    plan = [None, 0 if rank == 0 else None, rank]
    forward = model
    if ddp:
        forward = torch.nn.parallel.DistributedDataParallel(model, find_unused_parameters=True)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        scheduler = HDETOneCycleLR(opt, max_lr=0.01, total_steps=10, sync_every=5, seed=1)  # noqa: F841
    grads = []
    for expert in plan:
        forward(x, expert).pow(2).mean().backward()
        grads.append({n: None if p.grad is None else p.grad.clone() for n, p in model.named_parameters()})
        model.zero_grad(set_to_none=True)
    return grads


def test_an_expert_no_rank_used_at_first_is_shared_once_used_as_under_ddp():
    # the shared gradient's parameters were those with a gradient on some rank at the first backward pass, so
    # an expert of a routed model that no rank's first batch went to stayed out of it for the whole run (each
    # rank stepped its own gradient); now which ranks have a gradient is gathered at every step
    ddp, hdet = run_ranks(partial(routed_grads, ddp=True), 2), run_ranks(partial(routed_grads, ddp=False), 2)
    for d_steps, h_steps in zip(ddp, hdet, strict=True):
        for step, (d, h) in enumerate(zip(d_steps, h_steps, strict=True)):
            for name, grad in d.items():
                if grad is None:  # no rank used it at this step: None, as under DDP
                    assert h[name] is None, (step, name)
                else:
                    assert torch.allclose(h[name], grad, rtol=1e-6, atol=1e-7), (step, name)
    assert hdet[1][1]["experts.0.weight"] is not None  # rank 1 got rank 0's share of expert 0 at step 1
    assert hdet[0][0]["experts.0.weight"] is None


def unfrozen_grads(rank, world):
    """A body frozen (requires_grad False, still in the optimizer) for 6 steps, then unfrozen, as a staged
    fine-tune does: the body's gradient at the step after, and which windows' records say what trains
    changed."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    model[0].requires_grad_(False)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = HDETOneCycleLR(opt, max_lr=0.1, total_steps=20, sync_every=5, seed=1)
    g = torch.Generator().manual_seed(rank)
    body = None
    for step in range(15):
        if step == 6:
            model[0].requires_grad_(True)
        x = torch.randn(8, 4, generator=g)
        loss = (model(x) - x.sum(1, keepdim=True)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        body = model[0].weight.grad.clone() if step == 7 else body
        opt.step()
        scheduler.step(loss=loss)
    return {"body": body, "restarted": [r.restarted for r in scheduler.records]}


def test_a_body_unfrozen_after_the_first_step_joins_the_shared_gradient():
    # the shared gradient's parameters were decided at the first backward pass, so a body frozen then and
    # unfrozen later kept each rank's own gradient for the rest of the run
    out = run_ranks(unfrozen_grads, 2)
    assert torch.equal(out[0]["body"], out[1]["body"]) and torch.count_nonzero(out[0]["body"]) > 0
    # the window in which it was unfrozen tells the controller that what trains changed (`Window.restart`)
    assert out[0]["restarted"] == out[1]["restarted"] == [False, True, False]


def sparse_grads(rank, world, ddp, **options):
    """The first backward's gradients of an embedding with sparse gradients (ranks touch different rows and
    one shared row) and a linear head, under DDP or under HDET with `options`; under HDET, then 9 more
    steps (or the error that stopped them)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.EmbeddingBag(50, 4, mode="sum", sparse=True), torch.nn.Linear(4, 2))
    with torch.no_grad():  # rows alike, so no rank's norm is 3x another's (the shared gradient's clip)
        model[0].weight.copy_(torch.linspace(0.1, 0.2, 200).view(50, 4))
    x = torch.tensor([[rank, 10 + rank, 20]])
    forward = torch.nn.parallel.DistributedDataParallel(model) if ddp else model
    if not ddp:
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        scheduler = HDETOneCycleLR(opt, max_lr=0.1, total_steps=10, sync_every=5, seed=1, **options)
    out = {}
    for step in range(1 if ddp else 10):
        loss = forward(x).pow(2).mean()
        loss.backward()
        if step == 0:
            g = model[0].weight.grad
            out = {"sparse": g.is_sparse, "emb": g.to_dense(), "head": model[1].weight.grad.clone()}
        if not ddp:
            opt.step()
            opt.zero_grad()
            try:
                scheduler.step(loss=loss)
            except RuntimeError as e:
                return {"error": str(e)}
    if not ddp:
        out["records"] = len(scheduler.records)
    return out


def test_a_sparse_embedding_gradient_gets_the_mean_and_stays_sparse_as_under_ddp():
    # an nn.Embedding(sparse=True) stopped every rank at the first backward ("reshape is not implemented for
    # sparse tensors" from the shared gradient's packing); now it is averaged dense and given back sparse
    ddp = run_ranks(partial(sparse_grads, ddp=True), 2)
    hdet = run_ranks(partial(sparse_grads, ddp=False), 2)
    for d, h in zip(ddp, hdet, strict=True):
        assert h["sparse"] and h["records"] == 2
        assert torch.allclose(h["emb"], d["emb"], rtol=1e-6, atol=1e-7)
        assert torch.allclose(h["head"], d["head"], rtol=1e-6, atol=1e-7)
    assert torch.count_nonzero(hdet[1]["emb"][0]) > 0  # rank 1 got rank 0's row
    # under `local` nothing is averaged per step, but OneCycle's momentum makes SGD keep a sparse momentum
    # buffer, which the sync's optimizer_state="average" (local's default) cannot average: a clear error on
    # every rank, where gloo's packing stopped them before; with optimizer_state="keep" the run goes on
    stopped = run_ranks(partial(sparse_grads, ddp=False, fanout="local"), 2)
    assert all("optimizer_state='keep'" in out["error"] for out in stopped)
    kept = run_ranks(partial(sparse_grads, ddp=False, fanout="local", optimizer_state="keep"), 2)
    assert [out["records"] for out in kept] == [2, 2]


def sharded_construction(rank, world):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    fully_shard(model, mesh=init_device_mesh("cpu", (world,)))
    try:
        HDETOneCycleLR(
            torch.optim.AdamW(model.parameters(), lr=1e-2), max_lr=1e-2, total_steps=20, model=model
        )
    except ValueError as e:
        return str(e)
    return None


def test_parameters_sharded_across_ranks_are_refused_at_construction():
    # FSDP2's fully_shard on gloo: each rank's DTensor holds a different slice, which the sync would average
    # together (before this check it failed deep in DTensor's sharding rules at the first sync). FSDP1's
    # FlatParameter and FullyShardedDataParallel branches need an accelerator (FSDP1 refuses a CPU-only
    # machine), so only this one is run here.
    for message in run_ranks(sharded_construction, 2):
        assert "DTensor parameters" in message and "plain data parallelism" in message


def accumulated_step(rank, world):
    """Two micro-batches per optimizer step (gradient accumulation): the mean ends each backward pass."""
    model = torch.nn.Linear(3, 1, bias=False)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.0)
    HDETOneCycleLR(opt, max_lr=0.1, total_steps=10, sync_every=10, cycle_momentum=False, seed=1)
    own = []
    opt.zero_grad()
    for micro in range(2):
        x = torch.full((4, 3), 1.0 + 0.1 * rank + 0.05 * micro)
        loss = (model(x) - (2.0 + 0.2 * rank)).pow(2).mean()
        own.append(torch.autograd.grad(loss, model.weight, retain_graph=True)[0])
        loss.backward()
    return {"own": torch.stack(own).sum(0), "after": model.weight.grad.detach().clone()}


def test_gradient_accumulation_leaves_the_mean_of_the_accumulated_gradients():
    outs = run_ranks(accumulated_step, 4)
    mean = torch.stack([o["own"] for o in outs]).mean(0)
    for o in outs:  # mean(g1) after the first pass, then mean(mean(g1) + g2) = mean(g1 + g2)
        assert torch.allclose(o["after"], mean, rtol=1e-6, atol=1e-7)


def forgets_the_loss(rank, world, pass_loss):
    """Ten steps of a 5-step window with `scheduler.step()`, or `step(loss=loss)`: the warnings raised."""
    import warnings

    torch.manual_seed(rank)
    model = torch.nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sched = HDETOneCycleLR(opt, max_lr=0.1, total_steps=10, sync_every=5, model=model, seed=1)
        for _ in range(10):
            loss = (model(torch.randn(8, 3)) - 1.0).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step(loss=loss) if pass_loss else sched.step()
    return [str(w.message) for w in caught]


@pytest.mark.parametrize("pass_loss", [False, True])
def test_a_script_that_never_passes_the_loss_is_told_once(pass_loss):
    # the README's change is three lines; forgetting `loss=` leaves every window without losses, which the
    # controller can only hold on: say so at the first window's end, once
    for warned in run_ranks(forgets_the_loss, 2, pass_loss):
        told = [w for w in warned if "no training loss reached the scheduler" in w]
        assert len(told) == (0 if pass_loss else 1) and all("step(loss=loss)" in w for w in told)


# -- non-finite replicas, rollback, divergence ---------------------------------------------------------------
def _short_run(adam=False, **options):
    """A model, SGD (or Adam) and a 40-step HDET schedule that syncs every 5 steps (log spread 2). The model's
    initial weights are seeded: a spawned rank's global generator is not the same from one run to the next,
    and a test that compares two runs needs them to start alike (the controller's decision at a window can
    turn on the initial weights: with them drawn afresh, the warm-up test's two runs parted at window 3 on
    one run of its pair in about three)."""
    torch.manual_seed(0)
    model = _model()
    if adam:
        opt = torch.optim.Adam(model.parameters(), lr=0.01)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    sched = HDETOneCycleLR(
        opt,
        max_lr=0.05,
        total_steps=40,
        sync_every=5,
        model=model,
        seed=3,
        explore=[learning_rate("log", 2.0)],
        **options,
    )
    return model, opt, sched


def nan_and_rollback(rank, world, fanout, lone=False):
    model, opt, sched = _short_run(fanout=fanout, controller_settings={"max_rollbacks": 1})
    g = torch.Generator().manual_seed(rank)
    out = {"pre": None, "post": None, "rollback": [], "diverged": None}
    start = _flat(model)  # rank 0's state, broadcast at construction

    def train_step(poison: bool):
        x = torch.randn(16, 3, generator=g)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if poison:
            with torch.no_grad():
                for p in model.parameters():
                    p.fill_(math.nan)
            loss = torch.tensor(math.nan)
        return loss

    for step in range(5):  # window 0: rank 2 goes NaN mid-window
        loss = train_step(poison=(rank == 2 and step == 2))
        if step == 4:
            out["pre"] = _flat(model)
        sched.step(loss=loss.detach())
    out["post"] = _flat(model)
    out["record0"] = sched.records[0].to_dict()
    # window 0 lost a replica, so its survivors are not trusted as a rollback target: the last state from a
    # fully healthy sync is the start
    snapshot = start
    lr_before = sched.offsets["lr"]
    for step in range(5):  # window 1: every rank NaN (or all but rank 0: `lone`) -> roll back, cut the rate
        loss = train_step(poison=(step == 3 and not (lone and rank == 0)))
        sched.step(loss=loss.detach())
    out["rolled_back_to_snapshot"] = torch.equal(_flat(model), snapshot)
    out["offset_drop"] = sched.offsets["lr"] - lr_before
    out["record1"] = sched.records[1].to_dict()
    try:
        for step in range(5):  # window 2: all NaN again -> 2 consecutive rollbacks > max_rollbacks 1
            loss = train_step(poison=(step == 1))
            sched.step(loss=loss.detach())
    except HDETDivergedError as e:
        out["diverged"] = (str(e), e.window)
    out["after_diverged"] = torch.equal(_flat(model), snapshot)  # not the failed window's NaN weights
    out["windows_recorded"] = [r.window for r in sched.records]
    return out


@pytest.mark.parametrize(
    ("fanout", "lone"), [("local", False), ("shared_grad", False), ("shared_grad", True)]
)
def test_nan_replica_is_replaced_and_all_nan_rolls_back_then_diverges(fanout, lone):
    # shared_grad: the NaN replica's gradients are left out of the per-step mean, so it cannot poison the
    # rest; lone: in window 1 one replica of four stays finite, and that window rolls back as if none had
    outs = run_ranks(nan_and_rollback, 4, fanout, lone)
    others = torch.stack([outs[r]["pre"] for r in (0, 1, 3)]).double().mean(0)
    for o in outs:
        assert torch.isfinite(o["post"]).all()
        assert torch.equal(o["post"], outs[0]["post"])
        assert ((o["post"].double() - others).norm() / others.norm()) < 1e-6
    rec0 = outs[0]["record0"]
    assert rec0["excluded"] == [2] and rec0["weights"][2] == 0.0 and not rec0["rollback"]
    assert outs[0]["record1"]["rollback"] is True
    assert outs[0]["record1"]["healthy"] == [lone, False, False, False]
    for o in outs:
        assert o["rolled_back_to_snapshot"]
        # to rollback_cut 0.5 x the lowest replica's rate (1/2 of the centre for a log spread of 2), less the
        # schedule's rise over the failed window (OneCycle still rises there: `rollback_ahead`)
        rise = o["record1"]["params"]["lr"]["base"] / o["record0"]["params"]["lr"]["base"]
        assert rise > 1.0 and o["offset_drop"] == pytest.approx(math.log(0.25 / rise))
        msg, window = o["diverged"]
        assert window == 2 and "window 2" in msg and "back at the last kept state" in msg
        # the failed window is on the record, and every rank is left at the last kept state
        assert o["windows_recorded"] == [0, 1, 2] and o["after_diverged"]


DIES_OVER_TWO_WINDOWS = [  # (each step's loss, added per rank)
    ([2.2, 2.0, 1.9, 1.8, 1.7], 0.0),  # learns from 2.2
    ([1.6, 1.5, 1.5, 1.4, 1.4], 0.0),  # the run's best
    # every replica passes, but it gave back over half; its ranks 6% apart, too far for the stuck rule
    # (`stuck_spread_learned`, 4%)
    ([1.9, 1.9, 1.95, 1.95, 1.95], 0.04),
    ([2.08] * 5, 0.002),  # every replica at one loss whatever its rate: dead...
    ([2.08] * 5, 0.002),  # ...and still, a window later (`stuck_windows`): now it acts
]


def dies_over_two_windows(rank, world, then=(), rise_rollback=None, **options):
    # the losses are scripted (health reads what `step(loss=...)` reports); the parameters train for real.
    # Window 2 is in the rise and gives back what the run had learned with every replica healthy, which the
    # default controller rolls back itself (`rise_rollback`); off here, health's rollback target is tested
    settings = {"rise_rollback": rise_rollback}
    model, opt, sched = _short_run(controller_settings=settings, **options)
    g = torch.Generator().manual_seed(rank)
    out = {"rates": [], "emptied": []}
    for w, (losses, per_rank) in enumerate([*DIES_OVER_TWO_WINDOWS, *then]):
        for step_loss in losses:
            out["rates"].append(opt.param_groups[0]["lr"])
            x = torch.randn(16, 3, generator=g)
            loss = model(x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step(loss=torch.tensor(step_loss + per_rank * rank))
        out[f"after{w}"] = _flat(model)
        out["emptied"].append(len(opt.state) == 0)
    out["records"] = [r.to_dict() for r in sched.records]
    return out


def test_a_dead_window_rolls_back_past_the_healthy_windows_it_died_over():
    outs = run_ranks(dies_over_two_windows, 4)
    recs = outs[0]["records"]
    assert [r["rollback"] for r in recs] == [False, False, False, False, True]
    assert all(recs[2]["healthy"]) and all(recs[3]["healthy"]) and recs[4]["healthy"] == [False] * 4
    assert all(reason.startswith("stuck: every replica at 2.08") for reason in recs[4]["reasons"].values())
    for o in outs:
        # windows 2 and 3 passed but had given back over half the progress: the rollback target is window
        # 1's sync
        assert torch.equal(o["after4"], outs[0]["after1"])
        assert not torch.equal(o["after2"], o["after1"])


def test_a_window_of_the_rise_that_gave_back_what_the_run_had_learned_rolls_back_with_every_replica_healthy():
    outs = run_ranks(dies_over_two_windows, 4, (), 1.1)
    recs = outs[0]["records"]
    assert recs[2]["rollback"] and all(recs[2]["healthy"]) and not recs[1]["rollback"]
    assert "giving back" in recs[2]["note"] and "rolled back" in recs[2]["note"]
    assert recs[2]["params"]["lr"]["new_offset"] < recs[2]["params"]["lr"]["offset"]  # the rate is cut
    for o in outs:
        assert torch.equal(o["after2"], outs[0]["after1"])  # back at window 1's sync, on every rank


def rates_after_a_rollback(rank, world, warmup, adam):
    # as above, and a window that trains after the rollback
    then = [([1.3] * 5, 0.01)]
    return dies_over_two_windows(rank, world, then, adam=adam, rollback_warmup=warmup, optimizer_state="keep")


@pytest.mark.parametrize("adam", [True, False])
def test_the_rate_warms_up_again_after_a_rollback_empties_an_adam_state(adam):
    ramped = run_ranks(rates_after_a_rollback, 4, 5, adam)
    plain = run_ranks(rates_after_a_rollback, 4, 0, adam)
    for a, b in zip(ramped, plain, strict=True):
        rollbacks = [r["rollback"] for r in a["records"]]
        assert rollbacks == [r["rollback"] for r in b["records"]] == [False, False, False, False, True, False]
        assert a["emptied"][4] and not a["emptied"][5]
        # up to the rollback the runs are the same; under Adam the window after it climbs back over its 5
        # steps; SGD's emptied momentum restarts with short steps of its own, and the rate is not ramped
        assert a["rates"][:25] == b["rates"][:25]
        ratios = [x / y for x, y in zip(a["rates"][25:], b["rates"][25:], strict=True)]
        assert ratios == pytest.approx([0.2, 0.4, 0.6, 0.8, 1.0] if adam else [1.0] * 5)


# -- a too-high rate: fixed OneCycle dies, HDET rolls back, cuts, and learns ---------------------------------
DEAD_SPEC = {
    "task": "digits",
    "replicas": 4,
    "steps": 300,
    "sync_every": 25,
    "optimizer": "adamw",
    "schedule": {"max_lr": 1.0},
    "seed": 0,
}


def hdet_from_a_deadly_rate(rank, world):
    from hdet_ray.loop import Replica
    from hdet_ray.spec import JobSpec

    replica = Replica.build(JobSpec.parse(DEAD_SPEC), rank, world)
    metrics = replica.train()
    return {"metrics": metrics, "records": [r.to_dict() for r in replica.scheduler.records]}


def fixed_onecycle_val_loss():
    from hdet_ray.tasks import Digits

    task = Digits()
    model = task.model(0)
    opt = torch.optim.AdamW(model.parameters(), lr=1.0 / 25)
    sched = OneCycleLR(opt, max_lr=1.0, total_steps=300)
    batches = task.batches(0, 4, 0)
    for _ in range(300):
        loss = task.loss(model, next(batches))
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
    return task.evaluate(model)["val_loss"]


@pytest.mark.slow
def test_hdet_survives_a_rate_that_kills_fixed_onecycle():
    fixed = fixed_onecycle_val_loss()
    assert fixed > 0.95 * math.log(10)  # dead: finite, at chance
    out = run_ranks(hdet_from_a_deadly_rate, 4)[0]
    records = out["records"]
    start = records[0]["start_loss"]
    rollbacks = [r for r in records if r["rollback"]]
    assert rollbacks, "expected at least one rollback"
    assert all(r["params"]["lr"]["new_offset"] < r["params"]["lr"]["offset"] for r in rollbacks)  # the cut
    assert records[-1]["params"]["lr"]["new_offset"] < -0.5  # the rate ends well below where it started
    final_window_loss = sum(records[-1]["losses"]) / 4
    assert final_window_loss < 0.7 * start
    assert out["metrics"]["val_loss"] < 0.7 * fixed
