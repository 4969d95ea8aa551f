"""A `digits` task whose chosen rank kills its own process once, at a chosen step (for the fault test).

Same data, model and numbers as `digits`: a run that survives the kill must produce the same trajectory.
Used as `task: "faulty_task:kill_once"` (tests/ray is on the workers' PYTHONPATH).
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass
from pathlib import Path

from hdet_ray.tasks import Digits


@dataclass
class KillOnce(Digits):
    kill_rank: int = 1
    kill_step: int = 0
    marker: str = ""
    """Created just before the kill; while it exists nobody is killed again."""

    def batches(self, rank, replicas, seed):
        for position, batch in enumerate(super().batches(rank, replicas, seed)):
            if rank == self.kill_rank and position == self.kill_step and not Path(self.marker).exists():
                Path(self.marker).write_text(str(os.getpid()))
                os.kill(os.getpid(), signal.SIGKILL)
            yield batch


def kill_once(**options) -> KillOnce:
    return KillOnce(**options)
