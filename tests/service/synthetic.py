"""Synthetic `WindowRecord`s of a job spec, for tests and the load test that need trajectory records
without training anything (a cosine base rate, a log spread of 2, losses falling with the step)."""

from __future__ import annotations

import math

from hdet_ray.core.records import ParamRecord, WindowRecord
from hdet_ray.spec import JobSpec


def record(spec: JobSpec, window: int) -> WindowRecord:
    step = min((window + 1) * spec.sync_every, spec.steps)
    base = spec.schedule.max_lr * (0.5 + 0.5 * math.cos(math.pi * step / spec.steps))
    multipliers = [2.0 ** (2 * r / max(spec.replicas - 1, 1) - 1) for r in range(spec.replicas)]
    losses = [2.3 * math.exp(-step / spec.steps) * (1 + 0.05 * r) for r in range(spec.replicas)]
    return WindowRecord(
        window=window,
        step=step,
        total_steps=spec.steps,
        losses=losses,
        start_loss=max(losses),
        healthy=[True] * spec.replicas,
        excluded=[],
        reasons={},
        weights=[1 / spec.replicas] * spec.replicas,
        params={
            "lr": ParamRecord(
                base=base,
                offset=1.0,
                new_offset=1.0,
                multipliers=multipliers,
                values=[base * m for m in multipliers],
            )
        },
        metrics={"val_loss": losses[0] * 1.1} if window > 0 else {},
    )
