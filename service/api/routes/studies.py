"""Staged-promotion studies: submit one (it runs on Ray as `hdet promote`), list, inspect, read its record."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, HTTPException, Path, Query, Request
from fastapi.responses import FileResponse, PlainTextResponse
from pydantic import BaseModel, Field

from hdet_ray.promotion.protocol import Study
from service.api.deps import Authorized, errors
from service.models import Status
from service.studies import StudyRejected, StudyRow, StudyService

router = APIRouter(prefix="/v1/studies", tags=["studies"], dependencies=[Authorized])


class StudyLinks(BaseModel):
    self: str
    record_md: str
    record_png: str
    dashboard: str


class StudyPublic(BaseModel):
    id: str
    name: str
    status: Status = Field(description="The Ray job's status.")
    message: str
    executor: Literal["inprocess", "run_job"]
    definition: dict[str, Any] = Field(description="The study as submitted, defaults included.")
    record: dict[str, Any] | None = Field(
        description="record.json once the runner has written it: cells, "
        "decisions, budget; `record.status` is 'finished' at the end."
    )
    created_at: str
    updated_at: str
    finished_at: str | None
    links: StudyLinks


class StudySummary(BaseModel):
    id: str
    name: str
    status: Status
    message: str
    created_at: str
    finished_at: str | None
    winner: str | None = Field(description="The last stage's winner, once decided.")
    links: StudyLinks


class StudyCreated(BaseModel):
    id: str
    status: Status
    links: StudyLinks


class StudiesPage(BaseModel):
    items: list[StudySummary]
    total: int
    offset: int
    limit: int


def get_studies(request: Request) -> StudyService:
    """The app's study service (made by the lifespan, on the job service's database and backend)."""
    return request.app.state.studies


Studies = Annotated[StudyService, Depends(get_studies)]
StudyId = Annotated[str, Path(min_length=1, max_length=64, description="The study's id.")]


def get_study(study_id: StudyId, studies: Studies) -> StudyRow:
    row = studies.get(study_id)
    if row is None:
        raise HTTPException(404, f"no study {study_id!r}")
    return studies.refresh(row)


StudyDep = Annotated[StudyRow, Depends(get_study)]


def links(study_id: str) -> StudyLinks:
    base = f"/v1/studies/{study_id}"
    return StudyLinks(
        self=base,
        record_md=f"{base}/record.md",
        record_png=f"{base}/record.png",
        dashboard=f"/studies/{study_id}",
    )


def winner(record: dict[str, Any] | None, row: StudyRow) -> str | None:
    last = row.definition["stages"][-1]["name"]
    return ((record or {}).get("decisions") or {}).get(last, {}).get("winner")


@router.post("", status_code=201, response_model=StudyCreated, responses=errors(400, 413))
def create_study(
    body: Study,
    studies: Studies,
    executor: Annotated[
        Literal["inprocess", "run_job"],
        Query(description="inprocess: one-replica cells as Ray tasks; run_job: each cell a full job"),
    ] = "inprocess",
) -> StudyCreated:
    """Submit a study definition (the `hdet promote` file, as JSON). It runs on Ray as
    `python -m hdet_ray promote --study-json ...`; bad input is a 422 naming the field."""
    try:
        row = studies.submit(body, executor)
    except StudyRejected as e:
        raise HTTPException(422, [{"loc": e.loc, "msg": e.msg, "type": "value_error"}]) from None
    return StudyCreated(id=row.id, status=row.status, links=links(row.id))


@router.get("", response_model=StudiesPage, responses=errors())
def list_studies(
    studies: Studies,
    offset: Annotated[int, Query(ge=0, le=10_000_000)] = 0,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
) -> StudiesPage:
    """Studies, newest first."""
    rows, total = studies.list(offset, limit)
    items = []
    for row in rows:
        row = studies.refresh(row)
        items.append(
            StudySummary(
                id=row.id,
                name=row.name,
                status=row.status,
                message=row.message,
                created_at=row.created_at,
                finished_at=row.finished_at,
                winner=winner(studies.record(row), row),
                links=links(row.id),
            )
        )
    return StudiesPage(items=items, total=total, offset=offset, limit=limit)


@router.get("/{study_id}", response_model=StudyPublic, responses=errors(404))
def read_study(study: StudyDep, studies: Studies) -> StudyPublic:
    """The study's status and, once written, its decision record (record.json)."""
    return StudyPublic(
        id=study.id,
        name=study.name,
        status=study.status,
        message=study.message,
        executor=study.executor,
        definition=study.definition,
        record=studies.record(study),
        created_at=study.created_at,
        updated_at=study.updated_at,
        finished_at=study.finished_at,
        links=links(study.id),
    )


def _record_file(study: StudyRow, studies: StudyService, name: str):
    path = studies.record_file(study, name)
    if path is None:
        raise HTTPException(
            404, f"study {study.id} has no {name} yet (it is written when the study finishes)"
        )
    return path


@router.get(
    "/{study_id}/record.md",
    response_class=PlainTextResponse,
    responses={
        200: {"content": {"text/markdown": {}}, "description": "The readable decision record."},
        **errors(404),
    },
)
def read_study_markdown(study: StudyDep, studies: Studies) -> PlainTextResponse:
    """The decision record as Markdown (written when the study finishes)."""
    path = _record_file(study, studies, "record.md")
    return PlainTextResponse(path.read_text(), media_type="text/markdown; charset=utf-8")


@router.get(
    "/{study_id}/record.png",
    response_class=FileResponse,
    responses={
        200: {"content": {"image/png": {}}, "description": "Metric vs budget per candidate."},
        **errors(404),
    },
)
def read_study_plot(study: StudyDep, studies: Studies) -> FileResponse:
    """The record's plot: metric vs budget per candidate, mean +- std over cells."""
    return FileResponse(_record_file(study, studies, "record.png"), media_type="image/png")
