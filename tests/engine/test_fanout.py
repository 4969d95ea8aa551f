"""The shared gradient that an unstable replica cannot poison, on 4 real gloo processes."""

import math

import pytest
import torch

from hdet_ray.engine.fanout import average_gradients
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
