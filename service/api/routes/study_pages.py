"""The dashboard's study page (`/studies/{id}`); the studies list is on `/` beside the jobs."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from service.api.deps import StateDep
from service.api.routes.dashboard import _page, _signed_in

router = APIRouter(include_in_schema=False)


@router.get("/studies/{study_id}", response_class=HTMLResponse)
def dashboard_study(study_id: str, request: Request, state: StateDep) -> Response:
    if not _signed_in(request, state):
        return RedirectResponse("/login", status_code=303)
    return HTMLResponse(_page("study.html", study_id=study_id[:64]))
