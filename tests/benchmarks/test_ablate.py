"""benchmarks.ablate's parsing of variants and cells, and its trace, on the stored benchmark runs (no run)."""

import pytest
import torch

from benchmarks import ablate, workloads
from hdet_ray import HealthConfig


def test_a_variant_is_default_or_a_name_with_json_options():
    assert ablate.parse_variant("default") == ("default", {})
    assert ablate.parse_variant('w={"explore": [{"name": "lr", "size": 1.0}]}') == (
        "w",
        {"explore": [{"name": "lr", "size": 1.0}]},
    )
    for bad in ("nameonly", "w=[1]", "w={not json"):
        with pytest.raises(SystemExit, match="variant"):
            ablate.parse_variant(bad)


def test_a_cell_finds_its_start_from_the_stored_oracle_and_names_a_bad_cell():
    cell = ablate.Cell("lm/short/high")
    assert cell.k == cell.best + 2
    job = cell.job(0, "v", {"auto_lr": False})
    assert job["key"] == "lm/short/high/0/v" and job["hdet"] == {"auto_lr": False} and job["arm"] == "hdet"
    assert cell.stored_key(0, "hdet") in cell.stored  # the shipped default's run of this cell
    fixed = cell.job(7, ablate.FIXED, {"ignored": 1}, arm="fixed")
    assert fixed["arm"] == "fixed" and "hdet" not in fixed and fixed["max_lr"] == job["max_lr"]
    # fresh seeds (none stored): the oracle stays the benchmark's, over its stored seeds
    assert cell.oracle([7, 8]) == cell.oracle([0, 1, 2]) and cell.oracle([0]) != cell.oracle([0, 1, 2])
    held_out = ablate.Cell("lm_sgd/oracle")
    assert held_out.job(1, "v", {})["steps"] == held_out.job(1, "w", {})["steps"]
    with pytest.raises(SystemExit, match="start must be one of"):
        ablate.Cell("lm/short/middle")
    with pytest.raises(SystemExit, match="cell must be"):
        ablate.Cell("nope/oracle")


def test_a_variants_jobs_share_its_options_but_a_run_does_not_write_into_them():
    # the jobs of one variant hold the same dict, and a spawned worker unpickles the job list with that
    # sharing kept: a run that filled in its cell's sync period there once gave the issue cells' 25 to the
    # quality cells (10) of the same variant, later in the same invocation
    settings: dict = {}
    jobs = [ablate.Cell(c).job(0, "v", settings) for c in ("issue/mlp/oracle", "mlp/short/oracle")]
    assert jobs[0]["hdet"] is jobs[1]["hdet"]
    options = workloads.hdet_options(jobs[0]["hdet"])
    options.setdefault("sync_every", jobs[0]["sync_every"])
    assert settings == {} and options == {"sync_every": 25}
    explored = {"explore": [{"name": "lr", "size": 1.0}]}
    assert workloads.hdet_options(explored) is not explored and "sync_every" not in explored
    health = workloads.hdet_options({"health": {"regressed_start": False}})["health"]
    assert health == HealthConfig(regressed_start=False)
    # a variant's job-level fields go to the job, not to the scheduler's options
    job = ablate.Cell("issue/mlp/high").job(0, "ddp", {"job": {"ddp": True}, "auto_lr": False})
    assert job["ddp"] is True and job["hdet"] == {"auto_lr": False}


def test_the_trace_marks_moves_rollbacks_and_signs():
    def record(offset, new, signal, rollback=False, excluded=()):
        lr = {"offset": offset, "new_offset": new, "signal": signal}
        return {"rollback": rollback, "excluded": list(excluded), "params": {"lr": lr}}

    run = {
        "records": [
            record(0, 0, 0.3),
            record(0, 0.25, 0.4),
            record(0.25, 0.25, -0.1),
            record(0.25, -0.4, None, rollback=True),
            record(-0.4, -0.4, None, excluded=[2]),
            record(-0.4, -0.4, None),
            record(-0.4, -0.9, -0.2),
        ],
        "centres": [1.0, 0.5],
    }
    assert ablate.trace(run) == "+U-Rx.D 0.50x"


def test_a_perturbation_changes_the_last_digits_the_same_way_for_the_same_seed():
    task, _ = workloads.build("mlp")
    a, b, c, plain = (task.model(0) for _ in range(4))
    workloads.perturb_(a, 1e-6, 1)
    workloads.perturb_(b, 1e-6, 1)
    workloads.perturb_(c, 1e-6, 2)
    for pa, pb, pc, p in zip(a.parameters(), b.parameters(), c.parameters(), plain.parameters(), strict=True):
        assert torch.equal(pa, pb)  # every rank draws the same change
        changed = (pa - p).abs()
        assert changed.max() > 0 and not torch.equal(pa, pc)
        assert (changed <= 1e-5 * p.abs() + 1e-12).all()  # a relative change, in the sixth digit


def test_ablate_with_nothing_to_run_names_the_options(capsys):
    with pytest.raises(SystemExit):
        ablate.main(["--cells", "mlp/short/oracle"])
    assert "give a variant, --fixed or --perturbed" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        ablate.main(["--perturbed", "-1", "--cells", "mlp/short/oracle"])
    assert "--perturbed must be >= 0, got -1" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        ablate.main(["default", "--perturb-variants", "--cells", "mlp/short/oracle"])
    assert "--perturb-variants needs --perturbed K and at least one variant" in capsys.readouterr().err


class _Stop(Exception):
    pass


def _jobs_of(monkeypatch, argv: list[str]) -> list[dict]:
    """The jobs `ablate.main(argv)` would run (it stops at run_jobs)."""
    seen: list[dict] = []

    def capture(fn, jobs, replicas, out):
        seen.extend(jobs)
        raise _Stop

    monkeypatch.setattr(ablate, "run_jobs", capture)
    with pytest.raises(_Stop):
        ablate.main(argv)
    return seen


def test_perturbed_variants_run_each_draw_with_its_own_seed(monkeypatch, tmp_path):
    argv = ["default", "--perturbed", "2", "--perturb-variants", "--cells", "mlp/short/oracle"]
    seen = _jobs_of(monkeypatch, [*argv, "--seeds", "3", "--out", str(tmp_path / "runs.jsonl")])
    draws = {j["key"]: j.get("perturb_seed") for j in seen}
    assert draws == {
        "mlp/short/oracle/3/default~1": 1,
        "mlp/short/oracle/3/default~2": 2,
        f"mlp/short/oracle/3/{ablate.PERTURBED}1": 1,
        f"mlp/short/oracle/3/{ablate.PERTURBED}2": 2,
    }
    assert all(j["perturb"] == 1e-6 for j in seen)


def test_job_fields_reach_every_run_fixed_ones_too(monkeypatch, tmp_path, capsys):
    argv = ["default", "--fixed", "--job", '{"clip": 1.0}', "--cells", "mlp/short/oracle", "--seeds", "3"]
    seen = _jobs_of(monkeypatch, [*argv, "--out", str(tmp_path / "runs.jsonl")])
    assert {j["key"]: j["clip"] for j in seen} == {
        "mlp/short/oracle/3/default": 1.0,
        f"mlp/short/oracle/3/{ablate.FIXED}": 1.0,
    }
    with pytest.raises(SystemExit):
        ablate.main(["default", "--job", "[1]", "--cells", "mlp/short/oracle"])
    assert "--job must be a JSON object, got [1]" in capsys.readouterr().err
