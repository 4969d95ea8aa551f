"""The dashboard's pages. The token travels in an HttpOnly cookie set by the login form, never in a URL."""

from __future__ import annotations

import html
import secrets
from importlib.resources import files
from urllib.parse import parse_qs

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from service.api.deps import COOKIE, StateDep

router = APIRouter(include_in_schema=False)
_TEMPLATES = files("service") / "templates"


def _page(name: str, **values: str) -> str:
    text = (_TEMPLATES / name).read_text()
    for key, value in values.items():
        text = text.replace("{{" + key + "}}", html.escape(value))
    return text


def _signed_in(request: Request, state) -> bool:
    given = request.cookies.get(COOKIE, "")
    return bool(given) and secrets.compare_digest(given.encode(), state.token.encode())


@router.get("/", response_class=HTMLResponse)
def dashboard_jobs(request: Request, state: StateDep) -> Response:
    if not _signed_in(request, state):
        return RedirectResponse("/login", status_code=303)
    return HTMLResponse(_page("jobs.html"))


@router.get("/jobs/{job_id}", response_class=HTMLResponse)
def dashboard_job(job_id: str, request: Request, state: StateDep) -> Response:
    if not _signed_in(request, state):
        return RedirectResponse("/login", status_code=303)
    return HTMLResponse(_page("job.html", job_id=job_id[:64]))


@router.get("/login", response_class=HTMLResponse)
def login_form() -> HTMLResponse:
    return HTMLResponse(_page("login.html", error=""))


@router.post("/login")
async def login(request: Request, state: StateDep) -> Response:
    form = parse_qs((await request.body()).decode("utf-8", "replace"))
    token = (form.get("token") or [""])[0].strip()
    if not token or not secrets.compare_digest(token.encode(), state.token.encode()):
        return HTMLResponse(_page("login.html", error="That token is not right."), status_code=403)
    response = RedirectResponse("/", status_code=303)
    response.set_cookie(
        COOKIE, token, httponly=True, samesite="strict", path="/", secure=request.url.scheme == "https"
    )
    return response


@router.post("/logout")
def logout() -> Response:
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(COOKIE, path="/")
    return response
