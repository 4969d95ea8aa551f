"""Rank 0's Decision to every rank: a named codec over one float64 tensor, and its broadcast.

Layout (k explored hyperparameters, n replicas): offsets[k], weights[n], flags[4] (rollback, diverged,
acted, has weights), signal[k], velocity[k], widths[k] (NaN for absent), note length[1],
note bytes[NOTE_BYTES].
The note is UTF-8, cut at a character boundary to fit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.distributed as dist

from hdet_ray.core.controller import Decision

NOTE_BYTES = 512


class DecisionCodec:
    """Encode a Decision into a fixed-size float64 tensor and back, for given names and replica count."""

    def __init__(self, names: Sequence[str], replicas: int) -> None:
        self.names, self.replicas = list(names), replicas
        sizes = {
            "offsets": len(self.names),
            "weights": replicas,
            "flags": 4,
            "signal": len(self.names),
            "velocity": len(self.names),
            "widths": len(self.names),
            "note_length": 1,
            "note": NOTE_BYTES,
        }
        self.fields: dict[str, slice] = {}
        start = 0
        for name, size in sizes.items():
            self.fields[name] = slice(start, start + size)
            start += size
        self.size = start

    def encode(self, decision: Decision) -> torch.Tensor:
        v = [math.nan] * self.size
        weights = list(decision.weights) if decision.weights else [math.nan] * self.replicas
        if len(weights) != self.replicas:
            raise ValueError(
                f"Decision.weights has {len(weights)} entries, expected {self.replicas} (one per replica)"
            )
        note = _fit(decision.note)
        parts = {
            "offsets": [decision.offsets[x] for x in self.names],
            "weights": weights,
            "flags": [
                float(decision.rollback),
                float(decision.diverged),
                float(decision.acted),
                float(bool(decision.weights)),
            ],
            "signal": [decision.signal.get(x, math.nan) for x in self.names],
            "velocity": [decision.velocity.get(x, math.nan) for x in self.names],
            "widths": [decision.widths.get(x, math.nan) for x in self.names],
            "note_length": [float(len(note))],
            "note": list(note) + [0.0] * (NOTE_BYTES - len(note)),
        }
        for name, values in parts.items():
            v[self.fields[name]] = [float(x) for x in values]
        return torch.tensor(v, dtype=torch.float64)

    def decode(self, buf: torch.Tensor) -> Decision:
        v = buf.detach().cpu().tolist()

        def part(name: str) -> list[float]:
            return v[self.fields[name]]

        rollback, diverged, acted, has_weights = (x > 0.5 for x in part("flags"))
        note = bytes(int(x) for x in part("note")[: int(part("note_length")[0])]).decode("utf-8")
        return Decision(
            offsets=dict(zip(self.names, part("offsets"), strict=True)),
            weights=tuple(part("weights")) if has_weights else (),
            rollback=rollback,
            diverged=diverged,
            acted=acted,
            signal={x: s for x, s in zip(self.names, part("signal"), strict=True) if not math.isnan(s)},
            velocity={x: s for x, s in zip(self.names, part("velocity"), strict=True) if not math.isnan(s)},
            note=note,
            widths={x: s for x, s in zip(self.names, part("widths"), strict=True) if not math.isnan(s)},
        )


def broadcast_decision(decision: Decision | None, codec: DecisionCodec, group=None) -> Decision:
    """Rank 0 passes its Decision, the others None; every rank returns rank 0's Decision (one broadcast)."""
    buf = codec.encode(decision) if decision is not None else torch.zeros(codec.size, dtype=torch.float64)
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend(group) == "nccl" else None
    if device is not None:
        buf = buf.to(device)
    dist.broadcast(buf, src=dist.get_global_rank(group, 0) if group is not None else 0, group=group)
    return decision if decision is not None else codec.decode(buf)


def _fit(note: str) -> bytes:
    raw = note.encode("utf-8")
    if len(raw) <= NOTE_BYTES:
        return raw
    return raw[:NOTE_BYTES].decode("utf-8", errors="ignore").encode("utf-8")
