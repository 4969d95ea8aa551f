"""`benchmarks.val_signal`: every replica's own validation loss at a window's end (real gloo, 2 processes)."""

import math

import pytest

from benchmarks import val_signal, workloads
from benchmarks.pool import read_results, run_jobs


def _record(window, multipliers, signal, excluded=()):
    lr = {"multipliers": multipliers, "signal": signal}
    return {"window": window, "excluded": list(excluded), "opening": False, "params": {"lr": lr}}


def test_the_validation_signal_is_positive_when_the_higher_rate_generalised_better():
    run = {
        "records": [
            _record(0, [0.8, 1.25], 0.3),
            _record(1, [0.8, 1.25], -0.2),
            _record(2, [0.8, 1.25], 0.1, excluded=[1]),  # left out: a replica was unhealthy
        ],
        "replica_validation": [
            [[2.0, 0.8], [1.5, 1.25]],
            [[1.0, 0.8], [1.2, 1.25]],
            [[1.0, 0.8], [9.0, 1.25]],
        ],
    }
    assert val_signal.signals(run) == [(0, 1.0, 0.3), (1, -1.0, -0.2)]
    assert val_signal.letters([(0, 1.0), (1, -1.0)], 3) == "ud."


@pytest.mark.slow
def test_each_replica_reports_its_own_validation_loss_and_multiplier_before_the_average(tmp_path):
    job = {
        "key": "v",
        "workload": "mlp",
        "steps": 25,  # two full windows and a partial one that `finish` closes
        "sync_every": 10,
        "seed": 0,
        "max_lr": 0.3,
        "arm": "hdet",
        "replica_validation": True,
    }
    run_jobs(workloads.run, [job], 2, tmp_path / "runs.jsonl")
    run = read_results(tmp_path / "runs.jsonl")["v"]
    assert len(run["replica_validation"]) == len(run["records"]) == 3
    for rec, replicas in zip(run["records"], run["replica_validation"], strict=True):
        assert [m for _, m in replicas] == pytest.approx(rec["params"]["lr"]["multipliers"])
        assert all(math.isfinite(v) and v > 0 for v, _ in replicas)
    # the replicas' weights differ before the average: their validation losses are not all equal
    assert any(len({v for v, _ in replicas}) == 2 for replicas in run["replica_validation"])
