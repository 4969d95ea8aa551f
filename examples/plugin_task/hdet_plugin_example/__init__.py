"""An HDET task in a package of its own: fit y = sin(3x) with a small MLP on synthetic data.

Installing this package registers the task `sine` (see pyproject.toml's `hdet_ray.tasks` entry point):

    pip install ./examples/plugin_task
    curl -H "Authorization: Bearer $HDET_TOKEN" localhost:8000/v1/tasks      # lists 'sine' and its options
    curl -H "Authorization: Bearer $HDET_TOKEN" -H 'Content-Type: application/json' \
         -d '{"task": "sine", "task_options": {"width": 32}, "replicas": 2, "steps": 100}' \
         localhost:8000/v1/jobs

The factory's keyword arguments are the task's `task_options`; their annotations and defaults are the
options schema the service publishes.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import nn

from hdet_ray.tasks import Task


class Sine(Task):
    """A two-layer MLP fitting sin(3x) on x in [-1, 1]; metric: validation mean squared error."""

    name = "sine"
    metric = "val_mse"
    chance_loss = None  # a regression has no chance level

    def __init__(self, width: int, batch_size: int, noise: float) -> None:
        self.width, self.batch_size, self.noise = width, batch_size, noise

    def model(self, seed: int) -> nn.Module:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return nn.Sequential(nn.Linear(1, self.width), nn.Tanh(), nn.Linear(self.width, 1))

    def batches(self, rank: int, replicas: int, seed: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        g = torch.Generator().manual_seed(seed * 7919 + rank)  # each rank its own stream
        while True:
            x = torch.rand(self.batch_size, 1, generator=g) * 2 - 1
            yield x, torch.sin(3 * x) + self.noise * torch.randn(x.shape, generator=g)

    def loss(self, model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        x, y = batch
        return F.mse_loss(model(x), y)

    @torch.no_grad()
    def evaluate(self, model: nn.Module) -> dict[str, float]:
        x = torch.linspace(-1, 1, 257).unsqueeze(1)
        mse = float(F.mse_loss(model(x), torch.sin(3 * x)))
        return {"val_mse": mse, "val_rmse": math.sqrt(mse)}


def make_task(width: int = 32, batch_size: int = 32, noise: float = 0.05) -> Sine:
    """Fit sin(3x) with a small MLP (synthetic data, no download); metric val_mse."""
    if width < 1 or batch_size < 1:
        raise ValueError(f"sine: width and batch_size must be >= 1 (got {width}, {batch_size})")
    if noise < 0:
        raise ValueError(f"sine: noise must be >= 0 (got {noise})")
    return Sine(width, batch_size, noise)
