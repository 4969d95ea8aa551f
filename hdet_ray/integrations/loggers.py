"""`on_record` adapters: each window's trajectory to TensorBoard and MLflow.

    scheduler = HDETOneCycleLR(optimizer, ..., on_record=TensorBoardRecorder("runs/tb"))
    scheduler = HDETOneCycleLR(optimizer, ..., on_record=MLflowRecorder("file:///tmp/mlruns", run_name="lm"))

Both write `record_scalars(record)` at the window's step: per explored hyperparameter the centre, base,
offset and every replica's value and multiplier; every replica's window loss; rollback/acted flags; and
the metrics the loop attached (validation). A job spec's `log_to` makes the Ray layer do the same.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping

from hdet_ray.core.records import WindowRecord

OnRecord = Callable[[WindowRecord], None]


def record_scalars(record: WindowRecord) -> dict[str, float]:
    """One window as flat scalar tags (non-finite values left out):

    `hdet/<param>/{center,base,offset}`, `hdet/<param>/value/replica_<r>`,
    `hdet/<param>/multiplier/replica_<r>`, `hdet/loss/replica_<r>`, `hdet/loss/mean` (healthy replicas),
    `hdet/rollback`, `hdet/acted`, `hdet/metric/<name>`.
    """
    out: dict[str, float] = {}
    for name, p in record.params.items():
        out[f"hdet/{name}/center"] = p.center if p.center is not None else p.base
        out[f"hdet/{name}/base"] = p.base
        out[f"hdet/{name}/offset"] = p.new_offset
        for r, (value, mult) in enumerate(zip(p.values, p.multipliers, strict=True)):
            out[f"hdet/{name}/value/replica_{r}"] = value
            out[f"hdet/{name}/multiplier/replica_{r}"] = mult
    for r, loss in enumerate(record.losses):
        out[f"hdet/loss/replica_{r}"] = loss
    kept = [x for x, ok in zip(record.losses, record.healthy, strict=True) if ok and math.isfinite(x)]
    if kept:
        out["hdet/loss/mean"] = sum(kept) / len(kept)
    out["hdet/rollback"] = float(record.rollback)
    out["hdet/acted"] = float(record.acted)
    for key, value in record.metrics.items():
        out[f"hdet/metric/{key}"] = value
    return {k: float(v) for k, v in out.items() if v is not None and math.isfinite(v)}


def _last(record: WindowRecord) -> bool:
    return record.step >= record.total_steps


class TensorBoardRecorder:
    """Writes every window's scalars with a `SummaryWriter` (flushed per window, closed after the last)."""

    def __init__(self, log_dir: str) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.log_dir = log_dir
        self.writer = SummaryWriter(log_dir=log_dir)

    def __call__(self, record: WindowRecord) -> None:
        for tag, value in record_scalars(record).items():
            self.writer.add_scalar(tag, value, global_step=record.step)
        self.writer.flush()
        if _last(record):
            self.close()

    def close(self) -> None:
        self.writer.close()


class MLflowRecorder:
    """Logs every window's scalars to one MLflow run (found by `run_name` in `experiment`, else created;
    a restarted job continues the same run) and marks it FINISHED after the last window."""

    def __init__(self, tracking_uri: str, experiment: str = "hdet", run_name: str = "hdet") -> None:
        from mlflow import MlflowClient

        self.client = MlflowClient(tracking_uri=tracking_uri)
        found = self.client.get_experiment_by_name(experiment)
        experiment_id = found.experiment_id if found else self.client.create_experiment(experiment)
        quoted = run_name.replace("'", "")  # the filter's string literal cannot hold a quote
        runs = self.client.search_runs(
            [experiment_id], filter_string=f"tags.mlflow.runName = '{quoted}'", max_results=1
        )
        self.run_id = (
            runs[0].info.run_id
            if runs
            else self.client.create_run(experiment_id, run_name=run_name).info.run_id
        )

    def __call__(self, record: WindowRecord) -> None:
        from mlflow.entities import Metric

        stamp = int(time.time() * 1000)
        self.client.log_batch(
            self.run_id,
            metrics=[Metric(tag, value, stamp, record.step) for tag, value in record_scalars(record).items()],
        )
        if _last(record):
            self.close()

    def close(self) -> None:
        self.client.set_terminated(self.run_id, "FINISHED")


def recorders(log_to: Mapping[str, str], run_name: str, then: OnRecord | None = None) -> OnRecord | None:
    """The `on_record` a job spec's `log_to` asks for ({'tensorboard': log_dir, 'mlflow': tracking_uri}),
    followed by `then`."""
    chain: list[OnRecord] = []
    if "tensorboard" in log_to:
        chain.append(TensorBoardRecorder(log_to["tensorboard"]))
    if "mlflow" in log_to:
        chain.append(MLflowRecorder(log_to["mlflow"], run_name=run_name))
    if then is not None:
        chain.append(then)
    if not chain:
        return None

    def on_record(record: WindowRecord) -> None:
        for fn in chain:
            fn(record)

    return on_record
