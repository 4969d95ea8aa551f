"""The trajectory: window records as JSON, a live Server-Sent Events stream, and the ingest endpoint."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Annotated

import anyio
from fastapi import APIRouter, Header, HTTPException, Query
from fastapi.responses import StreamingResponse

from service.api.deps import Authorized, IngestJob, JobDep, StateDep, errors
from service.models import IngestBatch, IngestResult, Trajectory

router = APIRouter(prefix="/v1/jobs", tags=["trajectory"])
_BATCH = 500


@router.get(
    "/{job_id}/trajectory", response_model=Trajectory, responses=errors(404), dependencies=[Authorized]
)
def read_trajectory(
    job: JobDep,
    state: StateDep,
    after: Annotated[int, Query(ge=-1, le=10_000_000, description="Only windows > after.")] = -1,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 10_000,
) -> Trajectory:
    """Window records with index > `after`, by window index, each window once."""
    records = state.jobs.store.windows_after(job.id, after, limit)
    return Trajectory(job_id=job.id, records=records, next_after=records[-1]["window"] if records else after)


STREAM_DOC = """Server-Sent Events: `event: window` with a record as `data` and the job's revision as `id`;
`event: end` once the job has ended and every window was sent. A window that is re-run (after a
worker-group restart) and comes out different is sent again with a newer id; clients keep the latest
record per window. To resume, send the last id you saw as `Last-Event-ID` (EventSource does this)
or as `last_event_id`."""


@router.get(
    "/{job_id}/stream",
    description=STREAM_DOC,
    responses={
        **errors(404),
        200: {"content": {"text/event-stream": {"schema": {}}}, "description": "An event stream."},
    },
    response_class=StreamingResponse,
    dependencies=[Authorized],
)
async def stream_trajectory(
    job: JobDep,
    state: StateDep,
    last_event_id_header: Annotated[int | None, Header(alias="Last-Event-ID", ge=0, le=2**62)] = None,
    last_event_id: Annotated[int | None, Query(ge=0, le=2**62)] = None,
    max_seconds: Annotated[
        float | None, Query(gt=0, le=86_400, description="Close the stream after this long.")
    ] = None,
) -> StreamingResponse:
    start = last_event_id_header if last_event_id_header is not None else (last_event_id or 0)
    events = _events(state, job.id, start, max_seconds)
    return StreamingResponse(
        events,
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


async def _events(state, job_id: str, seq: int, max_seconds: float | None):
    store, keepalive = state.jobs.store, state.settings.sse_keepalive_s
    deadline = time.monotonic() + max_seconds if max_seconds else None
    yield "retry: 2000\n\n"
    with state.jobs.broker.subscribe(job_id) as wake:
        while True:
            wake.clear()
            job = await anyio.to_thread.run_sync(store.get_job, job_id)
            changes = await anyio.to_thread.run_sync(store.changes_after, job_id, seq, _BATCH)
            for revision, record in changes:
                seq = revision
                yield f"id: {revision}\nevent: window\ndata: {json.dumps(record)}\n\n"
            if len(changes) == _BATCH:
                continue
            if job is None or (job.terminal and not changes):
                status = job.status if job else "DELETED"
                yield f"event: end\ndata: {json.dumps({'status': status})}\n\n"
                return
            wait = keepalive if deadline is None else min(keepalive, deadline - time.monotonic())
            if wait <= 0:
                return
            try:
                await asyncio.wait_for(wake.wait(), wait)
            except asyncio.TimeoutError:
                yield ": keepalive\n\n"


@router.post("/{job_id}/ingest", response_model=IngestResult, responses=errors(400, 409, 413))
def ingest_records(body: IngestBatch, job: IngestJob, state: StateDep) -> IngestResult:
    """Where the job's controller actor pushes window records (its own bearer token). Idempotent:
    a record replaces the stored one of the same window while the job runs (a window re-run after a
    worker-group restart); once the job has ended its trajectory is closed (409). Window indexes are
    below the job's window count (422)."""
    if job.terminal:
        raise HTTPException(409, f"job {job.id} already ended ({job.status}); its trajectory is closed")
    records = [r.to_record() for r in body.records]
    for i, r in enumerate(records):
        if r["window"] >= job.total_windows:
            raise HTTPException(
                422,
                [
                    {
                        "loc": ["body", "records", i, "window"],
                        "type": "value_error",
                        "msg": f"window {r['window']} is out of range: this job has "
                        f"{job.total_windows} windows (0 to {job.total_windows - 1})",
                    }
                ],
            )
    return IngestResult(received=len(records), changed=state.jobs.ingest(job, records))
