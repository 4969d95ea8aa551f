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

OPTIMIZER_STATE_POLICIES = ("average", "keep", "reset")


def state_tensors(params: Sequence[torch.Tensor], model: torch.nn.Module | None,
                  optimizer: torch.optim.Optimizer | None) -> list[torch.Tensor]:
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
    for flat, ts in zip(flats, _buckets(tensors).values()):
        offset = 0
        for t in ts:
            n = t.numel()
            t.detach().copy_(flat[offset:offset + n].view_as(t))
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


GRADIENT_CLIP = 3.0
"""`average_gradients`' default: a rank's gradient may be at most this multiple of the ranks' median norm."""


def average_gradients(grads: Sequence[torch.Tensor], group=None, clip: float = GRADIENT_CLIP) -> None:
    """shared_grad's per-step mean gradient, in place, that one unstable rank cannot poison.

    A rank whose gradient is non-finite contributes nothing; a finite one whose norm exceeds `clip` x the
    (lower) median of the ranks' norms is scaled down to that bound first. A replica past the edge of
    stability (a high multiplier) has a gradient tens to thousands of times larger than the others': unclipped,
    the mean is mostly its gradient, and every replica takes a step along it. Two collectives, no host sync:
    an all-gather of the N norms, then one SUM all-reduce per bucket that carries a contributor count.
    """
    if not grads:
        return
    flats = pack(grads)
    sq = torch.stack([f.double().pow(2).sum().to(flats[0].device) for f in flats]).sum()
    ok = torch.isfinite(sq)
    norm = torch.where(ok, sq.sqrt(), torch.full_like(sq, torch.inf)).reshape(1)
    n = dist.get_world_size(group)
    norms = [torch.empty_like(norm) for _ in range(n)]
    dist.all_gather(norms, norm, group=group)
    median = torch.cat(norms).sort().values[(n - 1) // 2]
    bound = clip * median
    scale = torch.where(norm[0] > bound, bound / norm[0], torch.ones_like(norm[0]))
    scale = torch.where(ok & torch.isfinite(scale), scale, torch.zeros_like(scale))
    for i, f in enumerate(flats):
        f = torch.cat([torch.where(ok, f * scale.to(f.dtype), torch.zeros_like(f)), ok.to(f.dtype).reshape(1)])
        dist.all_reduce(f, op=dist.ReduceOp.SUM, group=group)
        flats[i] = f[:-1] / f[-1:].clamp(min=1.0)
    unpack(flats, grads)
