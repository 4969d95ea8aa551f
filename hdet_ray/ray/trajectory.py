"""The job's trajectory file: one `WindowRecord.to_dict()` JSON per line, keyed by `window`.

Windows arrive in order. After a worker-group restart the run resumes from a checkpoint's window, so the
log is rewound to that window (records from it on are dropped and the file is rewritten) and the
re-run windows are appended again: every window index appears exactly once, consecutively.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


class TrajectoryLog:
    """The records of one run, in memory and in `path` (JSON lines)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.records: list[dict[str, Any]] = []
        self._rewrite()

    def __len__(self) -> int:
        return len(self.records)

    def append(self, record: dict[str, Any]) -> None:
        if record["window"] != len(self.records):
            raise ValueError(
                f"trajectory: expected window {len(self.records)}, got {record['window']} "
                "(rewind first when a run resumes from a checkpoint)"
            )
        self.records.append(record)
        with self.path.open("a") as f:
            f.write(json.dumps(record, allow_nan=False) + "\n")
            f.flush()

    def rewind(self, window: int) -> int:
        """Drop the records of `window` and later; returns how many were dropped."""
        if not 0 <= window <= len(self.records):
            raise ValueError(f"trajectory: cannot rewind to window {window}, have {len(self.records)}")
        dropped = len(self.records) - window
        if dropped:
            del self.records[window:]
            self._rewrite()
        return dropped

    def update_last(self, metrics: dict[str, float]) -> dict[str, Any] | None:
        """Merge `metrics` into the last record (the run's final metric); returns the record."""
        if not self.records:
            return None
        self.records[-1]["metrics"].update(metrics)
        self._rewrite()
        return self.records[-1]

    def since(self, window: int) -> list[dict[str, Any]]:
        return self.records[window:]

    def _rewrite(self) -> None:
        tmp = self.path.with_suffix(".jsonl.tmp")
        with tmp.open("w") as f:
            f.writelines(json.dumps(r, allow_nan=False) + "\n" for r in self.records)
        os.replace(tmp, self.path)


def read_trajectory(path: str | Path) -> list[dict[str, Any]]:
    """The records of a trajectory file, in file order."""
    with Path(path).open() as f:
        return [json.loads(line) for line in f if line.strip()]
