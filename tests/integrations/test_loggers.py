"""The trajectory reaches TensorBoard and MLflow: written by the `on_record` adapters, read back with
TensorBoard's own `EventAccumulator` and `mlflow.MlflowClient` on a local file store."""

from __future__ import annotations

import math

import pytest

from hdet_ray.core.records import ParamRecord, WindowRecord
from hdet_ray.integrations.loggers import MLflowRecorder, TensorBoardRecorder, record_scalars

pytest.importorskip("tensorboard")
pytest.importorskip("mlflow")


@pytest.fixture
def file_store(tmp_path, monkeypatch):
    """A local `file://` MLflow store (MLflow 3 asks for this opt-in; `sqlite:///` needs none but costs
    ~15 s of schema migrations here)."""
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    return (tmp_path / "mlruns").as_uri()


def window(w: int, total_windows: int = 3) -> WindowRecord:
    """Window w of a 3-replica run, 10 steps a window; replica 2 dies in window 1."""
    losses = [1.0 / (w + 1), 1.5 / (w + 1), math.nan if w == 1 else 2.0 / (w + 1)]
    return WindowRecord(
        window=w,
        step=10 * (w + 1),
        total_steps=10 * total_windows,
        losses=losses,
        start_loss=2.0,
        healthy=[True, True, w != 1],
        excluded=[2] if w == 1 else [],
        reasons={"2": "nan"} if w == 1 else {},
        weights=[0.5, 0.5, 0.0] if w == 1 else [1 / 3] * 3,
        acted=w == 2,
        params={
            "lr": ParamRecord(
                base=0.1,
                offset=0.0,
                new_offset=0.1 * w,
                center=0.1 * math.exp(0.1 * w),
                multipliers=[0.5, 1.0, 2.0],
                values=[0.05, 0.1, 0.2],
            )
        },
        metrics={"val_loss": 3.0 - w} if w else {},
    )


def test_record_scalars_by_hand():
    s = record_scalars(window(1))
    assert s["hdet/lr/center"] == pytest.approx(0.1 * math.exp(0.1))
    assert s["hdet/lr/offset"] == pytest.approx(0.1)
    assert [s[f"hdet/lr/value/replica_{r}"] for r in range(3)] == [0.05, 0.1, 0.2]
    assert [s[f"hdet/lr/multiplier/replica_{r}"] for r in range(3)] == [0.5, 1.0, 2.0]
    assert s["hdet/loss/replica_0"] == 0.5 and "hdet/loss/replica_2" not in s  # NaN is left out
    assert s["hdet/loss/mean"] == pytest.approx((0.5 + 0.75) / 2)  # healthy replicas only
    assert s["hdet/metric/val_loss"] == 2.0 and s["hdet/acted"] == 0.0 and s["hdet/rollback"] == 0.0


def test_tensorboard_reads_back(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    rec = TensorBoardRecorder(str(tmp_path / "tb"))
    for w in range(3):
        rec(window(w))
    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    tags = events.Tags()["scalars"]
    assert "hdet/lr/value/replica_2" in tags and "hdet/metric/val_loss" in tags
    centre = events.Scalars("hdet/lr/center")
    assert [e.step for e in centre] == [10, 20, 30]
    assert [e.value for e in centre] == pytest.approx([0.1 * math.exp(0.1 * w) for w in range(3)], rel=1e-6)
    assert [e.step for e in events.Scalars("hdet/loss/replica_2")] == [10, 30]  # window 1's NaN not written
    assert [e.value for e in events.Scalars("hdet/acted")] == [0.0, 0.0, 1.0]


def test_mlflow_reads_back_and_a_restart_continues_the_run(file_store):
    from mlflow import MlflowClient

    uri = file_store
    first = MLflowRecorder(uri, experiment="exp", run_name="job-1")
    first(window(0))
    again = MLflowRecorder(uri, experiment="exp", run_name="job-1")  # a restarted worker group
    assert again.run_id == first.run_id
    for w in (1, 2):
        again(window(w))
    client = MlflowClient(tracking_uri=uri)
    run = client.get_run(first.run_id)
    assert run.info.status == "FINISHED" and run.data.tags["mlflow.runName"] == "job-1"
    history = sorted(client.get_metric_history(first.run_id, "hdet/lr/value/replica_1"), key=lambda m: m.step)
    assert [(m.step, m.value) for m in history] == [(10, 0.1), (20, 0.1), (30, 0.1)]
    losses = sorted(client.get_metric_history(first.run_id, "hdet/loss/replica_0"), key=lambda m: m.step)
    assert [m.value for m in losses] == pytest.approx([1.0, 0.5, 1 / 3])


def test_job_spec_log_to_writes_both_from_the_loop(tmp_path, file_store):
    """The Ray layer's per-replica loop (here rank 0 of one replica) honours the spec's `log_to`."""
    from mlflow import MlflowClient
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from hdet_ray.loop import Replica
    from hdet_ray.spec import JobSpec, SpecError

    uri = file_store
    spec = JobSpec.parse(
        {
            "name": "logged",
            "task": "digits",
            "task_options": {"width": 16},
            "replicas": 1,
            "steps": 30,
            "sync_every": 10,
            "log_to": {"tensorboard": str(tmp_path / "tb"), "mlflow": uri},
        }
    )
    replica = Replica.build(spec, 0, 1)
    replica.train()
    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    losses = events.Scalars("hdet/loss/replica_0")
    assert [e.step for e in losses] == [10, 20, 30]
    assert [e.value for e in losses] == pytest.approx(
        [r.losses[0] for r in replica.scheduler.records], rel=1e-6
    )
    client = MlflowClient(tracking_uri=uri)
    (run,) = client.search_runs([client.get_experiment_by_name("hdet").experiment_id])
    assert run.data.tags["mlflow.runName"] == "logged" and run.info.status == "FINISHED"
    assert run.data.metrics["hdet/metric/val_loss"] == pytest.approx(
        replica.scheduler.records[-1].metrics["val_loss"]
    )
    with pytest.raises(SpecError, match="log_to"):
        JobSpec.parse({"log_to": {"wandb": "x"}})
