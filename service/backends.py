"""Where jobs run. `RayJobs` talks to Ray only through the Ray Jobs API; `MemoryJobs` runs nothing
(jobs are recorded, records arrive through ingest) for API tests and load tests.

A backend's methods block; the app calls them from worker threads.
"""

from __future__ import annotations

import logging
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Protocol

log = logging.getLogger("hdet.service")


class UnknownJob(LookupError):
    """The backend has no job of that id (e.g. the Ray cluster it ran on is gone)."""


class AgentNotReady(RuntimeError):
    """The head cannot take a submission yet: it has no job agent, or it dropped the connection without an
    answer (a head that has just started). The same submission id may be tried again."""


class JobBackend(Protocol):
    def submit(
        self,
        job_id: str,
        entrypoint: str,
        env: dict[str, str] | None = None,
        *,
        retry_s: float | None = None,
    ) -> None:
        """Start `entrypoint` as job `job_id`, with `env` added to its environment. While the head has no
        job agent, try again for `retry_s` seconds (None: SUBMIT_RETRY_S), then raise AgentNotReady."""

    def status(self, job_id: str) -> tuple[str, str]:
        """(status, message); status is one of storage.STATUSES. Raises UnknownJob."""

    def stop(self, job_id: str) -> None: ...
    def logs(self, job_id: str) -> str: ...
    def capacity(self) -> int | None:
        """CPUs of a cluster whose size is fixed (the embedded head); None when unknown or autoscaling."""

    def alive(self) -> bool:
        """Whether the cluster answers now."""

    def gone(self) -> bool:
        """Whether the cluster is known to be gone for good (its head process exited)."""

    def close(self) -> None: ...


SUBMIT_RETRY_S = 180.0
"""How long `RayJobs.submit` retries while the head has no job agent yet (a head just started, on a busy
machine, answers 500 "No available agent to submit job, please try again later" for a while: on a 2-core
machine running other work beside it, more than 90 s). The service tries a job once while its POST waits and,
if the agent is not up, goes on trying in the background for this long (the job is PENDING meanwhile)."""


AGENT_WAIT = "the Ray head's job agent is not up yet"
"""How a job's or study's message starts while its submission waits in the background for the agent."""


def lost_waiting(what: str) -> str:
    """The message of a job or study left waiting for the agent by a service that stopped."""
    return (
        f"lost: the service stopped before Ray took the {what} (it was waiting for the head's job agent); "
        "submit it again"
    )


def agent_wait() -> str:
    """The message of a job or study whose submission waits in the background for the head's job agent."""
    return f"{AGENT_WAIT}; the submission is tried again for up to {SUBMIT_RETRY_S:.0f} s"


class Submissions:
    """Submissions that do not make a POST wait for a head's job agent: `submit` tries once and, if the agent
    is not up, goes on in a background thread for up to SUBMIT_RETRY_S. Jobs and studies share it."""

    def __init__(self, backend: JobBackend) -> None:
        self.backend = backend
        self.lock = threading.Lock()
        """Held while a background submission ends (`taken` runs under it): a stop that reads `waiting`
        under it either comes before (and `taken` sees it) or after (and goes to Ray)."""
        self._waiting: set[str] = set()

    def waiting(self, job_id: str) -> bool:
        """Whether the submission of `job_id` still goes on in the background (Ray does not know it yet)."""
        return job_id in self._waiting

    def submit(
        self,
        job_id: str,
        entrypoint: str,
        env: dict[str, str] | None,
        *,
        waits: Callable[[str], None],
        taken: Callable[[str], None],
        failed: Callable[[str, Exception], None],
    ) -> None:
        """Submit now if the head can take it; otherwise call `waits(job_id)` and go on in the background,
        where `taken(job_id)` or `failed(job_id, error)` is called at the end. Other errors of the first try
        are raised."""
        try:
            self.backend.submit(job_id, entrypoint, env, retry_s=0.0)
            return
        except AgentNotReady:
            pass
        self._waiting.add(job_id)
        try:
            waits(job_id)
        except BaseException:
            self._waiting.discard(job_id)
            raise
        threading.Thread(
            target=self._later,
            args=(job_id, entrypoint, env, taken, failed),
            name=f"submit-{job_id}",
            daemon=True,
        ).start()

    def _later(self, job_id, entrypoint, env, taken, failed) -> None:
        try:
            try:
                self.backend.submit(job_id, entrypoint, env)
            except Exception as e:
                failed(job_id, e)
                return
            with self.lock:  # still waiting until `taken` has run: whoever polls `waiting` sees it end
                taken(job_id)
                self._waiting.discard(job_id)
        except Exception as e:  # the service is shutting down (its database or head gone): log, never raise
            log.warning("the background submission of %s ended: %s", job_id, e)
        finally:
            self._waiting.discard(job_id)


def _agent_not_ready(error: Exception) -> bool:
    return "No available agent" in str(error)


class RayJobs:
    """`cpus`: the cluster's fixed size, when known; `process_alive`: whether the head's process runs
    (for a head the service owns), so its death is noticed at once rather than after a timeout."""

    def __init__(
        self,
        address: str,
        headers: dict[str, str] | None = None,
        *,
        cpus: int | None = None,
        process_alive: Callable[[], bool] | None = None,
    ) -> None:
        from ray.job_submission import JobSubmissionClient

        self.address, self.headers = address.rstrip("/"), dict(headers or {})
        self.cpus, self.process_alive = cpus, process_alive
        self.client = JobSubmissionClient(address, headers=headers)

    def capacity(self) -> int | None:
        return self.cpus

    def gone(self) -> bool:
        return self.process_alive is not None and not self.process_alive()

    def alive(self) -> bool:
        if self.gone():
            return False
        request = urllib.request.Request(self.address + "/api/version", headers=self.headers)
        try:
            with urllib.request.urlopen(request, timeout=5) as r:
                return r.status == 200
        except (OSError, urllib.error.URLError):
            return False

    def submit(
        self,
        job_id: str,
        entrypoint: str,
        env: dict[str, str] | None = None,
        *,
        retry_s: float | None = None,
    ) -> None:
        deadline = time.monotonic() + (SUBMIT_RETRY_S if retry_s is None else retry_s)
        wait = 0.5
        dropped = False  # a try whose connection dropped may have created the job after all
        while True:
            try:
                self.client.submit_job(
                    entrypoint=entrypoint,
                    submission_id=job_id,
                    runtime_env={"env_vars": env} if env else None,
                    metadata={"submitted_by": "hdet-service"},
                )
                return
            except RuntimeError as e:  # the agent registers a while after the head answers; the job
                # was not created, so the same submission id is free to try again
                if dropped and "already exists" in str(e):
                    return  # the dropped try had created it
                if not _agent_not_ready(e) or self.gone():
                    raise
                error: Exception = e
            except OSError as e:  # a head just started can drop the connection without an answer
                # (requests' ConnectionError: "Remote end closed connection without response", seen in CI)
                if self.gone():
                    raise
                dropped, error = True, e
            if time.monotonic() + wait > deadline:
                raise AgentNotReady(str(error)) from error
            time.sleep(wait)
            wait = min(wait * 2, 8.0)

    def status(self, job_id: str) -> tuple[str, str]:
        try:
            info = self.client.get_job_info(job_id)
        except RuntimeError as e:
            if "does not exist" in str(e) or "404" in str(e):
                raise UnknownJob(job_id) from None
            raise
        return str(info.status.value), info.message or ""

    def stop(self, job_id: str) -> None:
        self.client.stop_job(job_id)

    def logs(self, job_id: str) -> str:
        try:
            return self.client.get_job_logs(job_id)
        except RuntimeError as e:
            if "does not exist" in str(e) or "404" in str(e):
                raise UnknownJob(job_id) from None
            raise

    def close(self) -> None:
        pass


class MemoryJobs:
    """Records submissions; a job is RUNNING until stopped. Runs no code. `cpus` and `up` play a
    fixed-size cluster and its health for the API tests."""

    def __init__(self, cpus: int | None = None) -> None:
        self._jobs: dict[str, str] = {}
        self.entrypoints: dict[str, str] = {}
        self.envs: dict[str, dict[str, str]] = {}
        self._lock = threading.Lock()
        self.cpus = cpus
        self.up = True

    def capacity(self) -> int | None:
        return self.cpus

    def alive(self) -> bool:
        return self.up

    def gone(self) -> bool:
        return not self.up

    def submit(
        self,
        job_id: str,
        entrypoint: str,
        env: dict[str, str] | None = None,
        *,
        retry_s: float | None = None,
    ) -> None:
        with self._lock:
            self._jobs[job_id] = "RUNNING"
            self.entrypoints[job_id] = entrypoint
            self.envs[job_id] = dict(env or {})

    def status(self, job_id: str) -> tuple[str, str]:
        with self._lock:
            if job_id not in self._jobs:
                raise UnknownJob(job_id)
            return self._jobs[job_id], "memory backend: nothing runs"

    def stop(self, job_id: str) -> None:
        with self._lock:
            self._jobs[job_id] = "STOPPED"

    def finish(self, job_id: str, status: str = "SUCCEEDED") -> None:
        with self._lock:
            self._jobs[job_id] = status

    def logs(self, job_id: str) -> str:
        self.status(job_id)
        return f"{self.entrypoints[job_id]}\nmemory backend: the command above was not run\n"

    def close(self) -> None:
        pass
