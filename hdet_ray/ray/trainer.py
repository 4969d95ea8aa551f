"""The Ray Train worker group: one `TorchTrainer` worker per replica, each running `hdet_ray.loop.Replica`.

Per window every rank calls `on_window`; every `checkpoint_every` windows (and at the end) all ranks call
`ray.train.report` together (it is a barrier in Ray Train V2) with a checkpoint holding each rank's model,
optimizer and scheduler state (`rank<r>.pt`, merged into one directory by Ray) and, from rank 0, the
controller actor's state. A restarted group loads the latest registered checkpoint, and rank 0 tells the
actor to rewind the trajectory to that window and restore that controller state.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import ray
import ray.train
import torch
from ray.train import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
from ray.train.torch import TorchConfig, TorchTrainer

from hdet_ray.core.controller import Decision, Window
from hdet_ray.core.records import WindowRecord
from hdet_ray.loop import Replica
from hdet_ray.spec import JobSpec


class ActorLink:
    """Rank 0's side of the controller actor: exactly one actor call per window."""

    def __init__(self, actor: Any) -> None:
        self.actor = actor
        self.state: dict[str, Any] | None = None
        self.calls = 0

    def decide(self, window: Window, record: WindowRecord) -> Decision:
        self.calls += 1
        decision, self.state = ray.get(self.actor.decide.remote(window, record.to_dict()))
        return decision


def train_loop(config: dict[str, Any]) -> dict[str, Any] | None:
    """The function every Ray Train worker runs."""
    torch.set_num_threads(config.get("torch_threads", 1))
    spec = JobSpec.model_validate(config["spec"])
    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    link = ActorLink(config["actor"])
    replica = Replica.build(spec, rank, world, decide=link.decide)

    checkpoint = ray.train.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as d:
            saved = torch.load(Path(d) / f"rank{rank}.pt", map_location="cpu", weights_only=False)
        replica.load_state_dict(saved["replica"])
        link.state = saved["controller"]
    if rank == 0:
        ray.get(link.actor.begin.remote(replica.scheduler.window, link.state))

    def on_window(r: Replica, record: WindowRecord) -> None:
        windows = r.scheduler.window
        if windows % spec.checkpoint_every and r.step < spec.steps:
            return
        metrics = {
            "window": windows - 1,
            "step": r.step,
            **r.metrics,
            **{f"offset/{k}": v for k, v in r.scheduler.offsets.items()},
        }
        with tempfile.TemporaryDirectory(prefix="hdet-ckpt-") as d:
            torch.save(
                {"replica": r.state_dict(), "controller": link.state if rank == 0 else None},
                Path(d) / f"rank{rank}.pt",
            )
            ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(d))

    final = replica.train(on_window=on_window)
    if rank == 0:
        return {"metrics": final, "windows": replica.scheduler.window, "actor_calls": link.calls}
    return None


def build_trainer(
    spec: JobSpec,
    actor: Any,
    storage_path: str | Path,
    *,
    callbacks: list | None = None,
    cpus_per_worker: float = 1.0,
) -> TorchTrainer:
    """The TorchTrainer of a job: `spec.replicas` workers, gloo (or NCCL with `use_gpu`)."""
    resources = {"CPU": cpus_per_worker} | ({"GPU": 1} if spec.use_gpu else {})
    return TorchTrainer(
        train_loop,
        train_loop_config={"spec": spec.model_dump(mode="json"), "actor": actor},
        torch_config=TorchConfig(
            backend="nccl" if spec.use_gpu else "gloo", timeout_s=spec.collective_timeout_s
        ),
        scaling_config=ScalingConfig(
            num_workers=spec.replicas, use_gpu=spec.use_gpu, resources_per_worker=resources
        ),
        run_config=RunConfig(
            name="train",
            storage_path=str(Path(storage_path).resolve()),
            failure_config=FailureConfig(max_failures=spec.max_failures),
            checkpoint_config=CheckpointConfig(num_to_keep=2),
            callbacks=list(callbacks or []),
        ),
    )
