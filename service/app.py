"""The app factory: `create_app(settings)` builds a fresh app (tests build their own); nothing is built
at import time. The lifespan opens the database, connects to Ray (RAY_ADDRESS, or an embedded head it
owns), and follows every job not yet finished. On shutdown an embedded head that still runs jobs is
left running (the next start on the same data directory adopts it), so a routine restart loses no window."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import math
import sys

import anyio
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.staticfiles import StaticFiles

from service.api.deps import State
from service.api.routes import dashboard, jobs, studies, study_pages, system, tasks, trajectory
from service.backends import JobBackend, MemoryJobs, RayJobs
from service.events import Broker
from service.jobs import JobService, load_or_create_token
from service.metrics import BodyLimitMiddleware, Metrics, TimingMiddleware
from service.ray_head import EmbeddedHead
from service.settings import Settings
from service.storage import Store
from service.studies import StudyService

log = logging.getLogger("hdet.service")


def create_app(settings: Settings | None = None, backend: JobBackend | None = None) -> FastAPI:
    """`backend` replaces the one `settings` would choose (tests pass a `MemoryJobs` they control)."""
    settings = settings or Settings()
    metrics = Metrics()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        token, new = load_or_create_token(settings)
        if new:
            print(
                f"hdet: generated the API token (shown once; kept in {settings.data_dir / 'token'}):\n"
                f"  {token}",
                file=sys.stderr,
                flush=True,
            )
        store = await anyio.to_thread.run_sync(Store, settings.db_url)
        # The task registry (and torch) is loaded now, not by the first submission's request.
        await anyio.to_thread.run_sync(importlib.import_module, "hdet_ray.tasks")
        head = None
        chosen, name = backend, "custom"
        if chosen is None and settings.backend == "memory":
            chosen, name = MemoryJobs(), "memory"
        elif chosen is None and settings.ray_address:
            chosen, name = RayJobs(settings.ray_address), f"ray:{settings.ray_address}"
        elif chosen is None:
            head = EmbeddedHead(settings.data_dir, settings.ray_num_cpus)
            info = await anyio.to_thread.run_sync(head.start)
            chosen = RayJobs(
                info.dashboard_url,
                headers={"Authorization": f"Bearer {head.token}"},
                cpus=head.num_cpus,
                process_alive=head.alive,
            )
            name = f"ray-embedded:{info.dashboard_url}"
        broker = Broker()
        broker.bind(asyncio.get_running_loop())
        service = JobService(settings, store, chosen, broker, metrics)
        app.state.hdet = State(
            settings=settings, token=token, jobs=service, metrics=metrics, backend_name=name
        )
        app.state.ray_head = head
        app.state.studies = StudyService(store, chosen, settings.data_dir)
        follower = asyncio.create_task(service.follow())
        try:
            yield
        finally:
            follower.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await follower
            chosen.close()
            if head is not None:
                active = await anyio.to_thread.run_sync(store.active_jobs)
                if active and settings.head_on_exit == "keep-if-jobs" and head.alive():
                    log.warning(
                        "leaving the Ray head (pid %s) running for %d unfinished job(s); the next "
                        "service on %s adopts it",
                        head.info.pid if head.info else "?",
                        len(active),
                        settings.data_dir,
                    )
                    head.release()
                else:
                    await anyio.to_thread.run_sync(head.stop)
            store.close()

    app = FastAPI(
        title="hdet-ray service",
        version="0.1.0",
        lifespan=lifespan,
        description="Submit HDET jobs to Ray, follow their live hyperparameter trajectory.",
    )
    for module in (jobs, trajectory, studies, tasks, system, dashboard, study_pages):
        app.include_router(module.router)
    app.mount("/static", StaticFiles(packages=[("service", "static")]), name="static")
    app.add_exception_handler(RequestValidationError, _invalid_request)
    app.add_middleware(BodyLimitMiddleware, limit=settings.max_body_bytes)
    app.add_middleware(TimingMiddleware, metrics=metrics)
    return app


async def _invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
    """422 naming each bad field. The offending input is echoed only when it is plain JSON: a NaN or
    an overflowed 1e400 cannot be written back as JSON (FastAPI's own handler answers 500 then)."""
    detail = []
    for err in exc.errors():
        item = {
            "loc": list(err.get("loc", ())),
            "msg": str(err.get("msg", "")),
            "type": str(err.get("type", "")),
        }
        value = err.get("input")
        if (
            isinstance(value, (str, int, bool))
            or value is None
            or (isinstance(value, float) and math.isfinite(value))
        ):
            item["input"] = value if not isinstance(value, str) else value[:200]
        elif isinstance(value, float):
            item["input"] = str(value)
        detail.append(item)
    return JSONResponse({"detail": detail}, status_code=422)
