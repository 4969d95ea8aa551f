"""The job spec: one pydantic model shared by the CLI, the REST API and the Ray job entrypoint.

Load with `JobSpec.from_file(path)` (YAML or JSON) or `JobSpec.model_validate(dict)`. Invalid input
raises `SpecError`, whose message names each bad field and its allowed range.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import shlex
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, Strict, ValidationError, field_validator, model_validator
from typing_extensions import Self

from hdet_ray.core.controller import DEFAULT_CONTROLLER, ControllerConfig, make_controller
from hdet_ray.core.health import HealthConfig
from hdet_ray.core.hyperparams import HyperParam
from hdet_ray.engine.options import HDETOptions, default_sync_every


class SpecError(ValueError):
    """A job spec that does not validate; `str()` names every bad field."""

    def __init__(self, message: str, errors: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message)
        self.errors = errors or []


Int = Annotated[int, Strict()]
"""An integer field: `true` or `4.0` is an error, not 1 or 4."""

LABEL_CHARS = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
LABEL_MAX = 128


def check_label(value: str, what: str = "name") -> str:
    """A name is a label, never a path: letters, digits, '.', '_', '-', no '..', at most LABEL_MAX chars."""
    if not (0 < len(value) <= LABEL_MAX and LABEL_CHARS.fullmatch(value) and ".." not in value):
        raise ValueError(
            f"{what}: {value[:80]!r} is not a valid name: use 1 to {LABEL_MAX} letters, digits, "
            "'.', '_' or '-', starting with a letter or digit, without '..' or '/'"
        )
    return value


def core_default(cls: type, name: str) -> Any:
    """The default of `cls.name`, a frozen dataclass of the core: the one place each default lives (the
    spec repeats none, so a default changed in the core is the spec's default too)."""
    for f in dataclasses.fields(cls):
        if f.name == name:
            return f.default
    raise KeyError(f"{cls.__name__} has no field {name!r}")


def core_check(build) -> None:
    """Run a core dataclass's own checks (its __post_init__) and report them as the spec's errors."""
    try:
        build()
    except (ValueError, TypeError) as e:
        raise ValueError(str(e)) from None


def check_finite(value: Any, where: str) -> None:
    """Raise ValueError naming the first NaN or infinite number anywhere inside `value` (JSON-like data)."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{where}: {value} is not a finite number")
    if isinstance(value, dict):
        for k, v in value.items():
            check_finite(v, f"{where}.{k}")
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            check_finite(v, f"{where}[{i}]")


class _Model(BaseModel):
    # Finite numbers only: NaN or an overflowed 1e400 would reach the schedule or the database otherwise.
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


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
    target: str = Field(
        core_default(HyperParam, "target"),
        min_length=1,
        max_length=128,
        description="'lr', 'group:<key>' or 'module:<Class>.<attr>'",
    )
    spread: Literal["log_mean1", "log_below", "log", "linear"] = core_default(HyperParam, "spread")
    size: float = Field(
        core_default(HyperParam, "size"),
        ge=0,
        le=1000,
        description="log: factor >= 1; linear: alpha in [0, 1)",
    )
    scale: Literal["log", "linear"] = core_default(HyperParam, "scale")
    bounds: tuple[float, float] | None = None
    groups: list[Int] | None = None

    @model_validator(mode="after")
    def _check(self) -> Explore:
        core_check(self.to_hyperparam)
        return self

    def to_hyperparam(self) -> HyperParam:
        return HyperParam(
            name=self.name,
            target=self.target,
            spread=self.spread,
            size=self.size,
            scale=self.scale,
            bounds=self.bounds,
            groups=tuple(self.groups) if self.groups is not None else None,
        )


class ControllerSpec(_Model):
    """The controller by name and its settings; the defaults and checks are the core's configs'."""

    name: Literal["evidence", "slope", "paper", "hold"] = DEFAULT_CONTROLLER
    warmup_steps: Int = Field(core_default(ControllerConfig, "warmup_steps"), ge=0)
    freeze_after: float | None = Field(core_default(ControllerConfig, "freeze_after"), ge=0, le=1)
    converge: Literal["mean", "fitness", "best"] = core_default(ControllerConfig, "converge")
    rollback_cut: float = Field(core_default(ControllerConfig, "rollback_cut"), gt=0, lt=1)
    rollback_ahead: bool = core_default(ControllerConfig, "rollback_ahead")
    max_rollbacks: Int = Field(core_default(ControllerConfig, "max_rollbacks"), ge=0, le=100)
    opening_step_down: Int = Field(core_default(ControllerConfig, "opening_step_down"), ge=0, le=16)
    momentum: float | None = Field(None, ge=0, lt=1)
    step_size: float | None = Field(None, gt=0)
    clip: float | None = Field(None, gt=0)
    trust_windows: Int | None = Field(None, ge=1, le=100)
    temperature: float | None = Field(None, gt=0)
    z_threshold: float | None = Field(None, gt=0)
    evidence_windows: Int | None = Field(None, ge=1, le=100)
    max_step: float | None = Field(None, gt=0)
    max_step_down: float | None = Field(None, gt=0)
    bias_aware: bool | None = None
    shard_correction: bool | None = None

    @model_validator(mode="after")
    def _check(self) -> ControllerSpec:
        only = {
            "slope": ("clip", "trust_windows"),
            "paper": ("temperature",),
            "evidence": (
                "z_threshold",
                "evidence_windows",
                "max_step",
                "max_step_down",
                "bias_aware",
                "shard_correction",
            ),
        }
        for owner, names in only.items():
            given = [n for n in names if getattr(self, n) is not None]
            if self.name != owner and given:
                raise ValueError(f"{', '.join(given)}: setting(s) of the {owner!r} controller only")
        if self.name == "evidence" and self.momentum is not None:
            raise ValueError("momentum: the 'evidence' controller has none")
        if self.name == "hold" and (self.momentum is not None or self.step_size is not None):
            raise ValueError("the 'hold' controller takes no momentum or step_size")
        core_check(lambda: make_controller(self.name, **self.settings()))
        return self

    def settings(self) -> dict[str, Any]:
        return {k: v for k, v in self.model_dump().items() if k != "name" and v is not None}


class Health(_Model):
    """`hdet_ray.core.health.HealthConfig`, except that the chance loss defaults to the task's own."""

    blowup_factor: float = Field(core_default(HealthConfig, "blowup_factor"), gt=1)
    chance_loss: float | Literal["auto"] | None = Field(
        "auto", description="'auto': the task's chance loss; null: no chance check"
    )
    chance_tolerance: float = Field(core_default(HealthConfig, "chance_tolerance"), ge=0, lt=1)
    chance_margin: float = Field(core_default(HealthConfig, "chance_margin"), ge=0, lt=1)
    blowup_progress: float = Field(core_default(HealthConfig, "blowup_progress"), ge=0, le=1)
    blowup_noise: float = Field(core_default(HealthConfig, "blowup_noise"), ge=0, allow_inf_nan=False)
    stuck_spread: float = Field(core_default(HealthConfig, "stuck_spread"), ge=0, lt=1)
    stuck_spread_learned: float | None = Field(
        core_default(HealthConfig, "stuck_spread_learned"), ge=0, lt=1, description="null: stuck_spread"
    )
    stuck_windows: int = Field(core_default(HealthConfig, "stuck_windows"), ge=1)
    regressed_start: bool = core_default(HealthConfig, "regressed_start")
    best_after_exclusion: bool = core_default(HealthConfig, "best_after_exclusion")
    restored_measured: bool = core_default(HealthConfig, "restored_measured")
    replica_learned: bool = core_default(HealthConfig, "replica_learned")
    stuck_after_blowup: bool = core_default(HealthConfig, "stuck_after_blowup")
    rose_above_start: bool = core_default(HealthConfig, "rose_above_start")
    start_needs_progress: bool = core_default(HealthConfig, "start_needs_progress")
    progress_all_replicas: bool = core_default(HealthConfig, "progress_all_replicas")
    stuck_above_best: float | None = Field(
        core_default(HealthConfig, "stuck_above_best"), gt=1, description="null: off"
    )

    @field_validator("chance_loss")
    @classmethod
    def _positive(cls, v):
        if isinstance(v, float) and not v > 0:
            raise ValueError("chance_loss must be > 0, 'auto' or null")
        return v

    def to_config(self, task_chance: float | None) -> HealthConfig:
        chance = task_chance if self.chance_loss == "auto" else self.chance_loss
        return HealthConfig(
            blowup_factor=self.blowup_factor,
            chance_loss=chance,
            chance_tolerance=self.chance_tolerance,
            chance_margin=self.chance_margin,
            blowup_progress=self.blowup_progress,
            blowup_noise=self.blowup_noise,
            stuck_spread=self.stuck_spread,
            stuck_spread_learned=self.stuck_spread_learned,
            stuck_windows=self.stuck_windows,
            regressed_start=self.regressed_start,
            best_after_exclusion=self.best_after_exclusion,
            restored_measured=self.restored_measured,
            replica_learned=self.replica_learned,
            stuck_after_blowup=self.stuck_after_blowup,
            rose_above_start=self.rose_above_start,
            start_needs_progress=self.start_needs_progress,
            progress_all_replicas=self.progress_all_replicas,
            stuck_above_best=self.stuck_above_best,
        )


class ServiceLink(_Model):
    """Where the controller actor pushes trajectory records (set by the service when it submits).

    The ingest token is a secret: the service passes `token_file` (a file only the job's user can read;
    the embedded head shares the service's disk) or `token_env` (an environment variable of the job, for a
    cluster of its own), so that the token never appears on the job's command line or in its logs."""

    url: str = Field(..., min_length=1, max_length=2048)
    job_id: str = Field(..., min_length=1, max_length=128)
    token: str | None = Field(None, min_length=1, max_length=512, description="The token itself.")
    token_file: str | None = Field(None, min_length=1, max_length=4096, description="A file holding it.")
    token_env: str | None = Field(
        None, pattern=r"^[A-Z_][A-Z0-9_]{0,127}$", description="An environment variable holding it."
    )

    @model_validator(mode="after")
    def _one_token(self) -> ServiceLink:
        given = [k for k in ("token", "token_file", "token_env") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(f"service: give exactly one of token, token_file or token_env (got {given})")
        return self

    def read_token(self) -> str:
        if self.token_env is not None:
            token = os.environ.get(self.token_env)
            if not token:
                raise ValueError(f"service.token_env: the environment has no {self.token_env}")
            return token
        return self.token if self.token is not None else Path(self.token_file).read_text().strip()


class JobSpec(Document):
    """An HDET job: what to train, on how many replicas, how to explore and steer."""

    _what: ClassVar[str] = "job spec"

    name: str | None = Field(
        None,
        description="A label for people (the run's folder under storage_path); "
        "letters, digits, '.', '_', '-', at most 128.",
    )
    task: str = Field(
        "digits",
        min_length=1,
        max_length=256,
        description="A registered task ('digits', 'bytelm') or 'module:function'.",
    )
    task_options: dict[str, Any] = Field(default_factory=dict)
    replicas: Int = Field(4, ge=1, le=1024, description="N, one Ray Train worker (and rank) per replica.")
    use_gpu: bool = False
    steps: Int = Field(400, ge=1, le=10_000_000, description="Optimizer steps per replica.")
    sync_every: Int | None = Field(
        core_default(HDETOptions, "sync_every"),
        ge=1,
        description=(
            "T, steps between syncs; at most `steps`; null: the scheduler's default, steps // 20 clamped "
            "to [1, 25]."
        ),
    )
    fanout: Literal["local", "shared_grad"] = core_default(HDETOptions, "fanout")
    optimizer: Literal["adamw", "sgd"] = "adamw"
    weight_decay: float = Field(0.0, ge=0, le=10)
    schedule: Schedule = Field(default_factory=Schedule)
    explore: list[Explore] = Field(default_factory=lambda: [Explore()], max_length=16)
    auto_lr: bool = core_default(HDETOptions, "auto_lr")
    controller: ControllerSpec = Field(default_factory=ControllerSpec)
    opening_spread: float | None = Field(core_default(HDETOptions, "opening_spread"), ge=1, le=1e6)
    optimizer_state: Literal["average", "keep", "reset"] | None = Field(
        core_default(HDETOptions, "optimizer_state"),
        description="None: 'keep' under shared_grad (identical moments), else 'average'.",
    )
    balanced: bool = core_default(HDETOptions, "balanced")
    health: Health = Field(default_factory=Health)
    validate_every: Int = Field(1, ge=1, description="Validate every this many windows (and at the end).")
    checkpoint_every: Int = Field(1, ge=1, description="Checkpoint every this many windows.")
    seed: Int = Field(core_default(HDETOptions, "seed"), ge=0, le=2**31 - 1)
    storage_path: str | None = Field(None, description="Where runs are written (default ./runs).")
    max_failures: Int = Field(0, ge=0, le=100, description="Worker-group restarts Ray Train may make.")
    collective_timeout_s: Int = Field(60, ge=5, le=3600)
    service: ServiceLink | None = None
    log_to: dict[Literal["tensorboard", "mlflow"], Annotated[str, Field(min_length=1, max_length=2048)]] = (
        Field(
            default_factory=dict,
            description="Also write the trajectory (rank 0, per window) to a TensorBoard "
            "log dir and/or an MLflow tracking URI (hdet_ray.integrations.loggers); use absolute paths.",
        )
    )

    @model_validator(mode="after")
    def _check(self) -> JobSpec:
        if self.sync_every is not None and self.sync_every > self.steps:
            raise ValueError(f"sync_every: must be <= steps ({self.steps}), got {self.sync_every}")
        names = [e.name for e in self.explore]
        if len(set(names)) != len(names):
            raise ValueError(f"explore: names must be unique, got {names}")
        return self

    @field_validator("name")
    @classmethod
    def _label(cls, v: str | None) -> str | None:
        return None if v is None else check_label(v)

    @field_validator("task_options")
    @classmethod
    def _finite_options(cls, v: dict[str, Any]) -> dict[str, Any]:
        check_finite(v, "task_options")
        return v

    @field_validator("task")
    @classmethod
    def _known_task(cls, v: str) -> str:
        from hdet_ray.task_names import registered_names

        if v not in registered_names() and ":" not in v:
            raise ValueError(f"unknown task {v!r}; registered: {registered_names()} or 'module:function'")
        return v

    @property
    def sync_period(self) -> int:
        """`sync_every`, or the scheduler's default when it is null."""
        return self.sync_every if self.sync_every is not None else default_sync_every(self.steps)

    @property
    def total_windows(self) -> int:
        return math.ceil(self.steps / self.sync_period)


def format_errors(e: ValidationError) -> str:
    lines = []
    for err in e.errors():
        loc = ".".join(str(x) for x in err["loc"]) or "(spec)"
        msg = err["msg"].removeprefix("Value error, ")
        lines.append(f"  {loc}: {msg}")
    return "\n".join(lines)


class JobStatus(str, Enum):
    """A job's lifecycle, as the Ray Jobs API names it; the service keeps a job PENDING (with the reason)
    until its first window, also while Ray already runs its entrypoint and the workers wait for CPUs."""

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    STOPPED = "STOPPED"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"


STATUSES = tuple(s.value for s in JobStatus)
TERMINAL = frozenset({JobStatus.SUCCEEDED.value, JobStatus.FAILED.value, JobStatus.STOPPED.value})

ENTRYPOINT = "python -m hdet_ray run --spec-json {spec_json}"
"""The Ray job's command; `{spec_json}` is replaced by the shell-quoted spec."""


def entrypoint(spec_json: str, template: str = ENTRYPOINT, storage_path: str | None = None) -> str:
    """The command a Ray job runs for a spec given as JSON (the only place this command is built)."""
    cmd = template.format(spec_json=shlex.quote(spec_json))
    return cmd + (f" --storage-path {shlex.quote(storage_path)}" if storage_path else "")
