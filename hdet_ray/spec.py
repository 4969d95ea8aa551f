"""The job spec: one pydantic model shared by the CLI, the REST API and the Ray job entrypoint.

Load with `JobSpec.from_file(path)` (YAML or JSON) or `JobSpec.model_validate(dict)`. Invalid input
raises `SpecError`, whose message names each bad field and its allowed range.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from typing_extensions import Self

from hdet_ray.core.health import HealthConfig
from hdet_ray.core.hyperparams import HyperParam


class SpecError(ValueError):
    """A job spec that does not validate; `str()` names every bad field."""

    def __init__(self, message: str, errors: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message)
        self.errors = errors or []


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Document(_Model):
    """A top-level definition read from YAML or JSON (a job spec, a study): errors name the field."""

    _what: ClassVar[str] = "document"
    _error: ClassVar[type[SpecError]] = SpecError

    @classmethod
    def from_file(cls, path: str | Path) -> Self:
        path = Path(path)
        try:
            text = path.read_text()
        except OSError as e:
            raise cls._error(f"cannot read {cls._what} {path}: {e.strerror}") from None
        return cls.from_text(text, source=str(path))

    @classmethod
    def from_text(cls, text: str, source: str | None = None) -> Self:
        import yaml

        source = source or f"<{cls._what}>"
        try:
            data = json.loads(text) if text.lstrip().startswith("{") else yaml.safe_load(text)
        except (json.JSONDecodeError, yaml.YAMLError) as e:
            raise cls._error(f"{source}: not valid YAML/JSON: {e}") from None
        return cls.parse(data, source)

    @classmethod
    def parse(cls, data: Any, source: str | None = None) -> Self:
        source = source or f"<{cls._what}>"
        if not isinstance(data, dict):
            raise cls._error(f"{source}: a {cls._what} is a mapping of fields, got {type(data).__name__}")
        try:
            return cls.model_validate(data)
        except ValidationError as e:
            raise cls._error(f"{source}: invalid {cls._what}:\n" + format_errors(e), e.errors()) from None


class Schedule(_Model):
    """OneCycleLR's arguments, with its defaults."""

    max_lr: float = Field(0.01, gt=0, description="Peak learning rate of the base schedule.")
    pct_start: float = Field(0.3, ge=0, le=1)
    anneal_strategy: Literal["cos", "linear"] = "cos"
    cycle_momentum: bool = True
    base_momentum: float = Field(0.85, ge=0, lt=1)
    max_momentum: float = Field(0.95, ge=0, lt=1)
    div_factor: float = Field(25.0, gt=0)
    final_div_factor: float = Field(1e4, gt=0)
    three_phase: bool = False


class Explore(_Model):
    """One explored hyperparameter (see `hdet_ray.core.hyperparams.HyperParam`)."""

    name: str = Field("lr", min_length=1, max_length=64)
    target: str = Field("lr", min_length=1, max_length=128,
                        description="'lr', 'group:<key>' or 'module:<Class>.<attr>'")
    spread: Literal["log", "linear"] = "log"
    size: float = Field(2.0, ge=0, le=1000, description="log: factor >= 1; linear: alpha in [0, 1)")
    scale: Literal["log", "linear"] = "log"
    bounds: tuple[float, float] | None = None
    groups: list[int] | None = None

    @model_validator(mode="after")
    def _check(self) -> Explore:
        if self.spread == "log" and self.size < 1:
            raise ValueError(f"size: a log spread's factor must be >= 1 (got {self.size}); 1 means no spread")
        if self.spread == "linear" and not self.size < 1:
            raise ValueError(f"size: a linear spread's alpha must be in [0, 1) (got {self.size})")
        if self.bounds is not None and self.bounds[0] > self.bounds[1]:
            raise ValueError(f"bounds: low must be <= high (got {self.bounds})")
        return self

    def to_hyperparam(self) -> HyperParam:
        return HyperParam(name=self.name, target=self.target, spread=self.spread, size=self.size,
                          scale=self.scale, bounds=self.bounds,
                          groups=tuple(self.groups) if self.groups is not None else None)


class ControllerSpec(_Model):
    name: Literal["slope", "paper", "hold"] = "slope"
    warmup_steps: int = Field(0, ge=0)
    freeze_after: float | None = Field(None, ge=0, le=1)
    converge: Literal["mean", "fitness", "best"] = "mean"
    rollback_cut: float = Field(0.5, gt=0, lt=1)
    max_rollbacks: int = Field(3, ge=0, le=100)
    opening_step_down: int = Field(1, ge=0, le=16)
    momentum: float | None = Field(None, ge=0, lt=1)
    step_size: float | None = Field(None, ge=0)
    clip: float | None = Field(None, gt=0)
    trust_windows: int | None = Field(None, ge=1, le=100)
    temperature: float | None = Field(None, gt=0)

    @model_validator(mode="after")
    def _check(self) -> ControllerSpec:
        if self.name != "slope" and (self.clip is not None or self.trust_windows is not None):
            raise ValueError("clip and trust_windows are settings of the 'slope' controller only")
        if self.name != "paper" and self.temperature is not None:
            raise ValueError("temperature is a setting of the 'paper' controller only")
        if self.name == "hold" and (self.momentum is not None or self.step_size is not None):
            raise ValueError("the 'hold' controller takes no momentum or step_size")
        return self

    def settings(self) -> dict[str, Any]:
        return {k: v for k, v in self.model_dump().items() if k != "name" and v is not None}


class Health(_Model):
    blowup_factor: float = Field(2.0, gt=1)
    chance_loss: float | Literal["auto"] | None = Field(
        "auto", description="'auto': the task's chance loss; null: no chance check")
    chance_tolerance: float = Field(0.03, ge=0, lt=1)
    chance_margin: float = Field(0.1, ge=0, lt=1)

    @field_validator("chance_loss")
    @classmethod
    def _positive(cls, v):
        if isinstance(v, float) and not v > 0:
            raise ValueError("chance_loss must be > 0, 'auto' or null")
        return v

    def to_config(self, task_chance: float | None) -> HealthConfig:
        chance = task_chance if self.chance_loss == "auto" else self.chance_loss
        return HealthConfig(blowup_factor=self.blowup_factor, chance_loss=chance,
                            chance_tolerance=self.chance_tolerance, chance_margin=self.chance_margin)


class ServiceLink(_Model):
    """Where the controller actor pushes trajectory records (set by the service when it submits)."""

    url: str = Field(..., min_length=1, max_length=2048)
    job_id: str = Field(..., min_length=1, max_length=128)
    token: str = Field(..., min_length=1, max_length=512)


class JobSpec(Document):
    """An HDET job: what to train, on how many replicas, how to explore and steer."""

    _what: ClassVar[str] = "job spec"

    name: str | None = Field(None, max_length=128)
    task: str = Field("digits", min_length=1, max_length=256,
                      description="A registered task ('digits', 'bytelm') or 'module:function'.")
    task_options: dict[str, Any] = Field(default_factory=dict)
    replicas: int = Field(4, ge=1, le=1024, description="N, one Ray Train worker (and rank) per replica.")
    use_gpu: bool = False
    steps: int = Field(400, ge=1, le=10_000_000, description="Optimizer steps per replica.")
    sync_every: int = Field(25, ge=1, description="T, steps between syncs; at most `steps`.")
    fanout: Literal["local", "shared_grad"] = "shared_grad"
    optimizer: Literal["adamw", "sgd"] = "adamw"
    weight_decay: float = Field(0.0, ge=0, le=10)
    schedule: Schedule = Field(default_factory=Schedule)
    explore: list[Explore] = Field(default_factory=lambda: [Explore()], max_length=16)
    auto_lr: bool = True
    controller: ControllerSpec = Field(default_factory=ControllerSpec)
    opening_spread: float | None = Field(None, ge=1, le=1e6)
    optimizer_state: Literal["average", "keep", "reset"] | None = Field(
        None, description="None: 'keep' under shared_grad (identical moments), else 'average'.")
    balanced: bool = False
    health: Health = Field(default_factory=Health)
    validate_every: int = Field(1, ge=1, description="Validate every this many windows (and at the end).")
    checkpoint_every: int = Field(1, ge=1, description="Checkpoint every this many windows.")
    seed: int = Field(0, ge=0, le=2**31 - 1)
    storage_path: str | None = Field(None, description="Where runs are written (default ./runs).")
    max_failures: int = Field(0, ge=0, le=100, description="Worker-group restarts Ray Train may make.")
    collective_timeout_s: int = Field(60, ge=5, le=3600)
    service: ServiceLink | None = None
    log_to: dict[Literal["tensorboard", "mlflow"], Annotated[str, Field(min_length=1, max_length=2048)]] = Field(
        default_factory=dict, description="Also write the trajectory (rank 0, per window) to a TensorBoard "
        "log dir and/or an MLflow tracking URI (hdet_ray.integrations.loggers); use absolute paths.")

    @model_validator(mode="after")
    def _check(self) -> JobSpec:
        if self.sync_every > self.steps:
            raise ValueError(f"sync_every: must be <= steps ({self.steps}), got {self.sync_every}")
        names = [e.name for e in self.explore]
        if len(set(names)) != len(names):
            raise ValueError(f"explore: names must be unique, got {names}")
        return self

    @field_validator("task")
    @classmethod
    def _known_task(cls, v: str) -> str:
        from hdet_ray.tasks import registered_names

        if v not in registered_names() and ":" not in v:
            raise ValueError(f"unknown task {v!r}; registered: {registered_names()} or 'module:function'")
        return v

    @property
    def total_windows(self) -> int:
        return math.ceil(self.steps / self.sync_every)


def format_errors(e: ValidationError) -> str:
    lines = []
    for err in e.errors():
        loc = ".".join(str(x) for x in err["loc"]) or "(spec)"
        msg = err["msg"].removeprefix("Value error, ")
        lines.append(f"  {loc}: {msg}")
    return "\n".join(lines)

