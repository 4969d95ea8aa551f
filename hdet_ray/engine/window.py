"""Per-window loss accounting on the loss's own device: no host sync on the per-step path."""

from __future__ import annotations

import math

import torch


class WindowLoss:
    """Accumulates one rank's training losses over a window; read once, at the sync.

    Tracks the mean, the first loss (measured on the converged parameters), the mean over the window's
    second half (the 'tail', what health checks judge) and the minimum. Only tensor ops: `.item()`,
    `float()` and `.tolist()` are never called here.
    """

    def __init__(self, sync_every: int) -> None:
        self.tail_from = sync_every // 2
        self.reset()

    def reset(self) -> None:
        self.total: torch.Tensor | None = None
        self.tail: torch.Tensor | None = None
        self.first: torch.Tensor | None = None
        self.low: torch.Tensor | None = None
        self.count = 0
        self.tail_count = 0

    def add(self, loss: torch.Tensor | float, position: int) -> None:
        """Add the loss of the step at `position` (0-based) in the window."""
        if not isinstance(loss, torch.Tensor):
            loss = torch.tensor(float(loss))
        x = loss.detach().reshape(()).to(_acc_dtype(loss.device))
        if self.total is None or self.low is None or self.tail is None:
            self.total, self.first, self.low = x.clone(), x.clone(), x.clone()
            self.tail = torch.zeros_like(x)
        else:
            self.total += x
            self.low = torch.minimum(self.low, x)
        self.count += 1
        if position >= self.tail_from:
            self.tail += x
            self.tail_count += 1

    def stats(self, device: torch.device, params_finite: torch.Tensor) -> torch.Tensor:
        """[mean, first, tail mean, min, params finite (0/1), count] as a float64 tensor on `device`."""
        parts: list[torch.Tensor]
        if self.total is None or self.first is None or self.tail is None or self.low is None:
            nan = torch.tensor(math.nan, dtype=torch.float64, device=device)
            parts = [nan, nan, nan, nan]
        else:
            tail = self.tail / self.tail_count if self.tail_count else self.total / self.count
            parts = [self.total / self.count, self.first, tail, self.low]
            parts = [p.to(device=device, dtype=torch.float64) for p in parts]
        parts.append(params_finite.to(device=device, dtype=torch.float64))
        parts.append(torch.tensor(float(self.count), dtype=torch.float64, device=device))
        return torch.stack(parts)

    def state_dict(self) -> dict:
        def cpu(t):
            return None if t is None else t.detach().cpu().clone()

        return {
            "total": cpu(self.total),
            "tail": cpu(self.tail),
            "first": cpu(self.first),
            "low": cpu(self.low),
            "count": self.count,
            "tail_count": self.tail_count,
        }

    def load_state_dict(self, state: dict, device: torch.device) -> None:
        def dev(t):
            return None if t is None else t.to(device=device, dtype=_acc_dtype(device))

        self.total, self.tail = dev(state["total"]), dev(state["tail"])
        self.first, self.low = dev(state["first"]), dev(state["low"])
        self.count, self.tail_count = int(state["count"]), int(state["tail_count"])


def _acc_dtype(device: torch.device) -> torch.dtype:
    # float64 everywhere it exists; Apple's MPS has no float64.
    return torch.float32 if device.type == "mps" else torch.float64
