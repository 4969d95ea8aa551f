"""Count the bytes a process hands to torch.distributed collectives (its payload, not the wire traffic).

Ring all-reduce moves about 2 (N-1)/N times the payload per worker; the tables state payload bytes and
that factor separately. DDP's gradient buckets do not pass through the Python collectives, so DDP is
counted with a communication hook on its buckets instead (`ddp_counting_hook`).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import torch
import torch.distributed as dist

COLLECTIVES = ("all_reduce", "all_gather", "broadcast", "all_gather_into_tensor", "reduce_scatter_tensor")


def _nbytes(x: Any) -> int:
    if isinstance(x, torch.Tensor):
        return x.numel() * x.element_size()
    if isinstance(x, (list, tuple)):
        return sum(_nbytes(t) for t in x)
    return 0


class ByteCounter:
    """Patch the collectives of this process; `bytes` sums payloads, `calls` counts calls per kind."""

    def __init__(self) -> None:
        self.bytes = 0
        self.calls: Counter[str] = Counter()
        self._saved = {name: getattr(dist, name) for name in COLLECTIVES}
        for name, fn in self._saved.items():
            setattr(dist, name, self._wrap(name, fn))

    def _wrap(self, name, fn):
        def counted(tensor, *args, **kwargs):
            # all_gather(output_list, input): the payload a rank contributes is its input
            payload = args[0] if name == "all_gather" and args else tensor
            self.bytes += _nbytes(payload)
            self.calls[name] += 1
            return fn(tensor, *args, **kwargs)

        return counted

    def reset(self) -> None:
        self.bytes = 0
        self.calls.clear()

    def close(self) -> None:
        for name, fn in self._saved.items():
            setattr(dist, name, fn)


def ddp_counting_hook(counter: ByteCounter):
    """A DDP comm hook doing what DDP's default does (average each bucket), counting each bucket's bytes."""
    all_reduce = counter._saved["all_reduce"]  # the unpatched one: each bucket is counted once, here

    def hook(state, bucket):
        tensor = bucket.buffer()
        counter.bytes += tensor.numel() * tensor.element_size()
        counter.calls["ddp_bucket_all_reduce"] += 1
        tensor.div_(dist.get_world_size())
        return all_reduce(tensor, async_op=True).get_future().then(lambda fut: fut.value()[0])

    return hook
