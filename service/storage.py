"""Jobs and their trajectories in a real database (SQLite by default, any SQLAlchemy URL).

Each job has a revision counter `seq`; every stored change to one of its windows takes the next value.
A window is keyed by (job, window index): a re-sent window replaces the old one and, if its content
changed, gets a new `seq`, so a stream that resumes "after seq S" misses nothing and repeats nothing.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from sqlalchemy import (
    Column,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    create_engine,
    event,
    func,
    or_,
    select,
    update,
)
from sqlalchemy.engine import Engine

from hdet_ray.spec import STATUSES, TERMINAL  # the one job-status enum is hdet_ray.spec.JobStatus

metadata = MetaData()

schema_version = Table("schema_version", metadata, Column("version", Integer, nullable=False))

jobs = Table(
    "jobs",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("name", String(128)),
    Column("status", String(16), nullable=False, index=True),
    Column("message", Text, nullable=False, default=""),
    Column("spec", Text, nullable=False),
    Column("ingest_token_hash", String(64), nullable=False),
    Column("total_windows", Integer, nullable=False),
    Column("seq", Integer, nullable=False, default=0),
    Column("created_at", String(32), nullable=False),
    Column("updated_at", String(32), nullable=False),
    Column("finished_at", String(32)),
)

windows = Table(
    "windows",
    metadata,
    Column("job_id", String(64), primary_key=True),
    Column("window", Integer, primary_key=True),
    Column("seq", Integer, nullable=False, index=True),
    Column("step", Integer, nullable=False),
    Column("record", Text, nullable=False),
)

studies = Table(
    "studies",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("name", String(64), nullable=False),
    Column("status", String(16), nullable=False, index=True),
    Column("message", Text, nullable=False, default=""),
    Column("executor", String(16), nullable=False),
    Column("definition", Text, nullable=False),
    Column("created_at", String(32), nullable=False),
    Column("updated_at", String(32), nullable=False),
    Column("finished_at", String(32)),
)
"""Staged-promotion studies (service.studies), in the same database as the jobs."""

# Each entry moves the schema one version up; version 1 is the tables above, made by create_all.
MIGRATIONS: list[str] = []
SCHEMA_VERSION = 1 + len(MIGRATIONS)


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


@dataclass(frozen=True, slots=True)
class Job:
    id: str
    name: str | None
    status: str
    message: str
    spec: dict[str, Any]
    ingest_token_hash: str
    total_windows: int
    seq: int
    created_at: str
    updated_at: str
    finished_at: str | None

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL


def _job(row) -> Job:
    d = dict(row._mapping)
    d["spec"] = json.loads(d["spec"])
    return Job(**d)


class Store:
    """All database access. Thread-safe: handlers call it from FastAPI's thread pool."""

    def __init__(self, url: str) -> None:
        sqlite = url.startswith("sqlite")
        self.engine: Engine = create_engine(
            url,
            connect_args={"check_same_thread": False, "timeout": 30} if sqlite else {},
            pool_pre_ping=not sqlite,
        )
        if sqlite:
            event.listen(self.engine, "connect", _sqlite_pragmas)
        self.write_lock = threading.Lock()
        """Held by every write to this database (jobs, windows, studies): SQLite has one writer."""
        self.migrate()

    def migrate(self) -> None:
        with self.write_lock, self.engine.begin() as c:
            metadata.create_all(c)
            version = c.execute(select(schema_version.c.version)).scalar()
            if version is None:
                c.execute(schema_version.insert().values(version=SCHEMA_VERSION))
                return
            if version > SCHEMA_VERSION:
                raise RuntimeError(
                    f"database schema v{version} is newer than this service (v{SCHEMA_VERSION})"
                )
            for sql in MIGRATIONS[version - 1 :]:
                c.exec_driver_sql(sql)
            c.execute(update(schema_version).values(version=SCHEMA_VERSION))

    def close(self) -> None:
        self.engine.dispose()

    # jobs
    def add_job(
        self, job_id: str, name: str | None, spec: dict[str, Any], ingest_token_hash: str, total_windows: int
    ) -> Job:
        t = now()
        with self.write_lock, self.engine.begin() as c:
            c.execute(
                jobs.insert().values(
                    id=job_id,
                    name=name,
                    status="PENDING",
                    message="",
                    spec=json.dumps(spec),
                    ingest_token_hash=ingest_token_hash,
                    total_windows=total_windows,
                    seq=0,
                    created_at=t,
                    updated_at=t,
                    finished_at=None,
                )
            )
        return self.get_job(job_id)

    def get_job(self, job_id: str) -> Job | None:
        with self.engine.connect() as c:
            row = c.execute(select(jobs).where(jobs.c.id == job_id)).first()
        return _job(row) if row else None

    def list_jobs(self, status: str | None = None, offset: int = 0, limit: int = 50) -> tuple[list[Job], int]:
        where = [jobs.c.status == status] if status else []
        with self.engine.connect() as c:
            total = c.execute(select(func.count()).select_from(jobs).where(*where)).scalar_one()
            rows = c.execute(
                select(jobs)
                .where(*where)
                .order_by(jobs.c.created_at.desc(), jobs.c.id)
                .offset(offset)
                .limit(limit)
            ).all()
        return [_job(r) for r in rows], total

    def active_jobs(self) -> list[Job]:
        with self.engine.connect() as c:
            rows = c.execute(select(jobs).where(jobs.c.status.not_in(TERMINAL))).all()
        return [_job(r) for r in rows]

    def count_by_status(self) -> dict[str, int]:
        with self.engine.connect() as c:
            rows = c.execute(select(jobs.c.status, func.count()).group_by(jobs.c.status)).all()
        return {s: 0 for s in STATUSES} | {s: n for s, n in rows}

    def set_status(
        self, job_id: str, status: str, message: str | None = None, only_from: str | None = None
    ) -> bool:
        """Returns True when the status (or, if given, the message) changed. `only_from`: change it only
        from this status, in the same statement (so a status stored meanwhile is never overwritten)."""
        t = now()
        values: dict[str, Any] = {"status": status, "updated_at": t}
        if message is not None:
            values["message"] = message[:2000]
        if status in TERMINAL:
            values["finished_at"] = t
        with self.write_lock, self.engine.begin() as c:
            changed = jobs.c.status != status
            if message is not None:
                changed = or_(changed, jobs.c.message != values["message"])
            where = [jobs.c.id == job_id, changed]
            if only_from is not None:
                where.append(jobs.c.status == only_from)
            n = c.execute(update(jobs).where(*where).values(**values))
        return n.rowcount > 0

    # windows
    def upsert_windows(self, job_id: str, records: list[dict[str, Any]]) -> int:
        """Store records keyed by window; returns how many were new or changed."""
        changed = 0
        with self.write_lock, self.engine.begin() as c:
            seq = c.execute(select(jobs.c.seq).where(jobs.c.id == job_id)).scalar_one()
            for rec in sorted(records, key=lambda r: r["window"]):
                text = json.dumps(rec, sort_keys=True, allow_nan=False)
                key = (windows.c.job_id == job_id, windows.c.window == rec["window"])
                old = c.execute(select(windows.c.record).where(*key)).scalar()
                if old == text:
                    continue
                seq += 1
                changed += 1
                if old is None:
                    c.execute(
                        windows.insert().values(
                            job_id=job_id, window=rec["window"], seq=seq, step=rec["step"], record=text
                        )
                    )
                else:
                    c.execute(update(windows).where(*key).values(seq=seq, step=rec["step"], record=text))
            if changed:
                c.execute(update(jobs).where(jobs.c.id == job_id).values(seq=seq, updated_at=now()))
        return changed

    def windows_after(self, job_id: str, after: int = -1, limit: int = 10_000) -> list[dict[str, Any]]:
        """Records with window index > after, by window."""
        with self.engine.connect() as c:
            rows = (
                c.execute(
                    select(windows.c.record)
                    .where(windows.c.job_id == job_id, windows.c.window > after)
                    .order_by(windows.c.window)
                    .limit(limit)
                )
                .scalars()
                .all()
            )
        return [json.loads(r) for r in rows]

    def changes_after(self, job_id: str, seq: int, limit: int = 500) -> list[tuple[int, dict[str, Any]]]:
        """(seq, record) for every window stored or changed after revision `seq`, oldest first."""
        with self.engine.connect() as c:
            rows = c.execute(
                select(windows.c.seq, windows.c.record)
                .where(windows.c.job_id == job_id, windows.c.seq > seq)
                .order_by(windows.c.seq)
                .limit(limit)
            ).all()
        return [(s, json.loads(r)) for s, r in rows]

    def progress(self, job_id: str) -> tuple[int, int | None, dict[str, float]]:
        """(windows stored, latest step, latest metrics) of a job."""
        with self.engine.connect() as c:
            count, step = c.execute(
                select(func.count(), func.max(windows.c.step)).where(windows.c.job_id == job_id)
            ).one()
            recent = (
                c.execute(
                    select(windows.c.record)
                    .where(windows.c.job_id == job_id)
                    .order_by(windows.c.window.desc())
                    .limit(8)
                )
                .scalars()
                .all()
            )
        metrics: dict[str, float] = {}
        for text in recent:
            metrics = json.loads(text).get("metrics") or {}
            if metrics:
                break
        return count, step, metrics

    def window_count(self) -> int:
        with self.engine.connect() as c:
            return c.execute(select(func.count()).select_from(windows)).scalar_one()


def _sqlite_pragmas(dbapi_conn, _record) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.close()
