"""Submit, list, inspect, stop jobs; read their logs."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.responses import PlainTextResponse

from service.api.deps import Authorized, JobDep, StateDep, errors
from service.backends import UnknownJob
from service.jobs import HeadDown, Rejected, redact
from service.models import JobCreate, JobCreated, JobPublic, JobsPage, Links, Progress, Status
from service.storage import Job

router = APIRouter(prefix="/v1/jobs", tags=["jobs"], dependencies=[Authorized])


def links(job_id: str) -> Links:
    base = f"/v1/jobs/{job_id}"
    return Links(
        self=base,
        trajectory=f"{base}/trajectory",
        stream=f"{base}/stream",
        logs=f"{base}/logs",
        stop=f"{base}/stop",
        dashboard=f"/jobs/{job_id}",
    )


def public(state, job: Job) -> JobPublic:
    windows, step, metrics = state.jobs.store.progress(job.id)
    total_steps = int(job.spec.get("steps", 0))
    fraction = min(1.0, (step or 0) / total_steps) if total_steps else 0.0
    if job.status == "SUCCEEDED":
        fraction = 1.0
    return JobPublic(
        id=job.id,
        name=job.name,
        status=job.status,
        message=job.message,
        spec=job.spec,
        progress=Progress(
            windows=windows,
            total_windows=job.total_windows,
            step=step,
            total_steps=total_steps,
            fraction=fraction,
        ),
        latest_metrics=metrics,
        created_at=job.created_at,
        updated_at=job.updated_at,
        finished_at=job.finished_at,
        links=links(job.id),
    )


@router.post("", status_code=201, response_model=JobCreated, responses=errors(400, 413, 503))
def create_job(body: JobCreate, request: Request, state: StateDep) -> JobCreated:
    """Submit a job spec. It runs on Ray as `python -m hdet_ray run --spec-json ...`. A spec that
    could never be scheduled on the cluster (more replicas than a fixed-size cluster has CPUs) is a 422
    naming `replicas`; a cluster that does not answer is a 503. A head not ready to take it yet (no job
    agent, or a dropped connection) gets the job in the background: the answer is at once, PENDING, with the
    reason in the job's message."""
    spec = body.model_dump(mode="json", exclude={"service", "storage_path"})
    public_url = state.settings.public_url or str(request.base_url)
    try:
        job = state.jobs.submit(spec, public_url)
    except Rejected as e:
        raise HTTPException(422, [{"loc": e.loc, "msg": e.msg, "type": "value_error"}]) from None
    except HeadDown as e:
        raise HTTPException(503, str(e)) from None
    return JobCreated(id=job.id, status=job.status, links=links(job.id))


@router.get("", response_model=JobsPage, responses=errors())
def list_jobs(
    state: StateDep,
    status: Status | None = None,
    offset: Annotated[int, Query(ge=0, le=10_000_000)] = 0,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
) -> JobsPage:
    """Jobs, newest first, optionally only those with one status."""
    items, total = state.jobs.store.list_jobs(status, offset, limit)
    return JobsPage(items=[public(state, j) for j in items], total=total, offset=offset, limit=limit)


@router.get("/{job_id}", response_model=JobPublic, responses=errors(404))
def read_job(job: JobDep, state: StateDep) -> JobPublic:
    """The job's spec, Ray status, progress and latest validation metrics."""
    return public(state, job)


@router.post("/{job_id}/stop", response_model=JobPublic, responses=errors(404, 409, 502))
def stop_job(job: JobDep, state: StateDep) -> JobPublic:
    """Ask Ray to stop the job. A job that already ended is a 409."""
    if job.terminal:
        raise HTTPException(409, f"job {job.id} already ended ({job.status}); there is nothing to stop")
    try:
        state.jobs.stop(job)
    except UnknownJob:
        raise HTTPException(409, f"Ray has no record of job {job.id}; it cannot be stopped") from None
    except Exception as e:
        raise HTTPException(502, f"Ray did not accept the stop: {e}") from None
    return public(state, state.jobs.store.get_job(job.id))


@router.get("/{job_id}/logs", response_class=PlainTextResponse, responses=errors(404, 502))
def read_logs(
    job: JobDep,
    state: StateDep,
    tail: Annotated[int | None, Query(ge=1, le=100_000, description="Only the last N lines.")] = None,
) -> PlainTextResponse:
    """The job driver's log, as Ray keeps it."""
    try:
        text = state.jobs.backend.logs(job.id)
    except UnknownJob:
        text = ""
    except Exception as e:
        raise HTTPException(502, f"Ray did not return the logs: {e}") from None
    if tail is not None:
        text = "".join(text.splitlines(keepends=True)[-tail:])
    return PlainTextResponse(redact(text, state.jobs.secrets(job)))
