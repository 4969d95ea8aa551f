"""Ray Tune `PopulationBasedTraining` at the same total worker-steps as one N-replica run.

Four trials, one worker each, all started at the same (mis-set) max rate; every `sync_every` steps a trial
reports its validation metric with a checkpoint and PBT may copy a better trial and perturb its rate
(x0.8 / x1.2, or resample log-uniformly over the oracle grid's range with probability 0.25). The rate
is OneCycle's max rate: a trial that gets a new rate continues the same OneCycle shape from its step.
PBT ranks trials on the validation metric (its usual use); HDET only ever sees training losses.
"""

from __future__ import annotations

import math
import os
import tempfile
import time
import warnings
from typing import Any

import torch


def _build(config: dict[str, Any]):
    """(task, model, optimizer, steps, sync_every, seed) from a job spec (`config["spec"]`) or a quality
    benchmark workload (`config["workload"]`: name, steps, sync_every, seed)."""
    if "workload" in config:
        from benchmarks import workloads

        w = config["workload"]
        task, kind = workloads.build(w["name"])
        model = task.model(int(w["seed"]))
        optimizer = workloads.make_optimizer(kind, model.parameters(), config["lr"] / 25.0, base=kind)
        return task, model, optimizer, int(w["steps"]), int(w["sync_every"]), int(w["seed"])
    from hdet_ray.loop import make_optimizer
    from hdet_ray.spec import JobSpec
    from hdet_ray.tasks import make_task

    spec = JobSpec.parse({**config["spec"], "replicas": 1, "schedule": {"max_lr": config["lr"]}})
    task = make_task(spec.task, **spec.task_options)
    model = task.model(spec.seed)
    return task, model, make_optimizer(spec, model), spec.steps, spec.sync_every, spec.seed


def trainable(config: dict[str, Any]) -> None:
    from ray import tune
    from torch.optim.lr_scheduler import OneCycleLR

    torch.set_num_threads(1)
    task, model, optimizer, steps, sync_every, seed = _build(config)
    step = 0
    checkpoint = tune.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as d:
            state = torch.load(os.path.join(d, "state.pt"), weights_only=False)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        step = state["step"]
    for group in optimizer.param_groups:
        group.pop("initial_lr", None)
    scheduler = OneCycleLR(optimizer, max_lr=config["lr"], total_steps=steps)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # stepping the schedule to `step` without optimizer steps
        for _ in range(step):
            scheduler.step()
    batches = _stream(task, config["member"], seed)
    for _ in range(step):  # the data stream is a pure function of (seed, member, position)
        next(batches)
    while step < steps:
        for _ in range(min(sync_every, steps - step)):
            loss = task.loss(model, next(batches))
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            scheduler.step()
            step += 1
        metric = task.evaluate(model)[task.metric]
        metric = metric if math.isfinite(metric) else 1e9
        with tempfile.TemporaryDirectory() as d:
            torch.save(
                {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step},
                os.path.join(d, "state.pt"),
            )
            tune.report(
                {"metric": metric, "step": step, "lr": config["lr"]},
                checkpoint=tune.Checkpoint.from_directory(d),
            )


def _stream(task, member: int, seed: int):
    """Each trial trains on the whole training set (it is one worker) in its own batch order."""
    from hdet_ray.tasks import Digits

    if isinstance(task, Digits):
        return task.batches(member, 1, seed)  # digits' rank only seeds the order (every rank of 1 sees all)
    return task.batches(0, 1, seed * 7919 + member)  # bytelm's rank picks a shard: vary the order by seed


def run_pbt(
    spec: dict[str, Any],
    start_lr: float,
    lr_range: tuple[float, float],
    members: int,
    storage: str,
    source: str = "spec",
) -> dict[str, Any]:
    """One PBT population (Ray must be initialised); returns the best trial's final metric. `spec` is a job
    spec (`source="spec"`) or a quality workload {name, steps, sync_every, seed} (`source="workload"`)."""
    from ray import tune
    from ray.tune.schedulers import PopulationBasedTraining

    started = time.perf_counter()
    scheduler = PopulationBasedTraining(
        time_attr="training_iteration",
        perturbation_interval=1,
        hyperparam_mutations={"lr": tune.loguniform(*lr_range)},
        quantile_fraction=0.25,
        resample_probability=0.25,
    )
    tuner = tune.Tuner(
        trainable,
        param_space={source: spec, "lr": start_lr, "member": tune.grid_search(list(range(members)))},
        tune_config=tune.TuneConfig(metric="metric", mode="min", scheduler=scheduler, reuse_actors=True),
        # every checkpoint is kept: with num_to_keep, Tune 2.60 fails deleting checkpoints PBT already
        # replaced
        run_config=tune.RunConfig(storage_path=storage, verbose=0),
    )
    grid = tuner.fit()
    finals = [r.metrics.get("metric", math.nan) if r.metrics else math.nan for r in grid]
    best = grid.get_best_result(metric="metric", mode="min", scope="last")
    metric = best.metrics["metric"]
    return {
        "metric": metric if metric < 1e9 else math.nan,
        "diverged": not metric < 1e9,
        "member_metrics": finals,
        "final_lrs": [r.config["lr"] for r in grid],
        "replica_steps": members * spec["steps"],
        "wall_s": time.perf_counter() - started,
        "rollbacks": 0,
        "centres": [],
    }
