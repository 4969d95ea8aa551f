"""Ray Tune and HDET: a Searcher that runs fan-out/converge across trials, and HDET jobs as Tune trials.

HDETSearcher, on any function trainable:

    from ray import tune
    from hdet_ray.ray.tune import HDETSearcher

    def objective(config):
        tune.report({"loss": (math.log(config["lr"]) - math.log(3e-3)) ** 2})

    searcher = HDETSearcher(center={"lr": 0.1}, population=4, spread=4.0)
    tuner = tune.Tuner(objective, param_space={"width": 64},
                       tune_config=tune.TuneConfig(search_alg=searcher, metric="loss", mode="min",
                                                   num_samples=24))
    tuner.fit()
    searcher.center            # -> about {"lr": 3e-3}

HDET jobs as trials (Ray Train V2: a function trainable that builds and fits the TorchTrainer, with
`TuneReportCallback` forwarding each report; Tune searches what HDET cannot, such as model width, spread
or sync period, while HDET explores the rate inside each trial):

    from hdet_ray.ray.tune import hdet_trainable
    trainable = hdet_trainable(JobSpec.from_file("examples/specs/digits.yaml").model_dump(mode="json"))
    tuner = tune.Tuner(trainable, param_space={"task_options.width": tune.grid_search([32, 128])},
                       tune_config=tune.TuneConfig(metric="val_loss", mode="min"))
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ray import tune
from ray.tune.search import Searcher

from hdet_ray.ray.search import GenerationSearch
from hdet_ray.spec import JobSpec


class HDETSearcher(Searcher):
    """Proposes generations of `population` trials spread around a centre and moves the centre.

    Args:
        center: the searched keys and their starting values (log scale, > 0), e.g. {"lr": 0.1}.
        population: trials per generation (the replicas of the across-trials HDET).
        spread: the log-spread factor of a generation (trials at centre * spread**z, z in [-1, 1]).
        controller: 'vertex' (default), or any core controller name ('slope', 'paper') or instance.
        shrink: after a move that stays inside the spread, log(spread) is multiplied by this.
        generations: stop after this many generations (None: let `num_samples` stop it).
        metric, mode: as every Tune searcher (or from `TuneConfig`).
    Keys of the Tuner's `param_space` not searched here are passed through unchanged.
    `save`/`restore` keep the centre, spread, controller state and the results of an unfinished
    generation; its missing trials are proposed again after a restore.
    """

    def __init__(
        self,
        center: Mapping[str, float],
        *,
        population: int = 4,
        spread: float = 4.0,
        controller: str = "vertex",
        shrink: float = 0.5,
        generations: int | None = None,
        seed: int = 0,
        metric: str | None = None,
        mode: str | None = None,
        **controller_settings: Any,
    ) -> None:
        super().__init__(metric=metric, mode=mode)
        self.search = GenerationSearch(
            center,
            population=population,
            spread=spread,
            controller=controller,
            shrink=shrink,
            seed=seed,
            **controller_settings,
        )
        self.generations = generations
        self._fixed: dict[str, Any] = {}
        self._slots: dict[str, tuple[int, int]] = {}  # trial id -> (generation, slot)

    # -- Tune's protocol -------------------------------------------------------------------------------
    def set_search_properties(self, metric, mode, config, **spec) -> bool:
        if metric and not self._metric:
            self._metric = metric
        if mode and not self._mode:
            self._mode = mode
        self._fixed = {k: v for k, v in (config or {}).items() if k not in self.search.base}
        return True

    def suggest(self, trial_id: str) -> dict[str, Any] | str | None:
        g = self.search.generation
        if self.generations is not None and g.index >= self.generations:
            return Searcher.FINISHED
        taken = {s for gen, s in self._slots.values() if gen == g.index} | set(g.results)
        free = [s for s in range(self.search.population) if s not in taken]
        if not free:
            return None  # wait for the generation's results
        self._slots[trial_id] = (g.index, free[0])
        return {**copy.deepcopy(self._fixed), **self.search.proposal(free[0])}

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        slot = self._slots.pop(trial_id, None)
        if slot is None or slot[0] != self.search.generation.index:
            return
        value = (result or {}).get(self._metric) if not error else None
        loss = math.inf if value is None or not math.isfinite(value) else float(value)
        self.search.report(slot[1], loss if self._mode != "max" else -loss)

    # -- state -----------------------------------------------------------------------------------------
    @property
    def center(self) -> dict[str, float]:
        return self.search.center

    @property
    def history(self) -> list[dict[str, Any]]:
        return self.search.history

    def get_state(self) -> dict[str, Any]:
        return {
            "search": self.search.to_dict(),
            "generations": self.generations,
            "fixed": self._fixed,
            "metric": self._metric,
            "mode": self._mode,
        }

    def set_state(self, state: dict[str, Any]) -> None:
        self.search.load_dict(state["search"])
        self.generations, self._fixed = state["generations"], dict(state["fixed"])
        self._metric, self._mode = state["metric"], state["mode"]
        self._slots = {}  # trials of the old experiment will not report; their slots are proposed again

    def save(self, checkpoint_path: str) -> None:
        Path(checkpoint_path).write_text(json.dumps(self.get_state(), default=_jsonable))

    def restore(self, checkpoint_path: str) -> None:
        self.set_state(json.loads(Path(checkpoint_path).read_text()))


def _jsonable(x: Any) -> Any:
    if isinstance(x, float):
        return None if not math.isfinite(x) else x
    raise TypeError(f"not JSON-serializable: {type(x).__name__}")


def apply_overrides(spec: Mapping[str, Any], config: Mapping[str, Any]) -> dict[str, Any]:
    """The spec with dotted keys of `config` set: {"task_options.width": 64, "sync_every": 10}."""
    out = copy.deepcopy(dict(spec))
    for key, value in config.items():
        node = out
        *path, last = key.split(".")
        for part in path:
            node = node.setdefault(part, {})
        node[last] = value
    return out


def hdet_trainable(
    spec: Mapping[str, Any], *, cpus_per_worker: float = 1.0, storage_path: str | None = None
) -> Callable[[dict[str, Any]], None]:
    """A Tune function trainable that runs one HDET job per trial with the trial's config applied.

    Each report of the job's TorchTrainer reaches Tune through `TuneReportCallback`; the trial's run
    directory is `<storage_path or the spec's or ./runs>/<spec name>-<trial id>/`.
    """
    from ray.tune.integration.ray_train import TuneReportCallback

    def trainable(config: dict[str, Any]) -> None:
        from hdet_ray.ray.job import run_job

        trial = tune.get_context().get_trial_id()
        data = apply_overrides(spec, config)
        data["name"] = f"{data.get('name') or 'hdet'}-{trial}"
        job = JobSpec.parse(data, f"trial {trial}")
        run_job(
            job,
            storage_path=storage_path,
            progress=False,
            callbacks=[TuneReportCallback()],
            cpus_per_worker=cpus_per_worker,
        )

    return trainable
