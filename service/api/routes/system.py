"""Health and Prometheus metrics (unauthenticated, as probes and scrapers expect)."""

from __future__ import annotations

import anyio
from fastapi import APIRouter
from fastapi.responses import JSONResponse, PlainTextResponse

from service.api.deps import StateDep
from service.models import Health

router = APIRouter(tags=["system"])


@router.get(
    "/healthz", response_model=Health, responses={503: {"model": Health, "description": "Ray is down"}}
)
async def read_health(state: StateDep):
    """200 when the database and the Ray head answer; 503 (with `ray: down`) when the head is gone."""
    await anyio.to_thread.run_sync(state.jobs.store.window_count)  # the database answers
    ray_ok = await anyio.to_thread.run_sync(state.jobs.backend.alive)
    ray = ("ok" if ray_ok else "down") if state.backend_name != "memory" else "n/a"
    health = Health(
        status="ok" if ray_ok else "unavailable",
        backend=state.backend_name,
        database=state.jobs.store.engine.dialect.name,
        ray=ray,
    )
    return health if ray_ok else JSONResponse(health.model_dump(), status_code=503)


@router.get("/metrics", response_class=PlainTextResponse)
def read_metrics(state: StateDep) -> PlainTextResponse:
    """Jobs by status, windows ingested, open streams, request latency by route (Prometheus text)."""
    text = state.metrics.render(state.jobs.store.count_by_status(), state.jobs.broker.streams)
    return PlainTextResponse(text, media_type="text/plain; version=0.0.4")
