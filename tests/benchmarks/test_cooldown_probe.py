"""The cooldown probe's pieces: the schedule it branches on, and branches that leave the run they start
from untouched (an optimizer's `load_state_dict` shares the state's tensors, so a branch that loaded the
run's state without a copy would train the run's momentum too)."""

from __future__ import annotations

import copy
import itertools

import pytest
import torch

from benchmarks import cooldown_probe as probe
from benchmarks import workloads


def test_the_schedule_is_onecycle_s_shape_with_zeros_past_the_end():
    rates = probe.schedule(0.1)
    peak = max(range(probe.STEPS), key=rates.__getitem__)
    assert rates[peak] == pytest.approx(0.1) and peak == pytest.approx(0.3 * probe.STEPS, abs=2)
    assert rates[0] == pytest.approx(0.1 / 25)
    assert rates[probe.STEPS :] == [0.0] * (probe.WINDOW + probe.COOLDOWN)


def test_a_branch_and_a_line_search_leave_the_run_they_start_from_as_it_was():
    task, kind = workloads.build("softmax")
    model = task.model(0)
    opt = workloads.make_optimizer(kind, model.parameters(), 0.01, base=kind)
    data = probe.stream(task, 1)
    for _ in range(3):
        probe.step(task, model, opt, next(data), 0.01)
    weights = copy.deepcopy(model.state_dict())
    state = copy.deepcopy(opt.state_dict())
    rates = probe.schedule(0.1)
    sample = list(itertools.islice(probe.stream(task, 999), 1))
    lower = probe.branch(task, kind, model, opt, rates, sample, 2, 0.8, 0)
    higher = probe.branch(task, kind, model, opt, rates, sample, 2, 1.25, 0)
    shared = probe.line(task, kind, model, opt, rates, sample, 2, 0)
    assert len(lower) == len(higher) == 3 and len(shared) == 2 and lower != higher
    for name, value in model.state_dict().items():
        assert torch.equal(value, weights[name])
    for key, value in opt.state_dict()["state"].items():
        for field, tensor in value.items():
            assert torch.equal(tensor, state["state"][key][field])
