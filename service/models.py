"""Request and response models of the REST API, one per use (Create / Public)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from hdet_ray.core.records import WindowRecord
from hdet_ray.spec import Int, JobSpec, JobStatus, check_finite

Status = JobStatus


class JobCreate(JobSpec):
    """A job spec as a client may send it: registered tasks only (the API never runs code it is sent),
    and no `service` or `storage_path` (the service sets both) or `log_to` (paths on the cluster). Importing
    this module loads no torch: the task registry is read when a request is validated."""

    task: str = Field(
        "digits", min_length=1, max_length=256, description="A registered task (GET /v1/tasks)."
    )
    storage_path: None = Field(None, description="Set by the service.")
    service: None = Field(None, description="Set by the service.")
    log_to: dict[str, str] = Field(
        default_factory=dict,
        max_length=0,
        description="Not over REST (paths on the cluster); the service keeps the trajectory.",
    )

    @field_validator("task")
    @classmethod
    def _registered(cls, v: str) -> str:
        from hdet_ray.task_names import registered_names

        if v not in registered_names():
            raise ValueError(f"{v!r} is not a registered task; registered: {registered_names()}")
        return v

    @field_validator("task_options")
    @classmethod
    def _options(cls, v: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        from hdet_ray.tasks import check_options

        if "task" in info.data:  # a bad task is reported on its own
            check_options(info.data["task"], v)
        return v


class Error(BaseModel):
    detail: str


class Links(BaseModel):
    self: str
    trajectory: str
    stream: str
    logs: str
    stop: str
    dashboard: str


class Progress(BaseModel):
    windows: int = Field(description="Windows stored.")
    total_windows: int
    step: int | None = Field(description="Step of the latest stored window.")
    total_steps: int
    fraction: float = Field(ge=0, le=1)


class JobPublic(BaseModel):
    id: str
    name: str | None
    status: Status
    message: str
    spec: dict[str, Any]
    progress: Progress
    latest_metrics: dict[str, float | None]
    created_at: str
    updated_at: str
    finished_at: str | None
    links: Links


class JobCreated(BaseModel):
    id: str
    status: Status
    links: Links


class JobsPage(BaseModel):
    items: list[JobPublic]
    total: int
    offset: int
    limit: int


class Trajectory(BaseModel):
    job_id: str
    records: list[dict[str, Any]] = Field(description="WindowRecord.to_dict() of each window, by window.")
    next_after: int = Field(description="Pass as `after` to get the windows stored since.")


class IngestRecord(BaseModel):
    """A WindowRecord.to_dict(); checked field by field against the record's shape."""

    model_config = ConfigDict(extra="allow", allow_inf_nan=False)
    window: Int = Field(ge=0, le=10_000_000)
    step: Int = Field(ge=0, le=2**62)

    def to_record(self) -> dict[str, Any]:
        data = self.model_dump()
        check_finite(data, "record")  # JSON has no NaN; Python's parser lets it through
        WindowRecord.from_dict(data)  # raises on a wrong shape
        return data


class IngestBatch(BaseModel):
    records: list[IngestRecord] = Field(max_length=10_000)

    @field_validator("records")
    @classmethod
    def _shape(cls, records: list[IngestRecord]) -> list[IngestRecord]:
        for i, r in enumerate(records):
            try:
                r.to_record()
            except (TypeError, KeyError, ValueError, AttributeError) as e:
                raise ValueError(f"records[{i}] is not a WindowRecord: {e}") from None
        return records


class IngestResult(BaseModel):
    received: int
    changed: int


class Health(BaseModel):
    status: Literal["ok", "unavailable"]
    backend: str
    database: str
    ray: Literal["ok", "down", "n/a"] = Field(
        description="Whether the Ray head answers ('n/a': memory backend)."
    )
