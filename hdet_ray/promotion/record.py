"""The study's record: `record.json` in the study's directory, rewritten atomically after every cell.

It holds the frozen definition and its fingerprint (written before stage 1), every cell (metrics, cost,
attempts), every stage's decision and the budget. It is the runner's only memory: a restarted runner
reads it, refuses a changed study, and runs only the cells it does not hold.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hdet_ray.promotion.freeze import check_unchanged, fingerprint
from hdet_ray.promotion.protocol import Study
from hdet_ray.promotion.table import Table, cell_key

FORMAT = 1


def now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


@dataclass
class StudyRecord:
    path: Path
    """The study's directory (record.json, record.md, record.png, cells/)."""
    data: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def open(cls, root: str | Path, study: Study) -> StudyRecord:
        """Load the study's record, or freeze the study into a new one.

        A changed study raises StudyChanged.
        """
        path = Path(root) / study.name
        file = path / "record.json"
        if file.exists():
            rec = cls(path, json.loads(file.read_text()))
            check_unchanged(study.name, rec.data["definition"], study.definition())
            return rec
        definition = study.definition()
        rec = cls(
            path,
            {
                "format": FORMAT,
                "study": study.name,
                "fingerprint": fingerprint(definition),
                "frozen_at": now(),
                "definition": definition,
                "status": "running",
                "cells": {},
                "decisions": {},
                "budget": None,
            },
        )
        rec.save()
        return rec

    @property
    def cells(self) -> dict[str, dict[str, Any]]:
        return self.data["cells"]

    @property
    def decisions(self) -> dict[str, dict[str, Any]]:
        return self.data["decisions"]

    def add_cell(self, cell: dict[str, Any]) -> None:
        self.cells[cell["id"]] = cell
        self.save()

    def table(self, study: Study, stage: str) -> Table:
        """candidate -> cell -> metric for the stage (failed cells absent, candidates that ran present)."""
        out: Table = {}
        for cell in self.cells.values():
            if cell["stage"] != stage:
                continue
            row = out.setdefault(cell["candidate"], {})
            if cell["status"] == "finished" and cell["metrics"].get(study.metric) is not None:
                row[cell_key(cell["seed"], cell["host"])] = float(cell["metrics"][study.metric])
        return out

    def save(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        file = self.path / "record.json"
        tmp = file.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(self.data, indent=1, sort_keys=False, allow_nan=False))
        os.replace(tmp, file)
