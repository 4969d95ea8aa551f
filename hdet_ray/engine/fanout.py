"""Fan-out between syncs: under `shared_grad`, every rank applies the mean gradient with its own rate.

`average_gradients` is the per-step collective (called from an optimizer pre-step hook); `ddp_wrapper`
finds a DistributedDataParallel module that already averages the same gradients, so that the scheduler can
warn about a second, redundant all-reduce.
"""

from __future__ import annotations

import gc
from collections.abc import Sequence

import torch
import torch.distributed as dist

from hdet_ray.engine import converge


def average_gradients(params: Sequence[torch.Tensor], group=None) -> None:
    """Replace every rank's gradient by the mean over the ranks whose gradient is finite, in place.

    Each flat bucket travels with one extra element, 1 if the rank's gradient is finite (else the bucket is
    zeroed): its sum counts the contributors. One all-reduce per bucket, no host sync.
    """
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return
    flats = converge.pack(grads)
    for i, f in enumerate(flats):
        ok = torch.isfinite(f).all()
        f = torch.cat([torch.where(ok, f, torch.zeros_like(f)), ok.to(f.dtype).reshape(1)])
        dist.all_reduce(f, op=dist.ReduceOp.SUM, group=group)
        flats[i] = f[:-1] / f[-1:].clamp(min=1.0)
    converge.unpack(flats, grads)


def is_ddp(model: object) -> bool:
    return isinstance(model, torch.nn.parallel.DistributedDataParallel)


def ddp_wrapper(params: Sequence[torch.Tensor]) -> torch.nn.parallel.DistributedDataParallel | None:
    """A live DistributedDataParallel module that holds any of `params`, or None.

    DDP leaves no mark on the parameters it reduces, so this scans the live objects once (milliseconds for a
    typical process; call it once, not per step).
    """
    ids = {id(p) for p in params}
    for obj in gc.get_objects():
        if is_ddp(obj) and any(id(p) in ids for p in obj.module.parameters()):
            return obj
    return None
