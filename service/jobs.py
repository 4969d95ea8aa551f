"""What the routes do with jobs: submit to the backend, follow their status, gather their trajectory.

The trajectory reaches the database two ways, both keyed by window: the job's controller actor pushes
each record to the ingest endpoint, and `backfill` reads the run's own `trajectory.jsonl` (after a
service restart, or when a push was lost). Status comes from the backend, polled by `follow`.

A job is identified by its id everywhere (its run folder `runs/<id>`, its Ray submission id, its
controller actor); its name is only a label. Its ingest token lives in `runs/<id>/ingest-token` (mode
0600) and only its hash in the database; the job gets that file's path, or, on a cluster that does not
share the data directory (RAY_ADDRESS), the token in its environment (`HDET_INGEST_TOKEN`, through the
Ray Jobs API's runtime_env). So it is in no command line, log, message or file others may read.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import re
import secrets
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import anyio

from hdet_ray.core.records import WindowRecord
from hdet_ray.spec import JobSpec, entrypoint
from service.backends import AGENT_WAIT, JobBackend, Submissions, UnknownJob, agent_wait, lost_waiting
from service.events import Broker
from service.metrics import Metrics
from service.settings import Settings
from service.storage import STATUSES, TERMINAL, Job, Store

log = logging.getLogger("hdet.service")
_SUBMIT_GRACE_S = 60.0
LOST_AFTER_S = 60.0
"""A head that stops answering for this long is gone: its jobs are marked lost (FAILED, with the reason)."""
TOKEN_FILE = "ingest-token"
TOKEN_ENV = "HDET_INGEST_TOKEN"


class Rejected(ValueError):
    """A job the service will not submit (422); `loc` is the field's path in the request body."""

    def __init__(self, loc: list[str | int], msg: str) -> None:
        super().__init__(msg)
        self.loc, self.msg = loc, msg


class HeadDown(RuntimeError):
    """The Ray cluster does not answer: new jobs get 503 instead of being recorded as failed."""


def check_task(task: str, options: dict[str, Any]) -> None:
    """ValueError unless the registered `task` builds with `options` (cheap: no data is loaded)."""
    from hdet_ray.tasks import make_task

    try:
        make_task(task, **options)
    except (ValueError, TypeError) as e:
        raise ValueError(f"task_options: {e}") from None


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class JobService:
    def __init__(
        self, settings: Settings, store: Store, backend: JobBackend, broker: Broker, metrics: Metrics
    ) -> None:
        self.settings, self.store, self.backend, self.broker, self.metrics = (
            settings,
            store,
            backend,
            broker,
            metrics,
        )
        self.runs_dir = settings.data_dir.resolve() / "runs"
        self._read_sizes: dict[str, int] = {}
        self._down_since: float | None = None
        self.submissions = Submissions(backend)

    def check_fits(self, spec: JobSpec) -> None:
        """Refuse a spec that can never run: a task that does not build with its options, or more replicas
        than a fixed-size cluster has CPUs (one CPU per replica)."""
        try:
            check_task(spec.task, spec.task_options)
        except ValueError as e:
            raise Rejected(["body", "task_options"], str(e)) from None
        cpus = self.backend.capacity()
        if cpus is not None and spec.replicas > cpus:
            raise Rejected(
                ["body", "replicas"],
                f"replicas: {spec.replicas} replicas need {spec.replicas} CPUs "
                f"(one per replica); the Ray cluster has {cpus}, so the job "
                f"could never start; allowed: 1 to {cpus}",
            )

    def submit(self, spec: dict[str, Any], public_url: str) -> Job:
        job_id = "hdet-" + secrets.token_hex(6)
        run_dir = self.runs_dir / job_id
        stored = JobSpec.model_validate({**spec, "storage_path": str(run_dir)})
        if stored.sync_every is None:  # the record says which period the job runs with, not "the default"
            stored = stored.model_copy(update={"sync_every": stored.sync_period})
        self.check_fits(stored)
        if not self.backend.alive():
            raise HeadDown("the Ray cluster does not answer; the job was not submitted")
        ingest_token = secrets.token_urlsafe(32)
        token_file = write_private(run_dir / TOKEN_FILE, ingest_token)  # also how the service redacts it
        job = self.store.add_job(
            job_id,
            stored.name,
            stored.model_dump(mode="json"),
            token_hash(ingest_token),
            stored.total_windows,
        )
        self.store.set_status(job_id, "PENDING", self.waiting_reason(job))
        link: dict[str, Any] = {"url": public_url.rstrip("/"), "job_id": job_id}
        env = None
        if self.token_via() == "env":
            link["token_env"], env = TOKEN_ENV, {TOKEN_ENV: ingest_token}
        else:
            link["token_file"] = str(token_file)
        run_spec = {**stored.model_dump(mode="json"), "service": link}
        command = entrypoint(json.dumps(run_spec), self.settings.entrypoint)
        try:
            self.submissions.submit(
                job_id, command, env, waits=self._waits, taken=self._taken_later, failed=self._not_taken
            )
        except Exception as e:
            log.warning("submitting %s failed: %s", job_id, e)
            self.store.set_status(job_id, "FAILED", f"submission to Ray failed: {e}")
        return self.store.get_job(job_id) or job

    def submitting(self, job_id: str) -> bool:
        """Whether the job's submission to Ray still goes on in the background."""
        return self.submissions.waiting(job_id)

    def _waits(self, job_id: str) -> None:
        # a head just started: its job agent comes up later (a minute or more on a busy machine); the client
        # gets the job now, PENDING with this reason, and the submission goes on in the background
        self.store.set_status(job_id, "PENDING", f"{agent_wait()} (no window yet)")

    def _taken_later(self, job_id: str) -> None:
        """Ray took a job submitted in the background (under the submissions' lock, so a stop is before or
        after it)."""
        job = self.store.get_job(job_id)
        if job is not None and job.terminal:  # stopped (or lost) while it waited for the agent
            self.backend.stop(job_id)
        elif job is not None:  # Ray has it: the reason it waits is now the cluster's
            self.store.set_status(job_id, "PENDING", self.waiting_reason(job), only_from="PENDING")

    def _not_taken(self, job_id: str, error: Exception) -> None:
        log.warning("submitting %s failed: %s", job_id, error)
        if self.store.set_status(job_id, "FAILED", f"submission to Ray failed: {error}", only_from="PENDING"):
            self.broker.notify(job_id)

    def token_via(self) -> str:
        if self.settings.ingest_token_via != "auto":
            return self.settings.ingest_token_via
        return "env" if self.settings.ray_address and self.settings.backend == "ray" else "file"

    def ingest(self, job: Job, records: list[dict[str, Any]]) -> int:
        changed = self.store.upsert_windows(job.id, records)
        if changed:
            # "PENDING" means no window yet (`refresh`); the poll may not come before a client reads the job
            self.store.set_status(job.id, "RUNNING", "", only_from="PENDING")
            self.metrics.add_windows(changed)
            self.broker.notify(job.id)
        return changed

    def stop(self, job: Job) -> None:
        with self.submissions.lock:
            # Ray has not taken it yet: stopped here; if Ray takes it after all, `_taken_later` stops it
            waiting = self.submitting(job.id)
            if waiting and self.store.set_status(
                job.id, "STOPPED", "stopped before Ray took the job", only_from="PENDING"
            ):
                self.broker.notify(job.id)
        if waiting:
            return
        self.backend.stop(job.id)
        self.refresh(job)

    def refresh(self, job: Job) -> None:
        """Read the job's status from the backend and its trajectory file; store what changed."""
        if self.submitting(job.id):  # Ray does not know it yet, and nothing has run
            return
        self.backfill(job)
        try:
            status, message = self.backend.status(job.id)
        except UnknownJob:
            if _age_s(job) < _SUBMIT_GRACE_S:  # polled between our insert and Ray's accepting it
                return
            if any((self.runs_dir / job.id).glob("*/summary.json")):  # written last, when the run finished
                status, message = (
                    "SUCCEEDED",
                    "the run finished (summary.json); the Ray cluster no longer knows it",
                )
            elif job.message.startswith(AGENT_WAIT):  # this service's process ended while it waited
                status, message = "FAILED", lost_waiting("job")
            else:
                status, message = (
                    "FAILED",
                    (
                        "lost: the Ray cluster has no record of this job (the head it ran "
                        "on was replaced); its stored windows are kept"
                    ),
                )
        if status not in STATUSES:
            return
        if status in TERMINAL and status != job.status:
            self.backfill(job)  # before the status: a stream that sees the end has seen every window
        windows = self.store.progress(job.id)[0]
        if status in ("PENDING", "RUNNING") and windows == 0:
            status, message = "PENDING", self.waiting_reason(job)
        elif status == "FAILED":
            message = failure_reason(message, self.secrets(job))
        elif status == "RUNNING":
            message = ""
        if self.store.set_status(job.id, status, message):
            self.broker.notify(job.id)

    def waiting_reason(self, job: Job) -> str:
        need = int(job.spec.get("replicas", 1))
        cpus = self.backend.capacity()
        held = sum(
            int(j.spec.get("replicas", 1))
            for j in self.store.active_jobs()
            if j.status == "RUNNING" and j.id != job.id
        )
        have = f"; the cluster has {cpus}" if cpus is not None else ""
        busy = f", {held} held by running jobs" if held else ""
        return f"waiting for {need} CPUs{have}{busy} (no window yet)"

    def secrets(self, job: Job) -> list[str]:
        try:
            return [(self.runs_dir / job.id / TOKEN_FILE).read_text().strip()]
        except OSError:
            return []

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
                rec = _parse_line(line, job.total_windows)
                if rec is not None:
                    latest[rec["window"]] = rec
        self._read_sizes[job.id] = size
        return self.ingest(job, list(latest.values())) if latest else 0

    def mark_lost(self, reason: str) -> int:
        """Every job not yet ended ends FAILED with `reason` (its head is gone); returns how many."""
        lost = 0
        for job in self.store.active_jobs():
            self.backfill(job)
            if self.store.set_status(job.id, "FAILED", f"lost: {reason}; its stored windows are kept"):
                self.broker.notify(job.id)
                lost += 1
        return lost

    def check_head(self) -> bool:
        """True while the backend answers; after LOST_AFTER_S without an answer its jobs are lost."""
        if self.backend.alive():
            self._down_since = None
            return True
        now_s = time.monotonic()
        self._down_since = self._down_since or now_s
        if now_s - self._down_since >= LOST_AFTER_S or self.backend.gone():
            n = self.mark_lost("the Ray head stopped answering")
            if n:
                log.error("the Ray head is gone; %d job(s) marked lost", n)
        return False

    async def follow(self) -> None:
        """Poll the backend for every job not yet finished (this is also how a restarted service
        re-attaches to jobs still running)."""
        while True:
            try:
                alive = await anyio.to_thread.run_sync(self.check_head)
            except Exception as e:
                log.warning("head check failed: %s", e)
                alive = False
            for job in (await anyio.to_thread.run_sync(self.store.active_jobs)) if alive else []:
                try:
                    await anyio.to_thread.run_sync(self.refresh, job)
                except Exception as e:
                    log.warning("status of %s unavailable: %s", job.id, e)
            await asyncio.sleep(self.settings.poll_interval_s)


_OUR_LINE = re.compile(r"^hdet run: (.+)$", re.MULTILINE)
_RAY_PREFIX = re.compile(r"^Job entrypoint command failed with exit code (-?\d+)")


def failure_reason(message: str, secrets_: list[str] = ()) -> str:
    """The cause of a failed job in a line or a few: the entrypoint's own `hdet run: ...` line when it
    wrote one, else the end of what Ray kept (never the command line), with any secret blanked."""
    message = redact(message, secrets_)
    ours = _OUR_LINE.findall(message)
    code = _RAY_PREFIX.match(message)
    if ours:
        reason = ours[-1]
        return reason + (f" (exit code {code.group(1)})" if code else "")
    lines = [
        ln for ln in message.splitlines() if ln.strip() and not ln.startswith("Running entrypoint for job")
    ]
    text = "\n".join(lines)
    return text if len(text) <= 2000 else "..." + text[-1997:]


def redact(text: str, secrets_: list[str]) -> str:
    for s in secrets_:
        if s:
            text = text.replace(s, "[secret]")
    return text


def write_private(path: Path, text: str) -> Path:
    """Write `text` to a new file only its owner can read (created 0600, never world-readable)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    return path


def _age_s(job: Job) -> float:
    return (datetime.now(timezone.utc) - datetime.fromisoformat(job.created_at)).total_seconds()


def _parse_line(line: str, total_windows: int) -> dict[str, Any] | None:
    try:
        rec = json.loads(line)
        WindowRecord.from_dict(rec)
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    window = rec.get("window")
    ok = isinstance(window, int) and 0 <= window < total_windows and isinstance(rec.get("step"), int)
    return rec if ok else None


def load_or_create_token(settings: Settings) -> tuple[str, bool]:
    """The API token: HDET_TOKEN, else <data_dir>/token, else a new one saved there. (token, is_new)."""
    if settings.token:
        return settings.token, False
    path: Path = settings.data_dir / "token"
    if path.exists():
        return path.read_text().strip(), False
    token = secrets.token_urlsafe(32)
    write_private(path, token)
    return token, True
