"""Converge: replace every replica's state by a weighted mean, in one flat all-reduce per dtype/device.

The state that is averaged is a fixed, ordered list of tensors (parameters, floating-point buffers such
as BatchNorm statistics, and optionally the optimizer's per-parameter state). They are packed into one
flat bucket per (dtype, device), each rank scales its bucket by its weight (zeroing it when the weight
is 0, so a NaN replica cannot poison the sum), one SUM all-reduce per bucket, and the buckets are
unpacked back. The reduced buckets double as the snapshot a rollback restores.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch
import torch.distributed as dist


def state_tensors(
    params: Sequence[torch.Tensor], model: torch.nn.Module | None, optimizer: torch.optim.Optimizer | None
) -> list[torch.Tensor]:
    """Parameters, then the model's floating-point buffers, then (if given) the optimizer's tensors.

    Optimizer state is taken per parameter in a fixed key order; 0-dim entries ('step' counters, equal on
    every rank) are left alone.
    """
    out = [p.data for p in params]
    if model is not None:
        out += persistent_float_buffers(model)
    if optimizer is not None:
        for p in params:
            st = optimizer.state.get(p, {})
            for key in sorted(st):
                v = st[key]
                if isinstance(v, torch.Tensor) and v.is_floating_point() and v.dim() > 0:
                    out.append(v)
    return out


def persistent_float_buffers(model: torch.nn.Module) -> list[torch.Tensor]:
    """Floating-point buffers that are part of the model's state (BatchNorm statistics). Non-persistent
    ones (attention masks, rotary tables) are derived constants: neither averaged nor judged."""
    out, seen = [], set()
    for module in model.modules():
        for name, b in module._buffers.items():
            if b is None or not b.is_floating_point() or name in module._non_persistent_buffers_set:
                continue
            if id(b) not in seen:
                seen.add(id(b))
                out.append(b)
    return out


def params_finite(params: Sequence[torch.Tensor]) -> torch.Tensor:
    """A 0-dim bool tensor: are all parameters finite? (no host sync)"""
    if not params:
        return torch.tensor(True)
    flags = [torch.isfinite(p.detach()).all() for p in params]
    return torch.stack([f.to(flags[0].device) for f in flags]).all()


def _buckets(tensors: Iterable[torch.Tensor]) -> dict[tuple[torch.dtype, torch.device], list[torch.Tensor]]:
    groups: dict[tuple[torch.dtype, torch.device], list[torch.Tensor]] = {}
    for t in tensors:
        groups.setdefault((t.dtype, t.device), []).append(t)
    return groups


def pack(tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """One flat copy per (dtype, device) bucket, in first-seen order."""
    return [torch.cat([t.detach().reshape(-1) for t in ts]) for ts in _buckets(tensors).values()]


def unpack(flats: Sequence[torch.Tensor], tensors: Sequence[torch.Tensor]) -> None:
    """Copy flat buckets (as made by `pack`) back into `tensors`, in place."""
    for flat, ts in zip(flats, _buckets(tensors).values(), strict=True):
        offset = 0
        for t in ts:
            n = t.numel()
            t.detach().copy_(flat[offset : offset + n].view_as(t))
            offset += n


def weighted_average(flats: list[torch.Tensor], weight: float, group=None) -> list[torch.Tensor]:
    """sum_r weight_r * flat_r over ranks, in place; returns `flats`.

    A rank with weight 0 contributes exact zeros (its buffer is zeroed, not multiplied: NaN * 0 = NaN).
    """
    for f in flats:
        if weight == 0.0:
            f.zero_()
        elif weight != 1.0:
            f.mul_(weight)
        if dist.is_available() and dist.is_initialized() and dist.get_world_size(group) > 1:
            dist.all_reduce(f, op=dist.ReduceOp.SUM, group=group)
    return flats


def broadcast_state(tensors: Sequence[torch.Tensor], src: int = 0, group=None) -> None:
    """Make every rank start from rank `src`'s state (what DDP does at construction)."""
    if not (dist.is_available() and dist.is_initialized() and dist.get_world_size(group) > 1):
        return
    flats = pack(tensors)
    for f in flats:
        dist.broadcast(f, src=src, group=group)
    unpack(flats, tensors)
