"""Fan-out between syncs: under `shared_grad`, every rank applies the mean gradient with its own rate.

`average_gradients` is the per-step collective (called from an optimizer pre-step hook); `already_averaged`
reads its first result to see whether something (DistributedDataParallel) averaged the gradients before it,
so that the scheduler can warn about a second, redundant all-reduce. (An earlier version searched
`gc.get_objects()` for a DDP module; under torchrun that scan intermittently aborted the process.)
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.distributed as dist

from hdet_ray.engine import converge

GRADIENT_CLIP = 3.0
"""`average_gradients`' default: a rank's gradient may be at most this multiple of the ranks' median norm."""


def average_gradients(
    params: Sequence[torch.Tensor], group=None, clip: float = GRADIENT_CLIP
) -> torch.Tensor | None:
    """shared_grad's per-step mean gradient, in place, that one unstable rank cannot poison.

    A rank whose gradient is non-finite contributes nothing; a finite one whose norm exceeds `clip` x the
    (lower) median of the ranks' norms is scaled down to that bound first. A replica past the edge of
    stability (a high multiplier) has a gradient tens to thousands of times larger than the others':
    unclipped,
    the mean is mostly its gradient, and every replica takes a step along it. Two collectives, no host sync:
    an all-gather of the N norms, then one SUM all-reduce per bucket that carries a contributor count.
    Returns the gathered norms (on the gradients' device; None when there is no gradient).
    """
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return None
    flats = converge.pack(grads)
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
        f = torch.cat(
            [torch.where(ok, f * scale.to(f.dtype), torch.zeros_like(f)), ok.to(f.dtype).reshape(1)]
        )
        dist.all_reduce(f, op=dist.ReduceOp.SUM, group=group)
        flats[i] = f[:-1] / f[-1:].clamp(min=1.0)
    converge.unpack(flats, grads)
    return torch.cat(norms)


def already_averaged(norms: torch.Tensor) -> bool:
    """Did the ranks hand in bitwise-equal, non-zero gradients? Replicas that see their own data never do;
    gradients that DistributedDataParallel has already averaged always do (one host read: call it once)."""
    values = norms.tolist()
    return len(values) > 1 and values[0] > 0 and all(v == values[0] for v in values)


def is_ddp(model: object) -> bool:
    return isinstance(model, torch.nn.parallel.DistributedDataParallel)
