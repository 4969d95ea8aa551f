"""Every benchmark workload builds, takes a batch and reports its metric (one process, no training)."""

import math

import pytest
import torch

from benchmarks import families, workloads


@pytest.mark.parametrize("name", sorted(workloads.TASKS))
def test_a_workload_builds_and_its_loss_and_metric_are_finite(name, tmp_path, monkeypatch):
    task, optimizer = workloads.build(name)
    if name.startswith("finetune"):  # its pretraining, cut short here, cached under this test's own directory
        monkeypatch.setattr(families.tempfile, "gettempdir", lambda: str(tmp_path))
        task.pretrain_steps = 20
    model = task.model(0)
    loss = task.loss(model, next(task.batches(0, 4, 0))).detach()
    assert loss.dim() == 0 and math.isfinite(loss.item())
    assert math.isfinite(task.evaluate(model)[task.metric])
    kinds = {"sgd", "adam", "adamw", "nadam", "rmsprop", "nesterov", "adagrad", "radam", "adamax", "amsgrad"}
    kinds |= {"adadelta", "sgd_plain", "adafactor"}
    assert optimizer in kinds
    workloads.make_optimizer(optimizer, model.parameters(), 1e-3)


def test_the_autoencoder_reconstructs_its_input_and_names_no_chance_level():
    task, _ = workloads.build("autoencoder")
    model = task.model(0)
    x, _ = next(task.batches(0, 1, 0))
    assert model(x).shape == x.shape
    assert task.chance_loss is None  # a dead autoencoder outputs the mean image, far below its first loss


def test_the_heteroscedastic_loss_goes_below_zero_and_its_plot_keeps_it():
    # a Gaussian negative log-likelihood: a mean predicted exactly with a small variance scores below zero,
    # and the trajectory plot's loss panel falls back to a linear axis, which keeps such windows
    from benchmarks.trajectory import loss_scale

    task, _ = workloads.build("heteroscedastic")
    _, y = next(task.batches(0, 1, 0))
    exact = torch.cat([y, torch.full_like(y, -4.0)], dim=1)  # log-variance -4
    assert task.criterion(exact, y).item() == pytest.approx(-2.0)
    assert loss_scale([{"losses": [0.6, 0.5]}, {"losses": [-0.2, 0.1]}]) == "linear"
    assert loss_scale([{"losses": [0.6, None]}, {"losses": [0.2, math.nan]}]) == "log"


def test_the_graph_is_symmetric_and_the_ranks_train_on_disjoint_labelled_nodes_none_held_out():
    task, _ = workloads.build("graph")
    _, adjacency, _ = task._graph()
    dense = adjacency.to_dense()
    assert torch.equal(dense, dense.T) and bool((dense.diagonal() > 0).all())  # self-loops, undirected
    shards = [next(task.batches(rank, 4, 0))[0] for rank in range(4)]
    nodes = torch.cat(shards)
    assert len(set(nodes.tolist())) == task.train == len(nodes)  # full-batch: every labelled node, once
    assert int(nodes.min()) >= task.validation  # the held-out nodes are the first `validation`
    assert torch.equal(next(task.batches(1, 4, 7))[0], shards[1])  # the same whole share every step


def test_the_finetune_body_is_pretrained_once_for_every_seed_and_the_head_is_new(tmp_path, monkeypatch):
    monkeypatch.setattr(families.tempfile, "gettempdir", lambda: str(tmp_path))
    task, _ = workloads.build("finetune")
    task.pretrain_steps = 30
    a, b = task.model(0), task.model(1)
    assert all(torch.equal(p, q) for p, q in zip(a[:-1].parameters(), b[:-1].parameters(), strict=True))
    assert not torch.equal(a[-1].weight, b[-1].weight)  # a new head per seed
    assert torch.equal(task.model(0)[-1].weight, a[-1].weight)
    fresh = families._two_hidden(task.features, task.width, task.classes)
    assert not torch.equal(a[0].weight, fresh[0].weight)  # the body is not a fresh draw: it was trained
    # another process reads the pretrained body from the cache, bit for bit
    cached = dict(task.pretrained())
    families._PRETRAINED.clear()
    assert len(list(tmp_path.glob("hdet-bench-finetune-*.pt"))) == 1
    assert all(torch.equal(cached[k], v) for k, v in task.pretrained().items())
    # the target task is related to the source, not the same: same kind of inputs, other labels on some
    x, y = task._data()
    xs, _ = task._source()
    g = torch.Generator().manual_seed(0)
    source, target = task._teachers(g)
    agree = (task._labels(xs, source, g) == task._labels(xs, target, g)).float().mean()
    assert 0.3 < float(agree) < 0.95 and x.shape[1] == xs.shape[1] and int(y.max()) < task.classes


def test_a_jobs_onecycle_shape_reaches_the_hdet_schedule_and_unknown_arguments_are_refused():
    # `--job '{"onecycle": {...}}'` (docs/benchmarks.md, "Other OneCycle shapes"): the HDET arm's base rate is
    # torch's OneCycleLR of that shape, window for window; a misspelt argument is an error, not ignored
    from torch.optim.lr_scheduler import OneCycleLR

    job = {"workload": "mlp", "steps": 20, "sync_every": 5, "max_lr": 0.1, "seed": 0, "arm": "hdet"}
    out = workloads.run(0, 1, {**job, "onecycle": {"pct_start": 0.1}})
    weight = torch.zeros(1, requires_grad=True)
    optimizer = torch.optim.SGD([weight], lr=0.1, momentum=0.9)
    reference, rates = OneCycleLR(optimizer, max_lr=0.1, total_steps=20, pct_start=0.1), []
    for _ in range(20):
        optimizer.step()
        reference.step()
        rates.append(reference.get_last_lr()[0])
    assert [r["params"]["lr"]["base"] for r in out["records"]] == pytest.approx(rates[3::5])
    with pytest.raises(ValueError, match=r"onecycle: unknown argument\(s\) \['pct'\]; allowed: .*pct_start"):
        workloads.run(0, 1, {**job, "onecycle": {"pct": 0.1}})


def test_the_discriminative_fine_tune_splits_body_and_head_into_two_groups(tmp_path, monkeypatch):
    monkeypatch.setattr(families.tempfile, "gettempdir", lambda: str(tmp_path))
    task, _ = workloads.build("finetune_groups")
    task.pretrain_steps = 20
    model = task.model(0)
    body, head = task.param_groups(model)
    assert {id(p) for p in head} == {id(p) for p in model[-1].parameters()}
    assert len(body) + len(head) == len(list(model.parameters()))
    assert not {id(p) for p in body} & {id(p) for p in head}
    assert task.group_ratios == (0.1, 1.0)


def test_the_bag_of_words_batch_touches_few_embedding_rows():
    task, _ = workloads.build("bag_of_words")
    model = task.model(0)
    loss = task.loss(model, next(task.batches(0, 4, 0)))
    loss.backward()
    touched = int((model.embed.weight.grad.abs().sum(1) > 0).sum())
    assert 0 < touched < task.vocab // 4  # a sparse gradient: most rows untouched at a step


def test_an_expert_no_input_is_routed_to_gets_no_gradient_and_ddp_is_told():
    task, _ = workloads.build("experts")
    model = task.model(0)
    x, y = next(task.batches(0, 4, 0))
    with torch.no_grad():
        model.router.weight.zero_()
        model.router.bias.copy_(torch.tensor([5.0, 0.0, 0.0, 0.0]))  # every input to expert 0
    task.loss(model, (x, y)).backward()
    assert model.experts[0][0].weight.grad is not None
    assert all(e[0].weight.grad is None for e in model.experts[1:])
    assert task.ddp_unused


def test_the_staged_fine_tune_trains_only_the_head_until_its_body_is_unfrozen(tmp_path, monkeypatch):
    monkeypatch.setattr(families.tempfile, "gettempdir", lambda: str(tmp_path))
    task, _ = workloads.build("finetune_staged")
    task.pretrain_steps = 20
    model = task.model(0)
    task.at_step(model, 0, 500)
    assert [p.requires_grad for p in model.parameters()] == [False] * 4 + [True] * 2  # the head alone
    task.at_step(model, 100, 500)  # 20% of the steps
    assert all(p.requires_grad for p in model.parameters())
    assert task.ddp_unused


def test_the_denoising_rows_get_fresh_noise_every_step_and_the_held_out_noise_is_fixed():
    task, _ = workloads.build("denoising")
    batches = task.batches(0, 4, 0)
    (first, eps), (second, _) = next(batches), next(batches)
    assert first.shape == (task.batch_size, task.dim + 2 * task.bands) and eps.shape == (
        task.batch_size,
        task.dim,
    )
    assert not torch.equal(first[:, task.dim :], second[:, task.dim :])  # a new noise level per row and step
    x, target = task._validation()
    assert len(x) == task.draws * task.validation and torch.equal(task._validation()[1], target)


def test_the_median_trains_on_heavy_tailed_targets_and_is_scored_against_the_noise_free_one():
    task, _ = workloads.build("median")
    _, truth, noisy = task._drawn()
    assert (noisy - truth).abs().max() > 20 * task.noise  # a tail a squared error would chase
    assert torch.equal(task._validation()[1], truth[: task.validation])
    assert torch.equal(task._data()[1], noisy)


def test_the_surface_is_fitted_full_batch_on_disjoint_shares_with_no_randomness():
    task, _ = workloads.build("surface")
    shares = [next(task.batches(rank, 4, 0))[0] for rank in range(4)]
    assert sum(len(s) for s in shares) == task.train
    assert torch.equal(next(task.batches(2, 4, 9))[0], shares[2])  # the same share every step, any seed
    assert workloads.build("surface")[1] == "adamax"


def test_the_vae_draws_its_noise_per_rank_and_step_and_its_metric_leaves_out_the_pixels_entropy():
    task, _ = workloads.build("vae")
    batches = task.batches(0, 4, 0)
    (x, first), (_, second) = next(batches), next(batches)
    assert first.shape == (len(x), task.code) and not torch.equal(first, second)
    assert not torch.equal(next(task.batches(1, 4, 0))[1], first)  # each rank its own noise
    model = task.model(0)
    assert task.evaluate(model)["val_loss"] == task.evaluate(model)["val_loss"]  # held-out noise fixed once
    # a perfect reconstruction of the held-out images with a code at the prior scores only their KL: the
    # pixels' own entropy, which no model can remove, is not in the metric
    images = task.validation_set()[0].repeat(task.draws, 1)
    logits = torch.logit(images.clamp(1e-6, 1 - 1e-6))
    zeros = torch.zeros(len(images), task.code)
    entropy = torch.nn.functional.binary_cross_entropy(images, images, reduction="none").sum(1).mean()
    assert families._negative_elbo((logits, zeros, zeros), images) == pytest.approx(float(entropy), abs=1e-3)
    assert task.chance_loss is None


def test_the_poisson_loss_is_zero_at_its_solution_and_backpropagates_through_a_second_derivative():
    task, _ = workloads.build("poisson")

    class Exact(torch.nn.Module):
        def forward(self, x):
            return task.solution(x)

    points = next(task.batches(0, 4, 0))
    assert task.loss(Exact(), points).item() == pytest.approx(0.0, abs=1e-6)
    model = task.model(0)
    task.loss(model, points).backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())
    assert not torch.equal(next(task.batches(0, 4, 0)), next(task.batches(1, 4, 0)))  # a rank's own points


def test_an_accumulating_step_applies_the_gradient_of_its_micro_batches_mean_and_reports_that_mean():
    task, optimizer = workloads.build("accumulated")
    assert optimizer == "sgd" and task.accumulate * task.batch_size == workloads.build("mlp")[0].batch_size
    model = task.model(0)
    loss = workloads._accumulated(task, model, task.batches(0, 4, 0))
    accumulated = [p.grad.clone() for p in model.parameters()]
    micro = [next(b) for b in [task.batches(0, 4, 0)] for _ in range(task.accumulate)]
    model.zero_grad()
    whole = torch.stack([task.loss(model, batch) for batch in micro]).mean()
    whole.backward()
    assert loss.item() == pytest.approx(whole.item(), rel=1e-6)
    pairs = zip(accumulated, model.parameters(), strict=True)
    assert all(torch.allclose(a, p.grad, atol=1e-7) for a, p in pairs)


def test_the_decay_groups_split_every_parameter_once_with_decay_on_the_weight_matrices_alone():
    task, optimizer = workloads.build("decay_groups")
    model = task.model(0)
    decay, rest = task.param_groups(model)
    assert {id(p) for p in decay} | {id(p) for p in rest} == {id(p) for p in model.parameters()}
    assert all(p.dim() == 2 for p in decay) and all(p.dim() == 1 for p in rest)
    assert [o["weight_decay"] for o in task.group_options] == [0.1, 0.0] and optimizer == "adamw"
    assert not hasattr(task, "group_ratios")  # one max_lr for both groups, as its user passes it


def test_the_noisy_labels_flip_a_fixed_share_of_the_training_labels_and_validate_on_clean_ones():
    task, optimizer = workloads.build("noisy_labels")
    clean = workloads.build("mlp")[0]
    (x, y), (x0, y0) = task.training_set(), clean.training_set()
    assert torch.equal(x, x0) and 0.25 < (y != y0).float().mean().item() < 0.35
    assert torch.equal(task.training_set()[1], y)  # the same flips every time, on every seed and rank
    model = task.model(0)
    assert task.evaluate(model) == clean.evaluate(model)  # validated on the clean held-out labels
    shares = [next(task.batches(rank, 4, 0))[1] for rank in range(4)]
    assert all(((s >= 0) & (s < 10)).all() for s in shares) and optimizer == "adam"


def test_the_post_norm_vit_normalises_after_each_residual_and_keeps_the_vits_shapes():
    post, pre = workloads.build("vit_postnorm")[0].model(0), workloads.build("vit")[0].model(0)
    assert [layer.norm_first for layer in post.encoder.layers] == [False, False]
    assert all(layer.norm_first for layer in pre.encoder.layers)
    assert [p.shape for p in post.parameters()] == [p.shape for p in pre.parameters()]


def test_the_ill_conditioned_features_span_a_hundredfold_and_each_carries_the_target_alike():
    task, optimizer = workloads.build("ill_conditioned")
    x, y = task._data()
    scales = x.std(0)
    assert scales[0] / scales[-1] == pytest.approx(100.0, rel=0.1) and optimizer == "sgd"
    fit = torch.linalg.lstsq(x, y).solution.squeeze(1) * scales  # each feature's share of the target
    assert fit.abs().max() / fit.abs().median() < 10  # no feature is negligible: the slow ones matter
    assert isinstance(task.model(0), torch.nn.Linear)


def test_the_binarized_mlp_outputs_from_signs_and_trains_through_the_straight_through_estimator():
    task, optimizer = workloads.build("binarized")
    model = task.model(0)
    x, y = next(task.batches(0, 4, 0))
    hidden = model[:3](x)
    assert set(hidden.unique().tolist()) <= {-1.0, 0.0, 1.0}
    task.loss(model, (x, y)).backward()
    first = model[0].weight.grad
    assert first is not None and first.abs().sum() > 0  # the gradient passes the sign layers
    assert optimizer == "adam"


def test_the_deep_linear_network_starts_small_on_a_target_whose_singular_values_halve():
    task, optimizer = workloads.build("deep_linear")
    x, y = task._data()
    fit = torch.linalg.lstsq(x, y).solution
    top = torch.linalg.svdvals(fit)[:4]
    assert torch.allclose(top, torch.tensor([4.0, 2.0, 1.0, 0.5]), rtol=0.05) and optimizer == "sgd"
    model = task.model(0)
    assert all(isinstance(m, torch.nn.Linear) and m.bias is None for m in model)
    assert model(x).pow(2).mean() < 0.01 * y.pow(2).mean()  # a small start: the product of small layers


def test_the_spectral_mlp_normalises_its_hidden_layers_and_keeps_their_power_iteration_buffers():
    task, optimizer = workloads.build("spectral")
    model = task.model(0)
    hidden = [m for m in model if isinstance(m, torch.nn.Linear)][:-1]
    assert all(torch.nn.utils.parametrize.is_parametrized(m, "weight") for m in hidden)
    assert not torch.nn.utils.parametrize.is_parametrized(model[-1], "weight")  # the logits' scale is free
    assert len(list(model.buffers())) == 4 and optimizer == "adam"  # u and v of each hidden layer
    model.train()
    model(next(task.batches(0, 4, 0))[0])
    for m in hidden:
        assert torch.linalg.matrix_norm(m.weight, ord=2).item() == pytest.approx(1.0, rel=0.05)


def test_the_elman_rnn_has_no_gates_and_the_amsgrad_cnn_keeps_a_running_maximum():
    task, optimizer = workloads.build("rnn")
    model = task.model(0)
    assert isinstance(model.rnn, torch.nn.RNN) and model.rnn.nonlinearity == "tanh" and optimizer == "sgd"
    assert not hasattr(task, "clip")  # no clip: its user trains it as the LSTM's would not
    cnn, kind = workloads.build("cnn_amsgrad")
    net = cnn.model(0)
    opt = workloads.make_optimizer(kind, net.parameters(), 1e-3)
    cnn.loss(net, next(cnn.batches(0, 4, 0))).backward()
    opt.step()
    assert all("max_exp_avg_sq" in opt.state[p] for p in net.parameters())


def test_the_small_targets_are_the_regressions_scaled_and_the_full_batch_takes_a_ranks_whole_share():
    small, optimizer = workloads.build("small_targets")
    regression, _ = workloads.build("regression")
    (x, y), (x0, y0) = small._data(), regression._data()
    assert optimizer == "adam" and torch.equal(x, x0) and torch.allclose(y, 1e-3 * y0)
    assert y.var().item() == pytest.approx(1e-6, rel=0.01)  # the regression's targets are standardised
    full, optimizer = workloads.build("full_batch")
    shares = [next(full.batches(rank, 4, 0))[1] for rank in range(4)]
    assert optimizer == "sgd" and [len(y) for y in shares] == [374] * 4
    again = next(full.batches(1, 4, 5))[1]  # another seed draws the same share, in another order
    assert sorted(again.tolist()) == sorted(shares[1].tolist())


def test_the_curriculum_adds_noise_that_grows_to_its_final_level_and_validates_at_that_level():
    task, optimizer = workloads.build("curriculum")
    clean = families.Digits().batches(0, 4, 0)
    noisy = task.batches(0, 4, 0)
    gaps = []
    for _ in range(task.ramp + 50):
        (x, y), (x0, y0) = next(noisy), next(clean)
        assert torch.equal(y, y0)  # the same images in the same order, noise added
        gaps.append((x - x0).std().item())
    assert gaps[0] == 0.0 and gaps[task.ramp // 2] == pytest.approx(task.noise / 2, rel=0.1)
    assert gaps[-1] == pytest.approx(task.noise, rel=0.1) and optimizer == "sgd"
    model = task.model(0)
    assert task.evaluate(model) == task.evaluate(model)  # one fixed draw of the held-out noise
    assert task.evaluate(model)["val_loss"] != families.Digits().evaluate(model)["val_loss"]
    _, kind = workloads.build("tabular_adadelta")
    assert isinstance(workloads.make_optimizer(kind, model.parameters(), 1.0), torch.optim.Adadelta)


def test_the_tiny_batch_takes_two_images_and_plain_sgd_keeps_no_momentum_under_onecycle(tmp_path):
    task, optimizer = workloads.build("tiny_batch")
    assert optimizer == "sgd" and len(next(task.batches(0, 4, 0))[1]) == 2
    job = {"workload": "tabular_plain_sgd", "steps": 4, "sync_every": 2, "max_lr": 0.1, "seed": 0}
    for arm in ("fixed", "hdet"):
        seen = []
        real = torch.optim.SGD.step

        def step(self, *args, real=real, seen=seen, **kwargs):
            seen.append(self.param_groups[0]["momentum"])
            return real(self, *args, **kwargs)

        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(torch.optim.SGD, "step", step)
            out = workloads.run(0, 1, {**job, "arm": arm})
        assert seen == [0] * 4 and math.isfinite(out["metric"])  # OneCycle did not switch momentum on


def test_the_bf16_mlp_runs_its_forward_pass_in_bfloat16_and_reverse_targets_the_mirrored_sequence():
    task, optimizer = workloads.build("mlp_bf16")
    model, batch = task.model(0), next(task.batches(0, 4, 0))
    seen = []
    model[0].register_forward_hook(lambda _m, _i, out: seen.append(out.dtype))
    loss = task.loss(model, batch)
    full = families.Digits().loss(model, batch)
    assert seen == [torch.bfloat16, torch.float32] and optimizer == "sgd"
    assert loss.item() != full.item() and loss.item() == pytest.approx(full.item(), rel=0.02)
    loss.backward()
    assert all(p.grad.dtype == torch.float32 for p in model.parameters())  # the weights stay float32
    rev, optimizer = workloads.build("reverse")
    x, y = next(rev.batches(0, 4, 0))
    assert optimizer == "adam" and x.shape == (32, 12) and torch.equal(y, x.flip(1))
    out = rev.model(0)(x)
    assert out.shape == (32, 12, 10)
    first = rev.evaluate(rev.model(0))["val_loss"]
    assert 2.0 < first < 3.0  # near ln 10 at the initial weights


def test_the_hinge_loss_reaches_zero_and_the_bandit_loss_is_a_centred_surrogate():
    task, optimizer = workloads.build("hinge")
    model = task.model(0)
    x, y = next(task.batches(0, 4, 0))
    with torch.no_grad():
        model[-1].weight.zero_()
        model[-1].bias.zero_()
        assert task.loss(model, (x, y)).item() == pytest.approx(0.9)  # every margin missed by 1, 9 of 10
        model[-1].bias.copy_(torch.nn.functional.one_hot(y[0], 10) * 2.0)
        assert task.loss(model, (x[y == y[0]], y[y == y[0]])).item() == 0.0  # every margin met
    assert optimizer == "sgd" and set(task.evaluate(model)) == {"val_loss", "val_accuracy"}
    bandit, optimizer = workloads.build("bandit")
    policy = bandit.model(0)
    torch.manual_seed(0)
    losses = [bandit.loss(policy, next(bandit.batches(0, 4, 0))).item() for _ in range(20)]
    assert optimizer == "adam" and min(losses) < 0.0 < max(losses) and abs(sum(losses) / 20) < 0.1
    loss = bandit.loss(policy, (x, y))
    loss.backward()
    assert all(p.grad is not None for p in policy.parameters())


def test_the_bandit_reports_its_miss_rate_where_asked_and_backpropagates_the_surrogate_either_way():
    task, _ = workloads.build("bandit_miss")
    policy = task.model(0)
    torch.manual_seed(0)
    batch = next(task.batches(0, 4, 0))
    loss = task.loss(policy, batch)
    miss = task.reported(loss)
    assert 0.0 <= miss.item() <= 1.0 and miss.item() > 0.5  # a near-uniform policy misses about 90%
    assert loss.requires_grad and not miss.requires_grad
    plain, _ = workloads.build("bandit")
    assert plain.reported(loss) is loss
    job = {"workload": "bandit_miss", "steps": 4, "sync_every": 2, "max_lr": 1e-3, "seed": 0, "arm": "hdet"}
    out = workloads.run(0, 1, job)
    assert [0.0 <= r["losses"][0] <= 1.0 for r in out["records"]] == [True, True]


def test_the_lm_with_dropout_drops_while_training_only_and_the_float64_pinn_is_float64_throughout():
    task, optimizer = workloads.build("lm_dropout")
    model = task.model(0)
    rates = {m.p for m in model.modules() if isinstance(m, torch.nn.Dropout)}
    assert optimizer == "adamw" and rates == {0.1}
    batch = next(task.batches(0, 4, 0))
    torch.manual_seed(0)
    assert task.loss(model, batch).item() != task.loss(model, batch).item()  # a new mask each step
    assert task.evaluate(model) == task.evaluate(model)  # validation with dropout off
    pinn, optimizer = workloads.build("poisson64")
    net = pinn.model(0)
    x = next(pinn.batches(0, 4, 0))
    loss = pinn.loss(net, x)
    loss.backward()
    assert optimizer == "adam" and x.dtype == loss.dtype == torch.float64
    assert all(p.dtype == p.grad.dtype == torch.float64 for p in net.parameters())
    assert math.isfinite(pinn.evaluate(net)["val_loss"])
    job = {"workload": "poisson64", "steps": 4, "sync_every": 2, "max_lr": 1e-3, "seed": 0, "arm": "hdet"}
    assert math.isfinite(workloads.run(0, 1, job)["metric"])


def test_the_siren_the_shifted_digits_and_the_many_classes_build_as_their_docstrings_say():
    siren, optimizer = workloads.build("siren")
    net = siren.model(0)
    first, second = [m for m in net if isinstance(m, torch.nn.Linear)][:2]
    assert optimizer == "adam" and first.weight.abs().max() <= 0.5
    assert second.weight.abs().max() <= math.sqrt(6 / 128) / 30
    x = next(siren.batches(0, 4, 0))[0]
    assert torch.allclose(
        net[1](x @ first.weight.T + first.bias), torch.sin(30 * (x @ first.weight.T + first.bias))
    )
    shifted, optimizer = workloads.build("augmented")
    plain, _ = workloads.build("cnn")
    (x, y), (x0, y0) = next(shifted.batches(0, 4, 0)), next(plain.batches(0, 4, 0))
    assert optimizer == "nesterov" and torch.equal(y, y0) and x.shape == x0.shape
    assert not torch.equal(x, x0) and torch.all(x.sum(1) <= x0.sum(1) + 1e-5)  # moved, nothing added
    assert shifted.evaluate(shifted.model(0)) == plain.evaluate(plain.model(0))  # validated unshifted
    many, optimizer = workloads.build("many_classes")
    model = many.model(0)
    x, y = next(many.batches(0, 4, 0))
    assert optimizer == "adamw" and model(x).shape == (32, 256) and int(y.max()) < 256
    assert abs(many.loss(model, (x, y)).item() - math.log(256)) < 0.5
    job = {"workload": "augmented", "steps": 4, "sync_every": 2, "max_lr": 0.1, "seed": 0, "arm": "hdet"}
    assert math.isfinite(workloads.run(0, 1, job)["metric"])


def test_the_forecast_the_flow_and_the_clicks_build_as_their_docstrings_say():
    forecast, optimizer = workloads.build("forecast")
    x, y = forecast._data()
    assert optimizer == "adam" and x.shape[1:] == (32,) and y.shape[1:] == (8,)
    assert torch.allclose(x[1, 1:], x[0, :-1])  # each row one step earlier than the last: the latest held out
    assert forecast.model(0)(x[:4]).shape == (4, 8)
    flow, optimizer = workloads.build("flow")
    net = flow.model(0)
    points = next(flow.batches(0, 4, 0))[0]
    assert optimizer == "adam" and net(points).shape == (len(points),)
    assert flow.criterion(net(points), points).item() == pytest.approx(-net(points).mean().item())
    axis = torch.arange(-8.0, 8.0, 0.04)
    grid = torch.cartesian_prod(axis, axis)
    with torch.no_grad():  # a density: the change of variables' log |det| is right if it integrates to 1
        assert net(grid).exp().sum().item() * 0.04**2 == pytest.approx(1.0, abs=0.02)
    clicks, optimizer = workloads.build("click_through")
    fields, labels = clicks._data()
    assert optimizer == "adamw" and 0.03 < labels.mean().item() < 0.07
    assert [int(fields[:, i].max()) < c for i, c in enumerate(clicks.cardinalities)] == [True] * 8
    assert clicks.model(0)(fields[:5]).shape == (5,)


def test_the_private_the_mixup_and_the_adversarial_digits_build_as_their_docstrings_say():
    plain, _ = workloads.build("mlp")
    private, optimizer = workloads.build("private")
    batch = next(private.batches(0, 4, 0))
    net = private.model(0)
    assert optimizer == "sgd" and torch.equal(batch[0], next(plain.batches(0, 4, 0))[0])

    def gradient(task, **fields):
        net.zero_grad()
        for name, value in fields.items():
            setattr(task, name, value)
        loss = task.loss(net, batch)
        loss.backward()
        return torch.cat([p.grad.flatten() for p in net.parameters()]), loss

    unclipped, _ = gradient(private, clip=1e9, noise_multiplier=0.0)
    assert torch.allclose(unclipped, gradient(plain)[0], atol=1e-6)  # no clip, no noise: the plain gradient
    clipped, _ = gradient(private, clip=0.01, noise_multiplier=0.0)
    assert clipped.norm() <= 0.01 + 1e-6 < unclipped.norm()  # a mean of examples clipped to 0.01
    noisy, loss = gradient(private, clip=1.0, noise_multiplier=1.0)
    expected = math.sqrt(sum(p.numel() for p in net.parameters())) / len(batch[1])
    assert 0.8 * expected < noisy.norm() < 1.2 * expected + 1.0  # the noise's norm, several clipped norms
    assert private.reported(loss).item() == pytest.approx(plain.loss(net, batch).item())

    mixup, optimizer = workloads.build("mixup")
    assert optimizer == "adamw" and mixup.evaluate(net) == plain.evaluate(net)  # validated on clean images
    torch.manual_seed(0)
    assert mixup.loss(net, batch).item() != pytest.approx(plain.loss(net, batch).item())

    adversarial, optimizer = workloads.build("adversarial")
    x, y = batch
    moved = adversarial._attack(net, x, y, (2.0 * torch.rand_like(x) - 1.0) * adversarial.epsilon)
    assert optimizer == "adam" and (moved - x).abs().max() <= adversarial.epsilon + 1e-6
    assert moved.min() >= 0.0 and moved.max() <= 1.0
    robust, clean = adversarial.evaluate(net), plain.evaluate(net)
    assert robust["val_loss"] > clean["val_loss"]  # the attack raises the held-out loss
    job = {"workload": "private", "steps": 4, "sync_every": 2, "max_lr": 0.1, "seed": 0, "arm": "hdet"}
    assert math.isfinite(workloads.run(0, 1, job)["metric"])


def test_the_long_tail_the_ema_and_the_sparse_autoencoder_build_as_their_docstrings_say():
    plain, _ = workloads.build("mlp")
    tail, optimizer = workloads.build("long_tail")
    counts = torch.bincount(tail.training_set()[1], minlength=10)
    assert optimizer == "sgd" and counts[0] == torch.bincount(plain.training_set()[1])[0]  # the head whole
    assert counts[0] > 20 * counts.min() > 0 and torch.equal(
        tail.validation_set()[1], plain.validation_set()[1]
    )

    ema, optimizer = workloads.build("ema")
    net = ema.model(0)
    batch = next(ema.batches(0, 4, 0))
    assert optimizer == "adamw" and ema.evaluate(net) == plain.evaluate(net)  # no step yet: the network
    sgd = torch.optim.SGD(net.parameters(), lr=1.0)
    for _ in range(3):
        sgd.zero_grad()
        ema.loss(net, batch).backward()
        sgd.step()
    assert ema.evaluate(net) != plain.evaluate(net)  # the average lags the network's weights
    ema.loss(net, batch)
    first = next(iter(ema._average.module.parameters()))
    assert not torch.equal(first, next(iter(net.parameters())))

    sparse, optimizer = workloads.build("sparse_autoencoder")
    model = sparse.model(0)
    x = next(sparse.batches(0, 4, 0))[0]
    out, codes = model(x)
    assert optimizer == "adam" and out.shape == x.shape and codes.shape == (len(x), 256) and codes.min() >= 0
    expected = (out - x).pow(2).sum(1).mean() + 0.05 * codes.sum(1).mean()
    assert sparse.loss(model, (x, None)).item() == pytest.approx(expected.item())
    job = {"workload": "ema", "steps": 4, "sync_every": 2, "max_lr": 1e-3, "seed": 0, "arm": "hdet"}
    assert math.isfinite(workloads.run(0, 1, job)["metric"])


def test_the_vq_the_multitask_and_the_distilled_digits_build_as_their_docstrings_say():
    vq, optimizer = workloads.build("vq")
    net = vq.model(0)
    x = next(vq.batches(0, 4, 0))[0]
    out, z, code = net(x)
    assert optimizer == "adam" and out.shape == x.shape and z.shape == code.shape == (len(x), 8)
    assert torch.equal(code, net.codebook[torch.cdist(z, net.codebook).argmin(1)])  # the nearest code
    vq.loss(net, (x, None)).backward()
    assert (
        net.encode[0].weight.grad.abs().sum() > 0
    )  # the decoder's gradient passes the snap straight through
    assert net.codebook.abs().max() <= 1.0 / 64

    multi, optimizer = workloads.build("multitask")
    model = multi.model(0)
    x, y = next(multi.batches(0, 4, 0))
    logits, ink = model(x)
    assert optimizer == "adamw" and logits.shape == (len(x), 10) and ink.shape == (len(x),)
    assert (
        multi.loss(model, (x, y)).item() > 100
    )  # the ink's squared error, unstandardised, dominates at first

    distill, optimizer = workloads.build("distill")
    teacher, student = distill.teacher(), distill.model(0)
    assert optimizer == "sgd" and teacher is distill.teacher() and student[0].out_features == 32
    assert distill.evaluate(teacher)["val_accuracy"] > 0.9
    x, y = next(distill.batches(0, 4, 0))
    distill.soft = 0.0  # no soft term: the plain cross-entropy
    assert distill.loss(student, (x, y)).item() == pytest.approx(distill.criterion(student(x), y).item())
    distill.soft = 1.0
    with torch.no_grad():
        assert distill.loss(teacher, (x, y)).item() == pytest.approx(
            0.0, abs=1e-5
        )  # the teacher matches itself
    job = {"workload": "vq", "steps": 4, "sync_every": 2, "max_lr": 1e-3, "seed": 0, "arm": "hdet"}
    assert math.isfinite(workloads.run(0, 1, job)["metric"])


def test_the_lora_the_weight_norm_and_the_bayes_build_as_their_docstrings_say():
    lora, optimizer = workloads.build("lora")
    full, _ = workloads.build("finetune")
    net, plain = lora.model(0), full.model(0)
    x, y = next(lora.batches(0, 4, 0))
    assert optimizer == "adamw" and torch.allclose(net(x), plain(x))  # the update starts at zero
    trainable = [n for n, p in net.named_parameters() if p.requires_grad]
    assert trainable and all(
        ".down." in n or ".up." in n or n.startswith(f"{len(net) - 1}.") for n in trainable
    )
    lora.loss(net, (x, y)).backward()
    assert all(p.grad is None for n, p in net.named_parameters() if ".base." in n)  # the body stays frozen

    norm, optimizer = workloads.build("weight_norm")
    model = norm.model(0)
    names = [n for n, _ in model.named_parameters()]
    assert optimizer == "sgd" and "0.parametrizations.weight.original0" in names
    mlp, _ = workloads.build("mlp")
    x, y = next(norm.batches(0, 4, 0))
    assert torch.allclose(model(x), mlp.model(0)(x), atol=1e-5)  # the same function at the start

    bayes, optimizer = workloads.build("bayes")
    model = bayes.model(0)
    assert optimizer == "adam" and not torch.equal(model(x), model(x))  # weights drawn in each pass
    model.eval()
    assert torch.equal(model(x), model(x))  # the means in eval mode
    model.train()
    assert bayes.loss(model, (x, y)).item() > 10 * mlp.loss(mlp.model(0), (x, y)).item()  # the KL dominates
    job = {"workload": "bayes", "steps": 4, "sync_every": 2, "max_lr": 1e-3, "seed": 0, "arm": "hdet"}
    assert math.isfinite(workloads.run(0, 1, job)["metric"])


def test_the_segmentation_the_masked_lm_and_the_depthwise_cnn_build_as_their_docstrings_say():
    seg, optimizer = workloads.build("segmentation")
    images, labels = seg._data()
    assert optimizer == "adam" and images.shape == (4608, 1, 16, 16) and labels.shape == (4608, 16, 16)
    assert set(labels.unique().tolist()) == {0, 1, 2} and (labels > 0).flatten(1).any(1).all()  # a shape each
    clean = (images.squeeze(1) > 0.5).float()  # above the midpoint: mostly the shapes' pixels
    assert (clean == (labels > 0).float()).float().mean() > 0.8
    x, y = next(seg.batches(0, 4, 0))
    assert seg.model(0)(x).shape == (32, 3, 16, 16) and y.shape == (32, 16, 16)

    masked, optimizer = workloads.build("masked_lm")
    x, y = next(masked.batches(0, 4, 0))
    hidden = x == families.MASK
    assert optimizer == "adamw" and torch.equal(hidden, y >= 0)  # scored exactly where masked
    assert 0.05 < hidden.float().mean() < 0.3 and bool((x[~hidden] < 256).all())
    model = masked.model(0)
    assert masked.loss(model, (x, y)).item() == pytest.approx(math.log(257), rel=0.1)  # near chance at start
    assert masked.evaluate(model) == masked.evaluate(model)  # fixed validation masks

    depthwise, optimizer = workloads.build("depthwise")
    net = depthwise.model(0)
    grouped = [m for m in net.modules() if isinstance(m, torch.nn.Conv2d) and m.groups > 1]
    assert optimizer == "sgd" and len(grouped) == 2 and all(m.groups == m.in_channels for m in grouped)
    assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in net.modules())
    x, y = next(depthwise.batches(0, 4, 0))
    assert net(x).shape == (32, 10)


def test_the_ctc_the_focal_and_the_adafactor_families_build_as_their_docstrings_say():
    ctc, optimizer = workloads.build("ctc")
    x, y = ctc._data()
    lengths = (y > 0).sum(1)
    assert optimizer == "adam" and x.shape == (9216, 24, 16) and int(lengths.min()) == 3
    assert int(lengths.max()) == 6 and bool((y[:, 1:][y[:, :-1] == 0] == 0).all())  # a prefix, zero-padded
    assert bool(((y[:, 1:] != y[:, :-1]) | (y[:, 1:] == 0)).all())  # no symbol twice in a row
    assert int(y.max()) == 8 and int(y.min()) == 0  # symbols 1..8, 0 the blank (padding)
    batch = next(ctc.batches(0, 4, 0))
    model = ctc.model(0)
    assert model(batch[0]).shape == (32, 24, 9) and math.isfinite(ctc.loss(model, batch).item())
    # a tagger that knows the alignment scores near zero: the labels are spoken in the frames
    g = torch.Generator().manual_seed(0)
    embed = torch.randn(8, 16, generator=g)  # `_data` draws the symbols' embeddings first
    noise_free = x[:64] - torch.randn(9216, 24, 16, generator=g)[:64]
    # each noise-free frame is silence or one symbol's embedding exactly
    voices = torch.cat([torch.zeros(1, 16), embed])
    said = torch.cdist(noise_free, voices.expand(64, 9, 16)).argmin(2)
    ideal = torch.nn.functional.one_hot(said, 9).float() * 20 - 10
    assert ctc.criterion(ideal, y[:64]).item() < 1e-3

    focal, optimizer = workloads.build("focal")
    out, target = torch.tensor([[2.0, 0.0, -1.0]]), torch.tensor([0])
    ce = torch.nn.functional.cross_entropy(out, target)
    assert optimizer == "sgd" and focal.criterion(out, target).item() == pytest.approx(
        ((1 - torch.exp(-ce)) ** 2 * ce).item()
    )
    assert focal.criterion(focal.model(0)(torch.zeros(4, 64)) * 0, torch.arange(4)).item() == pytest.approx(
        focal.chance_loss
    )

    lm, optimizer = workloads.build("lm_adafactor")
    opt = workloads.make_optimizer(optimizer, lm.model(0).parameters(), 1e-2)
    assert isinstance(opt, torch.optim.Adafactor) and not {"momentum", "betas"} & set(opt.defaults)
