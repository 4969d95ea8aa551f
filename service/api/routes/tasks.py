"""The tasks a job may name: the built-ins and those installed packages register (`hdet_ray.tasks`)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, Field

from hdet_ray.tasks import describe, registered_names
from service.api.deps import Authorized, errors

router = APIRouter(prefix="/v1/tasks", tags=["tasks"], dependencies=[Authorized])


class TaskPublic(BaseModel):
    name: str = Field(description="What `task` in a job spec names.")
    description: str
    source: str = Field(description="'built-in', or the entry point that registers it.")
    options: dict[str, Any] = Field(description="JSON schema of the job spec's `task_options` for this task.")
    error: str | None = Field(None, description="Why a registered plugin cannot be used (it does not load).")


class TasksList(BaseModel):
    items: list[TaskPublic]


@router.get("", response_model=TasksList, responses=errors())
def list_tasks() -> TasksList:
    """Every task `POST /v1/jobs` accepts, with the schema of its options."""
    return TasksList(items=[_public(name) for name in registered_names()])


def _public(name: str) -> TaskPublic:
    try:
        return TaskPublic(**describe(name))
    except ValueError as e:  # a broken plugin is listed with its error; the others still are
        return TaskPublic(name=name, description="", source="entry point", options={}, error=str(e))
