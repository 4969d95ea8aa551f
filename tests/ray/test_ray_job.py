"""HDET jobs on a real local Ray (one per module): TorchTrainer with gloo workers, the controller actor,
the trajectory file, the service push, a killed worker, and HDET jobs as Tune trials."""

from __future__ import annotations

import math

import pytest
from ingest_server import IngestServer

from hdet_ray.ray.trajectory import read_trajectory
from hdet_ray.spec import JobSpec

pytestmark = [pytest.mark.ray, pytest.mark.slow]

BASE = {
    "task": "digits",
    "task_options": {"width": 32, "depth": 1},
    "replicas": 2,
    "steps": 60,
    "sync_every": 10,
    "checkpoint_every": 1,
    "seed": 3,
    "collective_timeout_s": 20,
    "controller": {"name": "slope", "trust_windows": 1},
}


@pytest.fixture(scope="module")
def clean_run(local_ray, tmp_path_factory):
    from hdet_ray.ray import run_job

    server = IngestServer(token="tok", fail_first=2)
    spec = JobSpec.parse(
        {**BASE, "name": "clean", "service": {"url": server.url, "job_id": "j-clean", "token": "tok"}}
    )
    result = run_job(spec, storage_path=tmp_path_factory.mktemp("runs"), progress=False)
    yield result, server
    server.close()


def _losses(records):
    return [
        (r["window"], r["losses"], {k: v for k, v in r["metrics"].items() if k != "elapsed_s"})
        for r in records
    ]


def test_run_writes_one_record_per_window_and_one_decision_each(clean_run):
    result, _ = clean_run
    records = read_trajectory(result.run_dir / "trajectory.jsonl")
    assert [r["window"] for r in records] == list(range(6))
    assert result.records == 6
    calls = result.summary["actor"]["calls"]
    assert calls == {"begin": 1, "decide": 6, "finalize": 1}  # exactly one decide per window
    assert all(len(r["losses"]) == 2 and len(r["weights"]) == 2 for r in records)
    assert records[-1]["metrics"]["val_loss"] == pytest.approx(result.metrics["val_loss"])
    assert result.metrics["val_loss"] < math.log(10)  # it learned something
    assert (result.run_dir / "spec.json").exists() and (result.run_dir / "summary.json").exists()
    assert [t["window"] for t in result.summary["base_trajectory"]] == list(range(6))
    assert result.worker_seconds > 0


def test_service_receives_every_record_once_per_window(clean_run):
    result, server = clean_run
    records = read_trajectory(result.run_dir / "trajectory.jsonl")
    pushed = server.by_job["j-clean"]
    assert sorted(pushed) == list(range(6))
    assert pushed[5] == records[5]  # the final metric's re-send replaced the first version
    assert result.summary["actor"]["unsent"] == 0
    assert all(r["path"] == "/v1/jobs/j-clean/ingest" for r in server.requests)


def test_killed_worker_restarts_from_checkpoint_without_gaps(clean_run, tmp_path):
    from hdet_ray.ray import run_job

    clean, _ = clean_run
    marker = tmp_path / "killed"
    spec = JobSpec.parse(
        {
            **BASE,
            "name": "faulty",
            "max_failures": 1,
            "task": "faulty_task:kill_once",
            "task_options": {**BASE["task_options"], "kill_rank": 1, "kill_step": 35, "marker": str(marker)},
        }
    )
    result = run_job(spec, storage_path=tmp_path / "runs", progress=False)
    assert marker.exists()  # the worker really died
    records = read_trajectory(result.run_dir / "trajectory.jsonl")
    assert [r["window"] for r in records] == list(range(6))  # no gap, no duplicate
    restores = result.summary["actor"]["restores"]
    assert len(restores) == 1 and 1 <= restores[0]["window"] <= 3
    assert restores[0]["state"] == restores[0]["recorded"]  # controller state == its state at the checkpoint
    assert result.summary["actor"]["calls"]["begin"] == 2
    assert result.summary["actor"]["calls"]["decide"] == 6 + (3 - restores[0]["window"])
    # the re-run windows reproduce the clean run exactly (same data stream, same restored state)
    assert _losses(records) == _losses(read_trajectory(clean.run_dir / "trajectory.jsonl"))


def test_tuner_runs_two_hdet_trials_with_different_widths(local_ray, tmp_path):
    from ray import tune

    from hdet_ray.ray.tune import hdet_trainable

    spec = {**BASE, "name": "tuned", "steps": 30, "checkpoint_every": 3}
    trainable = tune.with_resources(
        hdet_trainable(spec, cpus_per_worker=0.5, storage_path=str(tmp_path)), {"cpu": 0.5}
    )
    tuner = tune.Tuner(
        trainable,
        param_space={"task_options.width": tune.grid_search([8, 64])},
        tune_config=tune.TuneConfig(metric="val_loss", mode="min"),
        run_config=tune.RunConfig(storage_path=str(tmp_path / "tune"), name="widths"),
    )
    results = tuner.fit()
    assert not results.errors
    by_width = {r.config["task_options.width"]: r.metrics for r in results}
    assert set(by_width) == {8, 64}
    for m in by_width.values():
        assert 0 < m["val_loss"] < 5 and 0 <= m["val_accuracy"] <= 1 and m["step"] == 30
    assert by_width[8]["val_loss"] != by_width[64]["val_loss"]
    runs = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("tuned-"))
    assert len(runs) == 2
    for name in runs:
        assert [r["window"] for r in read_trajectory(tmp_path / name / "trajectory.jsonl")] == [0, 1, 2]
