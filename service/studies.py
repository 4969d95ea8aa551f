"""Staged-promotion studies in the service: validate, submit as a Ray job, follow, serve the record.

A study runs as one Ray job, `python -m hdet_ray promote --study-json ... --out <data_dir>/studies/<id>`,
submitted through the same backend as HDET jobs. The runner writes `record.json` (rewritten after every
cell), then `record.md` and `record.png` at the end, under `<out>/<study name>/`; the service reads them
from there (the service and the cluster share that directory, as they do for job trajectories).
Status is read from the backend when a study is read, until it ends.
"""

from __future__ import annotations

import json
import logging
import secrets
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import func, select, update

from hdet_ray.promotion.cells import stage_cells, validate_cells
from hdet_ray.promotion.protocol import Study, StudyError
from hdet_ray.spec import check_label
from service.backends import AGENT_WAIT, JobBackend, Submissions, UnknownJob, agent_wait, lost_waiting
from service.jobs import _SUBMIT_GRACE_S, _age_s, check_task, failure_reason
from service.storage import STATUSES, TERMINAL, Store, now, studies

log = logging.getLogger("hdet.service")

ENTRYPOINT = "python -m hdet_ray promote --study-json {study_json} --out {out} --executor {executor}"
EXECUTORS = {"inprocess": 1, "run_job": None}
"""Executor name -> the most replicas a cell may have under it (see hdet_ray.promotion.executors)."""
MAX_CELLS = 2_000
"""Most cells a study sent to the service may declare (over all stages, before any is stopped)."""
MAX_STUDY_CHARS = 64 * 1024
"""The study travels inline on the Ray job's command line; one argument must stay well under 128 KiB."""
# Fields the service or the runner sets; a study sent over HTTP may not.
_RESERVED = ("service", "storage_path")


class StudyRejected(ValueError):
    """A study the service will not run; `loc` is the field's path in the request body."""

    def __init__(self, loc: list[str | int], msg: str) -> None:
        super().__init__(msg)
        self.loc, self.msg = loc, msg


@dataclass(frozen=True, slots=True)
class StudyRow:
    id: str
    name: str
    status: str
    message: str
    executor: str
    definition: dict[str, Any]
    created_at: str
    updated_at: str
    finished_at: str | None

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL


def check_study(study: Study, executor: str) -> None:
    """What the service adds to the study's own validation: a bounded size, registered tasks only (the
    API never runs code it is sent), no service-owned fields, and every cell's job spec valid."""
    from hdet_ray.tasks import TASKS

    try:
        check_label(study.name)
    except ValueError as e:
        raise StudyRejected(["body", "name"], str(e)) from None
    cells = sum(len(study.candidates) * len(s.seeds) * max(1, len(s.hosts)) for s in study.stages)
    if cells > MAX_CELLS:
        raise StudyRejected(
            ["body", "stages"],
            f"the study declares {cells} cells (candidates x seeds x hosts "
            f"over stages); the service runs at most {MAX_CELLS}",
        )
    size = len(json.dumps(study.definition()))
    if size > MAX_STUDY_CHARS:
        raise StudyRejected(["body"], f"the study is {size} characters as JSON; at most {MAX_STUDY_CHARS}")
    parts: list[tuple[list[str | int], dict[str, Any]]] = [(["body", "base"], study.base)]
    parts += [(["body", "candidates", i, "overrides"], c.overrides) for i, c in enumerate(study.candidates)]
    for loc, part in parts:
        for key in _RESERVED:
            if key in part:
                raise StudyRejected([*loc, key], f"{key} is set by the service; leave it out")
        task = part.get("task")
        if task is not None and task not in TASKS:
            raise StudyRejected(
                [*loc, "task"], f"task {task!r} is not a registered task; allowed: {sorted(TASKS)}"
            )
    try:
        validate_cells(study, EXECUTORS[executor])
    except StudyError as e:
        raise StudyRejected(["body"], str(e)) from None
    names = [c.name for c in study.candidates]
    for k in range(len(study.stages)):  # every cell's task builds with its options, before anything runs
        for cell in stage_cells(study, k, names):
            try:
                check_task(cell.spec["task"], cell.spec.get("task_options") or {})
            except ValueError as e:
                i = names.index(cell.candidate)
                raise StudyRejected(
                    ["body", "candidates", i, "overrides", "task_options"],
                    f"candidate {cell.candidate!r}: {e}",
                ) from None
    if executor == "run_job":  # the runner would refuse it too, but only once the Ray job has started
        for i, stage in enumerate(study.stages):
            if stage.start == "continue" and any(c.continuable for c in study.candidates):
                raise StudyRejected(
                    ["body", "stages", i, "start"],
                    "the run_job executor cannot continue "
                    "from a checkpoint; declare 'restart' or mark the candidates continuable: false",
                )


class StudyService:
    """Studies in the service's database (table `studies` of `service.storage`, beside the jobs: one schema,
    one migration, one write lock) and on the backend."""

    def __init__(
        self, store: Store, backend: JobBackend, data_dir: Path, entrypoint: str = ENTRYPOINT
    ) -> None:
        self.engine, self.backend, self.entrypoint = store.engine, backend, entrypoint
        self.root = data_dir.resolve() / "studies"
        self._write = store.write_lock
        self.submissions = Submissions(backend)

    def submit(self, study: Study, executor: str) -> StudyRow:
        check_study(study, executor)
        study_id = "study-" + secrets.token_hex(6)
        definition = study.definition()
        t = now()
        with self._write, self.engine.begin() as c:
            c.execute(
                studies.insert().values(
                    id=study_id,
                    name=study.name,
                    status="PENDING",
                    message="",
                    executor=executor,
                    definition=json.dumps(definition),
                    created_at=t,
                    updated_at=t,
                    finished_at=None,
                )
            )
        command = self.entrypoint.format(
            study_json=shlex.quote(json.dumps(definition, separators=(",", ":"))),
            out=shlex.quote(str(self.out_dir(study_id))),
            executor=executor,
        )
        try:
            # a head just started may not take it yet: the study is PENDING with the reason, and the
            # submission goes on in the background (as a job's, `service.jobs`)
            self.submissions.submit(
                study_id,
                command,
                None,
                waits=lambda i: self._set_status(i, "PENDING", agent_wait()),
                taken=self._taken_later,
                failed=self._not_taken,
            )
        except Exception as e:
            self._not_taken(study_id, e)
        return self.get(study_id)

    def _taken_later(self, study_id: str) -> None:
        row = self.get(study_id)
        if row is not None and row.terminal:  # ended (lost) while it waited for the agent
            self.backend.stop(study_id)
        else:  # Ray has it
            self._set_status(study_id, "PENDING", "", only_from="PENDING")

    def _not_taken(self, study_id: str, error: Exception) -> None:
        log.warning("submitting study %s failed: %s", study_id, error)
        self._set_status(study_id, "FAILED", f"submission to Ray failed: {error}", only_from="PENDING")

    def get(self, study_id: str) -> StudyRow | None:
        with self.engine.connect() as c:
            row = c.execute(select(studies).where(studies.c.id == study_id)).first()
        return _row(row) if row else None

    def list(self, offset: int = 0, limit: int = 50) -> tuple[list[StudyRow], int]:
        with self.engine.connect() as c:
            total = c.execute(select(func.count()).select_from(studies)).scalar_one()
            rows = c.execute(
                select(studies)
                .order_by(studies.c.created_at.desc(), studies.c.id)
                .offset(offset)
                .limit(limit)
            ).all()
        return [_row(r) for r in rows], total

    def refresh(self, row: StudyRow) -> StudyRow:
        """Read a running study's status from the backend (Ray unreachable: keep what is stored)."""
        if row.terminal or self.submissions.waiting(row.id):  # (Ray does not know it yet)
            return row
        try:
            status, message = self.backend.status(row.id)
        except UnknownJob:
            if _age_s(row) < _SUBMIT_GRACE_S:  # polled between our insert and Ray's accepting it
                return row
            status, message = (
                "FAILED",
                lost_waiting("study")
                if row.message.startswith(AGENT_WAIT)  # this service's process ended while it waited
                else "the Ray cluster has no record of this study's job (was it replaced?)",
            )
        except Exception as e:
            log.warning("status of study %s unavailable: %s", row.id, e)
            return row
        if status in STATUSES and status != row.status:
            self._set_status(row.id, status, failure_reason(message) if status == "FAILED" else message)
            return self.get(row.id) or row
        return row

    def out_dir(self, study_id: str) -> Path:
        return self.root / study_id

    def record_file(self, row: StudyRow, name: str) -> Path | None:
        """`record.json`, `record.md` or `record.png` of the study, if written yet."""
        path = self.out_dir(row.id) / row.name / name
        return path if path.is_file() else None

    def record(self, row: StudyRow) -> dict[str, Any] | None:
        path = self.record_file(row, "record.json")
        if path is None:
            return None
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):  # replaced atomically, so only an unreadable disk gets here
            return None

    def _set_status(self, study_id: str, status: str, message: str, only_from: str | None = None) -> None:
        t = now()
        values: dict[str, Any] = {"status": status, "message": message[:2000], "updated_at": t}
        if status in TERMINAL:
            values["finished_at"] = t
        where = studies.c.id == study_id
        if only_from is not None:
            where &= studies.c.status == only_from
        with self._write, self.engine.begin() as c:
            c.execute(update(studies).where(where).values(**values))


def _row(row) -> StudyRow:
    d = dict(row._mapping)
    d["definition"] = json.loads(d["definition"])
    return StudyRow(**d)
