"""HDETSearcher driving a real `tune.Tuner` (local Ray): it finds a known optimum in log-rate from 30x
away, and save/restore resumes the search where it stopped."""

from __future__ import annotations

import math

import pytest

pytestmark = [pytest.mark.ray, pytest.mark.slow]

OPTIMUM = 2e-3


def objective(config):
    from ray import tune

    u = math.log(config["lr"] / OPTIMUM)
    tune.report({"loss": math.sqrt(1 + u * u) + 0.01 * config["width"]})  # linear tails: not a parabola


def _fit(searcher, samples, tmp_path, name):
    from ray import tune

    tuner = tune.Tuner(
        tune.with_resources(objective, {"cpu": 0.5}),
        param_space={"width": 3},
        tune_config=tune.TuneConfig(
            search_alg=searcher, metric="loss", mode="min", num_samples=samples, reuse_actors=True
        ),
        run_config=tune.RunConfig(storage_path=str(tmp_path), name=name, verbose=0),
    )
    return tuner.fit()


def test_searcher_finds_log_optimum_from_30x_away_and_resumes(local_ray, tmp_path):
    from hdet_ray.ray.tune import HDETSearcher

    first = HDETSearcher(center={"lr": 30 * OPTIMUM}, population=4, spread=4.0)
    results = _fit(first, 8, tmp_path, "part1")
    assert len(results) == 8 and not results.errors
    assert all(r.config["width"] == 3 for r in results)  # unsearched keys pass through
    assert len(first.history) == 2
    stopped_at = first.center
    assert abs(math.log(stopped_at["lr"] / OPTIMUM)) < math.log(30)  # it moved toward the optimum

    first.save(str(tmp_path / "searcher.json"))
    resumed = HDETSearcher(center={"lr": 1.0}, population=4, spread=4.0)
    resumed.restore(str(tmp_path / "searcher.json"))
    assert resumed.center == stopped_at and resumed.history == first.history
    results = _fit(resumed, 16, tmp_path, "part2")
    assert not results.errors
    assert [h["generation"] for h in resumed.history] == list(range(6))  # continued, not restarted
    assert abs(math.log(resumed.center["lr"] / OPTIMUM)) < math.log(1.5), resumed.history
    best = min(results, key=lambda r: r.metrics["loss"])
    assert abs(math.log(best.config["lr"] / OPTIMUM)) < math.log(1.5)
