"""Settings from the environment (prefix `HDET_`, plus Ray's own `RAY_ADDRESS`)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from hdet_ray.spec import ENTRYPOINT


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="HDET_", extra="ignore")

    token: str | None = Field(
        None,
        min_length=16,
        description=(
            "The API's bearer token. Unset: generated at first start, kept in <data_dir>/token and "
            "printed once."
        ),
    )
    data_dir: Path = Field(
        Path("hdet-data"), description="Database, tokens, run storage, the embedded Ray's files."
    )
    database_url: str | None = Field(
        None, description="SQLAlchemy URL; default sqlite:///<data_dir>/hdet.db."
    )
    ray_address: str | None = Field(
        None,
        validation_alias=AliasChoices("RAY_ADDRESS", "HDET_RAY_ADDRESS"),
        description="Ray dashboard address (http://host:8265); unset: embedded head.",
    )
    backend: Literal["ray", "memory"] = Field(
        "ray",
        description=(
            "'memory' records jobs without running them (records arrive only through ingest): for API tests "
            "and load tests."
        ),
    )
    public_url: str | None = Field(None, description="The URL Ray jobs reach this service at (for ingest).")
    entrypoint: str = Field(ENTRYPOINT, description="The Ray job's command; {spec_json} is quoted.")
    ray_num_cpus: int | None = Field(
        None,
        ge=1,
        description=(
            "CPUs the embedded head offers (default: the machine's, at least 4; CPU workers may share "
            "cores). A job with more replicas than this is refused (422)."
        ),
    )
    ingest_token_via: Literal["auto", "file", "env"] = Field(
        "auto",
        description=(
            "How a job receives its ingest token: 'file' (runs/<id>/ingest-token, mode 0600: the cluster "
            "must share the data directory, as the embedded head does), 'env' (the job's environment, set "
            "through the Ray Jobs API's runtime_env: visible to holders of the Ray cluster's token); "
            "'auto': 'env' with RAY_ADDRESS, else 'file'."
        ),
    )
    head_on_exit: Literal["keep-if-jobs", "stop"] = Field(
        "keep-if-jobs",
        description=(
            "On shutdown, 'keep-if-jobs' leaves the embedded head running while it has unfinished jobs "
            "(the next start adopts it, so a restart loses no window); 'stop' always ends it."
        ),
    )
    max_body_bytes: int = Field(4 * 1024 * 1024, ge=1024, description="Larger request bodies get 413.")
    poll_interval_s: float = Field(2.0, gt=0, le=60, description="How often job status is read from Ray.")
    sse_keepalive_s: float = Field(15.0, gt=0, le=300)

    @property
    def db_url(self) -> str:
        return self.database_url or f"sqlite:///{self.data_dir.resolve() / 'hdet.db'}"
