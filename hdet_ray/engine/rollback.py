"""The rollback target: the last state of a fully healthy sync, kept in memory or not at all.

`rollback='memory'` keeps the converged flat buckets of the last fully healthy sync (with
`HealthConfig.stuck_spread` on, not one whose median gave back over half the run's progress or sits above
the run's initial loss: see `HealthMemory.worth_keeping`) (parameters and
floating-point buffers, plus the optimizer's tensors under `optimizer_state='average'`): the same bytes the
converge all-reduce produced, so keeping them costs no copy, only memory. It is not part of `state_dict()`:
after a resume, the first optimizer step's starting state (what the user loaded) is the target until the
next fully healthy sync. `rollback='off'` keeps nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch.utils.hooks import RemovableHandle

from hdet_ray.engine import converge


def signature(tensors: Sequence[torch.Tensor]) -> list[tuple]:
    return [(tuple(t.shape), str(t.dtype)) for t in tensors]


class Snapshot:
    """`mode='memory'`: the last kept state; `mode='off'`: always empty."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.flats: list[torch.Tensor] | None = None
        self.layout: list[tuple] = []
        self.with_optimizer = False
        self._hook: RemovableHandle | None = None

    @property
    def held(self) -> bool:
        return self.flats is not None

    @property
    def nbytes(self) -> int:
        return sum(f.numel() * f.element_size() for f in self.flats) if self.flats is not None else 0

    def keep(self, flats: list[torch.Tensor], tensors: Sequence[torch.Tensor], with_optimizer: bool) -> None:
        """Keep `flats` (packed from `tensors`; not copied: the caller must not change them afterwards)."""
        if self.mode == "memory":
            self.flats, self.layout, self.with_optimizer = flats, signature(tensors), with_optimizer

    def restore(
        self, tensors_of: Callable[[bool], list[torch.Tensor]], optimizer: torch.optim.Optimizer
    ) -> None:
        """Copy the kept state back; `tensors_of(with_optimizer)` lists the live tensors in packing order."""
        if self.flats is None:
            raise RuntimeError("HDET rollback: no snapshot is held (rollback='off')")
        tensors = tensors_of(self.with_optimizer)
        if signature(tensors) != self.layout:
            raise RuntimeError("HDET rollback: the model's state no longer matches the snapshot layout")
        converge.unpack([f.clone() for f in self.flats], tensors)
        if not self.with_optimizer:
            optimizer.state.clear()

    def keep_at_next_step(
        self, optimizer: torch.optim.Optimizer, tensors_of: Callable[[], list[torch.Tensor]]
    ) -> None:
        """Drop what is held and keep the state found at the next `optimizer.step()` (after a resume, when
        the user has loaded the model's weights)."""
        self.flats = None
        if self.mode != "memory" or self._hook is not None:
            return

        def take(*_: object) -> None:
            tensors = tensors_of()
            self.keep(converge.pack(tensors), tensors, False)
            self.close()

        self._hook = optimizer.register_step_pre_hook(take)

    def close(self) -> None:
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
