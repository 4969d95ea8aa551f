"""Every benchmark workload builds, takes a batch and reports its metric (one process, no training)."""

import math

import pytest
import torch

from benchmarks import workloads


@pytest.mark.parametrize("name", sorted(workloads.TASKS))
def test_a_workload_builds_and_its_loss_and_metric_are_finite(name):
    task, optimizer = workloads.build(name)
    model = task.model(0)
    loss = task.loss(model, next(task.batches(0, 4, 0))).detach()
    assert loss.dim() == 0 and math.isfinite(loss.item())
    assert math.isfinite(task.evaluate(model)[task.metric])
    assert optimizer in {"sgd", "adam", "adamw", "nadam", "rmsprop", "nesterov", "adagrad"}
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
