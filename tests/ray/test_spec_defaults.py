"""The job spec repeats no default and no check of the core's frozen dataclasses: it reads them there
(so a default the core changes is the spec's default too), and the core's own checks reject bad specs."""

from __future__ import annotations

import dataclasses
import typing

import pytest

from hdet_ray.core.controller import ControllerConfig
from hdet_ray.core.health import HealthConfig
from hdet_ray.core.hyperparams import HyperParam
from hdet_ray.core.spread import SPREAD_KINDS
from hdet_ray.spec import ControllerSpec, Explore, Health, JobSpec, SpecError, core_default


@pytest.mark.parametrize(
    "model, core, names",
    [
        (Explore, HyperParam, ["target", "spread", "size", "scale"]),
        (
            ControllerSpec,
            ControllerConfig,
            [
                "warmup_steps",
                "freeze_after",
                "converge",
                "rollback_cut",
                "max_rollbacks",
                "opening_step_down",
            ],
        ),
        (
            Health,
            HealthConfig,
            [
                "blowup_factor",
                "chance_tolerance",
                "chance_margin",
                "blowup_progress",
                "blowup_noise",
                "stuck_spread",
                "stuck_spread_learned",
                "stuck_windows",
                "regressed_start",
                "replica_learned",
                "stuck_after_blowup",
                "rose_above_start",
                "start_needs_progress",
            ],
        ),
    ],
)
def test_spec_defaults_are_the_cores(model, core, names):
    defaults = {f.name: f.default for f in dataclasses.fields(core)}
    for name in names:
        assert model.model_fields[name].default == defaults[name] == core_default(core, name), name


def test_every_health_setting_of_the_core_can_be_set_in_a_job_spec():
    # chance_loss too, with 'auto' (the task's own) as the spec's default
    assert {f.name for f in dataclasses.fields(HealthConfig)} <= set(Health.model_fields)
    config = Health(stuck_after_blowup=False, replica_learned=False).to_config(2.3)
    assert (
        config.stuck_after_blowup is False and config.replica_learned is False and config.chance_loss == 2.3
    )


def test_core_checks_name_the_field():
    with pytest.raises(SpecError, match=r"explore\.0: .*log spread size \(factor\) must be >= 1, got 0.5"):
        JobSpec.parse({"explore": [{"size": 0.5}]})
    with pytest.raises(SpecError, match=r"explore\.0: .*low <= high"):
        JobSpec.parse({"explore": [{"bounds": [2, 1]}]})
    with pytest.raises(SpecError, match=r"replicas: Input should be a valid integer"):
        JobSpec.parse({"replicas": True})


def test_service_link_reads_its_token_from_exactly_one_place(tmp_path, monkeypatch):
    from hdet_ray.spec import ServiceLink

    (tmp_path / "t").write_text("from-file\n")
    monkeypatch.setenv("HDET_T", "from-env")
    base = {"url": "http://x", "job_id": "j"}
    assert ServiceLink(**base, token_file=str(tmp_path / "t")).read_token() == "from-file"
    assert ServiceLink(**base, token_env="HDET_T").read_token() == "from-env"
    with pytest.raises(ValueError, match="exactly one of token, token_file or token_env"):
        ServiceLink(**base, token="a", token_env="HDET_T")


def test_the_spec_takes_every_spread_kind_the_core_knows():
    allowed = typing.get_args(Explore.model_fields["spread"].annotation)
    assert sorted(allowed) == sorted(SPREAD_KINDS)
    assert Explore(spread="log_below").spread == "log_below"
