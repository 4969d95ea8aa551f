"""Health and Prometheus metrics (unauthenticated, as probes and scrapers expect)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import PlainTextResponse

from service.api.deps import StateDep
from service.models import Health

router = APIRouter(tags=["system"])


@router.get("/healthz", response_model=Health)
def read_health(state: StateDep) -> Health:
    state.jobs.store.window_count()  # the database answers
    return Health(status="ok", backend=state.backend_name, database=state.jobs.store.engine.dialect.name)


@router.get("/metrics", response_class=PlainTextResponse)
def read_metrics(state: StateDep) -> PlainTextResponse:
    """Jobs by status, windows ingested, open streams, request latency by route (Prometheus text)."""
    text = state.metrics.render(state.jobs.store.count_by_status(), state.jobs.broker.streams)
    return PlainTextResponse(text, media_type="text/plain; version=0.0.4")
