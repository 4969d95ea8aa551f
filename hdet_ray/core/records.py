"""The trajectory: one `WindowRecord` per sync, the product's main output.

Plain data, JSON-serializable (non-finite floats become null), keyed by `window`.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(kw_only=True, slots=True)
class ParamRecord:
    base: float
    """The schedule's value at the window's end, before the offset."""
    offset: float
    """The offset in force during the window."""
    new_offset: float
    """The offset the Decision set for the next window."""
    multipliers: list[float]
    """Per replica rho_r used in the window."""
    values: list[float]
    """Per replica value applied at the window's end."""
    center: float | None = None
    """The value the replicas spread around in the window: base*exp(offset) (log) or base + offset."""
    signal: float | None = None
    velocity: float | None = None


@dataclass(kw_only=True, slots=True)
class WindowRecord:
    window: int
    step: int
    total_steps: int
    losses: list[float]
    """Per replica mean training loss over the window."""
    start_loss: float
    healthy: list[bool]
    excluded: list[int]
    reasons: dict[str, str]
    """Why each excluded replica (by index, as a string) was excluded."""
    weights: list[float]
    params: dict[str, ParamRecord]
    rollback: bool = False
    opening: bool = False
    acted: bool = False
    note: str = ""
    metrics: dict[str, float] = field(default_factory=dict)
    """Filled by whoever runs the loop (validation metric, wall time)."""
    restarted: bool = False
    """What trains changed in this window (`Window.restart`)."""
    first_losses: list[float] = field(default_factory=list)
    """Per replica, its first loss of the window: the converged weights on its first batch. Their mean is
    `start_loss`, their spread the batches' draw that the blow-up test reads (health's `blowup_noise`)."""
    tail_losses: list[float] = field(default_factory=list)
    """Per replica, the mean loss over the window's second half (the blow-up test reads it with the mean)."""
    min_losses: list[float] = field(default_factory=list)
    """Per replica, its lowest loss in the window."""
    counts: list[int] = field(default_factory=list)
    """Per replica, how many losses it reported in the window. With the three lists above, what the health
    checks judged each replica on (`ReplicaStats`), so a health rule can be replayed on a stored run; empty
    in records written before 2026-12-06."""

    def to_dict(self) -> dict[str, Any]:
        return _finite_or_none(asdict(self))

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), allow_nan=False)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> WindowRecord:
        d = dict(d)
        d["params"] = {k: ParamRecord(**_nan_for_none(v)) for k, v in d["params"].items()}
        for key in ("losses", "first_losses", "tail_losses", "min_losses"):
            if key in d:
                d[key] = [math.nan if x is None else x for x in d[key]]
        d["start_loss"] = math.nan if d["start_loss"] is None else d["start_loss"]
        return cls(**d)


def _finite_or_none(x: Any) -> Any:
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: _finite_or_none(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite_or_none(v) for v in x]
    return x


def _nan_for_none(d: dict[str, Any]) -> dict[str, Any]:
    out = dict(d)
    for key in ("base", "offset", "new_offset"):
        if out.get(key) is None:
            out[key] = math.nan
    for key in ("multipliers", "values"):
        out[key] = [math.nan if v is None else v for v in out[key]]
    return out


def draft_record(
    window, stats, reasons: dict[int, str], multipliers: dict[str, list[float]], start: float
) -> WindowRecord:
    """The record of a window before its Decision (what the controller, or its actor, receives)."""
    return WindowRecord(
        window=window.window,
        step=window.step,
        total_steps=window.total_steps,
        losses=list(window.losses),
        start_loss=start,
        healthy=list(window.healthy),
        excluded=[r for r, ok in enumerate(window.healthy) if not ok],
        reasons={str(r): why for r, why in reasons.items()},
        weights=[],
        params={
            name: ParamRecord(
                base=p.base,
                offset=p.offset,
                new_offset=p.offset,
                center=p.center,
                multipliers=list(multipliers[name]),
                values=list(p.values),
            )
            for name, p in window.params.items()
        },
        opening=window.opening,
        restarted=window.restart,
        first_losses=[s.first_loss for s in stats],
        tail_losses=[s.tail_loss for s in stats],
        min_losses=[s.min_loss for s in stats],
        counts=[s.count for s in stats],
    )


def complete_record(record: WindowRecord, decision) -> WindowRecord:
    """Fill a draft with its Decision, in place; returns it."""
    record.weights = list(decision.weights)
    record.rollback, record.acted, record.note = decision.rollback, decision.acted, decision.note
    for name, p in record.params.items():
        p.new_offset = decision.offsets.get(name, p.offset)
        p.signal = decision.signal.get(name)
        p.velocity = decision.velocity.get(name)
    return record
