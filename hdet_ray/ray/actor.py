"""The controller actor: one named Ray actor per job, the single place decisions are made and recorded.

Once per window rank 0 calls `decide(window, draft_record)`; the actor runs the job's controller
(`hdet_ray.core.controller`), completes the record, appends it to `trajectory.jsonl`, offers it to the
service (if the spec names one) and returns the Decision with the controller's new state (rank 0 keeps
that state for its next checkpoint, so checkpoints need no second call). When a worker group starts
(first attempt or after a failure) rank 0 calls `begin(window, state)` once: the actor rewinds the
trajectory to the checkpoint's window and restores the checkpoint's controller state.

`ControllerHost` is the plain class (tested without Ray); `ControllerActor` is it as a Ray actor.
"""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path
from typing import Any

import ray

from hdet_ray.core.controller import ControllerState, Decision, Window, make_controller
from hdet_ray.core.records import WindowRecord, complete_record
from hdet_ray.ray.push import ServicePusher
from hdet_ray.ray.trajectory import TrajectoryLog
from hdet_ray.spec import JobSpec


class ControllerHost:
    def __init__(self, spec: dict[str, Any], run_dir: str) -> None:
        self.spec = JobSpec.model_validate(spec)
        c = self.spec.controller
        self.controller = make_controller(c.name if self.spec.auto_lr else "hold", **c.settings())
        self.state: ControllerState | None = None  # made from the first window's parameter names
        self.log = TrajectoryLog(Path(run_dir) / "trajectory.jsonl")
        self.history: dict[int, dict[str, Any]] = {}
        """Controller state after each window's decision (what a checkpoint at that window holds)."""
        self.restores: list[dict[str, Any]] = []
        self.calls: Counter[str] = Counter()
        link = self.spec.service
        self.pusher = ServicePusher(link.url, link.job_id, link.read_token()) if link is not None else None

    def begin(self, window: int, state: dict[str, Any] | None) -> None:
        """A worker group starts at `window` (0, or a checkpoint's) with that checkpoint's controller
        state."""
        self.calls["begin"] += 1
        dropped = self.log.rewind(window)
        self.state = ControllerState.from_dict(state) if state is not None else None
        if window or dropped:
            self.restores.append(
                {
                    "window": window,
                    "dropped": dropped,
                    "state": state,
                    "recorded": self.history.get(window - 1),
                }
            )
        self.history = {w: s for w, s in self.history.items() if w < window}

    def decide(self, window: Window, record: dict[str, Any]) -> tuple[Decision, dict[str, Any]]:
        self.calls["decide"] += 1
        if self.state is None:
            self.state = self.controller.initial_state(list(window.params))
        self.state, decision = self.controller.decide(self.state, window)
        done = complete_record(WindowRecord.from_dict(record), decision).to_dict()
        self.log.append(done)
        state = self.state.to_dict()
        self.history[window.window] = state
        if self.pusher is not None:
            self.pusher.offer(done)
        return decision, state

    def finalize(self, metrics: dict[str, float]) -> None:
        """Put the run's final validation metrics into the last record (and re-send it)."""
        self.calls["finalize"] += 1
        record = self.log.update_last(
            {k: (v if math.isfinite(v) else None) for k, v in metrics.items() if isinstance(v, (int, float))}
        )
        if record is not None and self.pusher is not None:
            self.pusher.offer(record)

    def progress(self, since: int = 0) -> list[dict[str, Any]]:
        """Records from window `since` on (the trajectory stays queryable while the job runs)."""
        return self.log.since(since)

    def stats(self) -> dict[str, Any]:
        return {
            "windows": len(self.log),
            "calls": dict(self.calls),
            "restores": list(self.restores),
            "state": self.state.to_dict() if self.state is not None else None,
            "pushed": self.pusher.sent if self.pusher else 0,
            "unsent": self.pusher.unsent if self.pusher else 0,
            "push_error": self.pusher.last_error if self.pusher else "",
        }

    def close(self, timeout_s: float = 30.0) -> dict[str, Any]:
        """Flush the service push (bounded by `timeout_s`); returns `stats()`."""
        if self.pusher is not None:
            self.pusher.close(timeout_s)
        return self.stats()


ControllerActor = ray.remote(num_cpus=0, max_restarts=0)(ControllerHost)


def actor_name(run_id: str) -> str:
    """The actor's name in namespace 'hdet', keyed by the run's id (`job.run_id`), never by a job name."""
    return f"hdet-controller-{run_id}"
