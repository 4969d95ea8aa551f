"""Dependencies shared by the routes: the app's state, the API token, the per-job ingest token."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, HTTPException, Path, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from service.jobs import JobService, token_hash
from service.metrics import Metrics
from service.settings import Settings
from service.storage import Job

COOKIE = "hdet_token"
bearer = HTTPBearer(auto_error=False, description="The service's API token (HDET_TOKEN).")
ingest_bearer = HTTPBearer(
    auto_error=False,
    scheme_name="IngestToken",
    description="The job's own ingest token (in the file spec.service.token_file).",
)


@dataclass
class State:
    settings: Settings
    token: str
    jobs: JobService
    metrics: Metrics
    backend_name: str


def get_state(request: Request) -> State:
    return request.app.state.hdet


StateDep = Annotated[State, Depends(get_state)]
Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]
IngestCredentials = Annotated[HTTPAuthorizationCredentials | None, Depends(ingest_bearer)]
JobId = Annotated[str, Path(min_length=1, max_length=64, description="The job's id.")]


def require_token(request: Request, state: StateDep, creds: Credentials) -> None:
    """401 without a token, 403 with a wrong one. Reads (GET) also accept the dashboard's cookie."""
    given = creds.credentials if creds else None
    if given is None and request.method in ("GET", "HEAD"):
        given = request.cookies.get(COOKIE)
    if not given:
        raise HTTPException(401, "missing bearer token", headers={"WWW-Authenticate": "Bearer"})
    if not secrets.compare_digest(given.encode(), state.token.encode()):
        raise HTTPException(403, "wrong token")


def get_job(job_id: JobId, state: StateDep) -> Job:
    job = state.jobs.store.get_job(job_id)
    if job is None:
        raise HTTPException(404, f"no job {job_id!r}")
    return job


def require_ingest_token(job_id: JobId, state: StateDep, creds: IngestCredentials) -> Job:
    """The job's own token: 401 without one, 403 when wrong or the job is unknown (no probing of ids)."""
    if creds is None or not creds.credentials:
        raise HTTPException(401, "missing bearer token", headers={"WWW-Authenticate": "Bearer"})
    job = state.jobs.store.get_job(job_id)
    if job is None or not secrets.compare_digest(token_hash(creds.credentials), job.ingest_token_hash):
        raise HTTPException(403, "wrong ingest token for this job")
    return job


Authorized = Depends(require_token)
JobDep = Annotated[Job, Depends(get_job)]
IngestJob = Annotated[Job, Depends(require_ingest_token)]


def errors(*codes: int) -> dict[int | str, dict]:
    """OpenAPI entries for the error responses a route can give (all are `{"detail": str}`)."""
    from service.models import Error

    # Spelled out, not `model=`: routes whose success is text (logs, stream) still answer errors in JSON.
    content = {"application/json": {"schema": Error.model_json_schema()}}
    return {
        code: {"description": _REASONS.get(code, "Error"), "content": content} for code in (401, 403, *codes)
    }


_REASONS = {
    400: "Malformed body",
    401: "No token",
    403: "Wrong token",
    404: "No such job",
    409: "The job already ended",
    413: "Body too large",
    502: "Ray failed",
    503: "Ray is down",
}
