"""What the routes do with jobs: submit to the backend, follow their status, gather their trajectory.

The trajectory reaches the database two ways, both keyed by window: the job's controller actor pushes
each record to the ingest endpoint, and `backfill` reads the run's own `trajectory.jsonl` (after a
service restart, or when a push was lost). Status comes from the backend, polled by `follow`.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import secrets
import shlex
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import anyio

from hdet_ray.core.records import WindowRecord
from service.backends import JobBackend, UnknownJob
from service.events import Broker
from service.metrics import Metrics
from service.settings import Settings
from service.storage import STATUSES, TERMINAL, Job, Store

log = logging.getLogger("hdet.service")
_SUBMIT_GRACE_S = 60.0


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class JobService:
    def __init__(self, settings: Settings, store: Store, backend: JobBackend, broker: Broker,
                 metrics: Metrics) -> None:
        self.settings, self.store, self.backend, self.broker, self.metrics = settings, store, backend, broker, metrics
        self.runs_dir = settings.data_dir.resolve() / "runs"
        self._read_sizes: dict[str, int] = {}

    def submit(self, spec: dict[str, Any], public_url: str) -> Job:
        job_id = "hdet-" + secrets.token_hex(6)
        ingest_token = secrets.token_urlsafe(32)
        spec = {**spec, "storage_path": str(self.runs_dir / job_id)}
        from hdet_ray.spec import JobSpec

        stored = JobSpec.model_validate(spec)
        job = self.store.add_job(job_id, stored.name, stored.model_dump(mode="json"), token_hash(ingest_token),
                                 stored.total_windows)
        run_spec = {**stored.model_dump(mode="json"),
                    "service": {"url": public_url.rstrip("/"), "job_id": job_id, "token": ingest_token}}
        entrypoint = self.settings.entrypoint.format(spec_json=shlex.quote(json.dumps(run_spec)))
        try:
            self.backend.submit(job_id, entrypoint)
        except Exception as e:  # noqa: BLE001  the cluster refused or is unreachable: the job is recorded as failed
            log.warning("submitting %s failed: %s", job_id, e)
            self.store.set_status(job_id, "FAILED", f"submission to Ray failed: {e}")
        return self.store.get_job(job_id) or job

    def ingest(self, job: Job, records: list[dict[str, Any]]) -> int:
        changed = self.store.upsert_windows(job.id, records)
        if changed:
            self.metrics.add_windows(changed)
            self.broker.notify(job.id)
        return changed

    def stop(self, job: Job) -> None:
        self.backend.stop(job.id)
        self.refresh(job)

    def refresh(self, job: Job) -> None:
        """Read the job's status from the backend and its trajectory file; store what changed."""
        self.backfill(job)
        try:
            status, message = self.backend.status(job.id)
        except UnknownJob:
            if _age_s(job) < _SUBMIT_GRACE_S:  # polled between our insert and Ray's accepting it
                return
            status, message = "FAILED", "the Ray cluster has no record of this job (was it replaced?)"
        if status not in STATUSES:
            return
        if status in TERMINAL and status != job.status:
            self.backfill(job)  # before the status: a stream that sees the end has seen every window
        if self.store.set_status(job.id, status, message):
            self.broker.notify(job.id)

    def backfill(self, job: Job) -> int:
        """Upsert the windows of the run's trajectory.jsonl (last line per window wins)."""
        run_dir = self.runs_dir / job.id
        files = sorted(run_dir.glob("*/trajectory.jsonl")) + sorted(run_dir.glob("trajectory.jsonl"))
        size = sum(f.stat().st_size for f in files)
        if not files or self._read_sizes.get(job.id) == size:
            return 0
        latest: dict[int, dict[str, Any]] = {}
        for f in files:
            for line in f.read_text().splitlines():
                rec = _parse_line(line)
                if rec is not None:
                    latest[rec["window"]] = rec
        self._read_sizes[job.id] = size
        return self.ingest(job, list(latest.values())) if latest else 0

    async def follow(self) -> None:
        """Poll the backend for every job not yet finished (this is also how a restarted service
        re-attaches to jobs still running)."""
        while True:
            for job in await anyio.to_thread.run_sync(self.store.active_jobs):
                try:
                    await anyio.to_thread.run_sync(self.refresh, job)
                except Exception as e:  # noqa: BLE001  Ray unreachable for a moment: try again next round
                    log.warning("status of %s unavailable: %s", job.id, e)
            await asyncio.sleep(self.settings.poll_interval_s)


def _age_s(job: Job) -> float:
    return (datetime.now(timezone.utc) - datetime.fromisoformat(job.created_at)).total_seconds()


def _parse_line(line: str) -> dict[str, Any] | None:
    try:
        rec = json.loads(line)
        WindowRecord.from_dict(rec)
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    return rec if isinstance(rec.get("window"), int) and isinstance(rec.get("step"), int) else None


def load_or_create_token(settings: Settings) -> tuple[str, bool]:
    """The API token: HDET_TOKEN, else <data_dir>/token, else a new one saved there. (token, is_new)."""
    if settings.token:
        return settings.token, False
    path: Path = settings.data_dir / "token"
    if path.exists():
        return path.read_text().strip(), False
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(mode=0o600)
    token = secrets.token_urlsafe(32)
    path.write_text(token)
    return token, True
