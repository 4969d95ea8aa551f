"""The promotion rules applied to Ray Tune trials: a small real Tuner run on a local Ray."""

import json
import tempfile
from pathlib import Path

import pytest

from hdet_ray.promotion.decisions import decide_stage
from hdet_ray.promotion.protocol import Study

ray = pytest.importorskip("ray")
pytestmark = [pytest.mark.ray, pytest.mark.slow]

# A trainable whose metric is known in advance: base + 0.01 * seed + 1 / step.
BASE = {"ref": 1.0, "ctrl": 1.5, "a": 0.8, "b": 0.9, "c": 1.02}


def metric(candidate: str, seed: int, step: int) -> float:
    return BASE[candidate] + 0.01 * seed + 1.0 / step


def trainable(config):
    from ray import tune

    start = 0
    checkpoint = tune.get_checkpoint()
    if checkpoint:
        with checkpoint.as_directory() as d:
            start = json.loads((Path(d) / "state.json").read_text())["step"]
    for step in range(start + 1, 7):
        with tempfile.TemporaryDirectory() as d:
            (Path(d) / "state.json").write_text(json.dumps({"step": step}))
            tune.report(
                {"step": step, "val_loss": metric(config["candidate"], config["seed"], step)},
                checkpoint=tune.Checkpoint.from_directory(d),
            )


STUDY = Study.parse(
    {
        "name": "tune",
        "metric": "val_loss",
        "candidates": [{"name": n} for n in BASE],
        "retained": {"reference": "ref", "controls": ["ctrl"]},
        "stages": [
            {"name": "s1", "steps": 2, "seeds": [0], "advance": 1},
            {"name": "s2", "steps": 4, "seeds": [0], "advance": 1},
            {"name": "s3", "steps": 6, "seeds": [0]},
        ],
        "gates": [{"rule": "mean_gap", "margin": 0.01, "stages": ["s1"], "candidates": ["c"]}],
    }
)


@pytest.fixture(scope="module")
def cluster(local_ray):
    import sys

    # this test module is not importable on the workers: ship the trainable by value
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    yield
    ray.cloudpickle.unregister_pickle_by_value(sys.modules[__name__])


def test_tune_scheduler_stops_and_promotes_by_the_study_rules(cluster, tmp_path):
    from ray import tune

    from hdet_ray.promotion.tune import PromotionScheduler

    scheduler = PromotionScheduler(STUDY, time_attr="step")
    tuner = tune.Tuner(
        tune.with_resources(trainable, {"cpu": 1}),
        param_space={"candidate": tune.grid_search(list(BASE)), "seed": tune.grid_search([0, 1])},
        tune_config=tune.TuneConfig(scheduler=scheduler, metric="val_loss", mode="min"),
        run_config=tune.RunConfig(storage_path=str(tmp_path), name="promotion", verbose=0),
    )
    results = tuner.fit()
    assert not results.errors

    last = {(r.config["candidate"], r.config["seed"]): r.metrics["step"] for r in results}
    # s1: b is not in the top 1 by mean rank; c is 0.02 behind ref in mean gap (> 0.01): both stop at 2
    assert {k: v for k, v in last.items() if k[0] in ("b", "c")} == {(c, s): 2 for c in "bc" for s in (0, 1)}
    # ref (retained, ranked below a) and ctrl (retained, last) reach the final budget with a
    assert all(last[(c, s)] == 6 for c in ("a", "ref", "ctrl") for s in (0, 1))

    assert [d.stage for d in scheduler.decisions] == ["s1", "s2", "s3"]
    s1 = scheduler.decisions[0]
    assert s1.outcomes["b"].rule == "top_k(k=1)" and s1.outcomes["c"].rule.startswith("gates[0] mean_gap")
    assert s1.outcomes["c"].by == pytest.approx(0.02)
    assert s1.outcomes["ref"].rule == "retained: reference" and s1.outcomes["ctrl"].advanced
    # the same rules on the same numbers, outside Tune, give the same decisions
    live = list(BASE)
    for k, stage in enumerate(STUDY.stages):
        table = {c: {f"s{s}": metric(c, s, stage.steps) for s in (0, 1)} for c in live}
        assert decide_stage(STUDY, k, table).to_dict() == scheduler.decisions[k].to_dict()
        live = scheduler.decisions[k].advanced
    assert scheduler.decisions[-1].winner == "a"
    assert set(scheduler.stopped_after.values()) == {"s1"} and len(scheduler.stopped_after) == 4
