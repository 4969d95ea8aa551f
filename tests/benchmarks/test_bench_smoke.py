"""Each benchmark's smallest configuration, to prove the scripts run and count what they claim.

Real gloo process groups (2 processes), a real local Ray for PBT. No timing is asserted: the figures
themselves come from `python -m benchmarks.all`, never from CI.
"""

import math

import pytest

from benchmarks import quality, scale
from benchmarks.pool import dispatch, read_results, run_jobs
from benchmarks.quality_report import Workload, targets
from benchmarks.runs import run_job
from benchmarks.speed import make_model, speed_job

TINY = {"task": "digits", "steps": 20, "sync_every": 10}


@pytest.mark.slow
def test_quality_and_speed_jobs_on_two_gloo_ranks(tmp_path):
    results = tmp_path / "runs.jsonl"
    base = {**quality.spec(TINY, 4, 0), "replicas": 2}
    opening = {
        **quality.spec(TINY, 4, 0, **quality.VARIANTS["HDET slope/local + opening 10x"]),
        "replicas": 2,
    }
    jobs = [
        {"key": "fixed", "fn": run_job, "kind": "fixed", "spec": base},
        {"key": "hdet", "fn": run_job, "kind": "hdet", "spec": base},
        {"key": "opening", "fn": run_job, "kind": "hdet", "spec": opening},
    ]
    jobs += [
        {"key": m, "fn": speed_job, "mode": m, "warmup": 1, "timed": 4, "sync_every": 2}
        for m in ("ddp", "shared_grad", "local", "shared_grad+ddp")
    ]
    run_jobs(dispatch, jobs, 2, results)
    out = read_results(results)
    assert set(out) == {"fixed", "hdet", "opening", "ddp", "shared_grad", "local", "shared_grad+ddp"}

    for key in ("fixed", "hdet", "opening"):
        assert math.isfinite(out[key]["metric"]) and out[key]["metric"] < math.log(
            10
        )  # it learned in 20 steps
        assert out[key]["replica_steps"] == 40
    assert out["fixed"]["centres"] == [] and len(out["hdet"]["centres"]) == 2
    # the opening window jumps to one of the two range-test levels, 10 ** -1 or 10 ** +1
    assert min(abs(out["opening"]["centres"][0] - c) for c in (0.1, 10.0)) < 1e-9

    model_bytes = 4 * sum(p.numel() for p in make_model().parameters())
    assert out["ddp"]["bytes_per_step"] == model_bytes  # every gradient, once per step
    # local: parameters + AdamW's two moments every 2 steps, plus the window's loss gather and Decision
    extra = (6 * 8 + (3 + 2 + 4) * 8) / 2
    assert out["local"]["bytes_per_step"] == pytest.approx(3 * model_bytes / 2 + extra, rel=1e-6)
    # shared_grad: the gradient every step (from the hook, or from DDP), plus the parameters every 2 steps;
    # its default optimizer-state policy is 'keep' (the moments agree already), so they do not travel
    for mode in ("shared_grad", "shared_grad+ddp"):
        assert out[mode]["bytes_per_step"] == pytest.approx(model_bytes + model_bytes / 2 + extra, rel=1e-6)
    assert all(out[m]["steps_per_s"] > 0 for m in ("ddp", "shared_grad", "local", "shared_grad+ddp"))

    run_jobs(dispatch, jobs, 2, results)  # every key is done: nothing runs again
    assert len(results.read_text().splitlines()) == 7


def test_scale_decides_at_1024_replicas_and_projects_by_the_ring_formula():
    assert scale.decide_s("slope", 1024, repeats=3) > 0
    p = scale.projected_bytes(1e9, 1000, 50)
    assert p["ddp"] == pytest.approx(2 * 999 / 1000 * 4e9)
    assert p["local"] == pytest.approx(2 * 999 / 1000 * 4e9 * 3 / 50 + (6 * 8 * 1000 + 8 * 1007) / 50)
    assert p["shared_grad"] == pytest.approx(p["ddp"] + p["local"])


def _summary(hdet_low: float, fixed_low: float, pbt_low: float) -> Workload:
    runs = {f"w/0/fixed/{k}": {"metric": 1.0 if k == 3 else 2.0, "diverged": False} for k in range(7)}
    runs["w/0/fixed/1"] = {"metric": fixed_low, "diverged": False}
    runs["w/0/HDET slope/local/1"] = {"metric": hdet_low, "diverged": False}
    runs["w/0/PBT/1"] = {"metric": pbt_low, "diverged": False}
    return Workload("w", {"oracle_k": 3, "task": "digits", "steps": 10}, runs, [0])


def test_targets_are_judged_against_the_oracle_mean():
    met = {t: v for t, _, v in targets(_summary(hdet_low=1.04, fixed_low=1.3, pbt_low=1.2))}
    assert met["w: from 10x too low, HDET within 5% of the oracle, fixed OneCycle not"] == "met"
    assert met["w: from 10x too low, HDET beats PBT at equal compute"] == "met"
    assert met["w: from 10x too high, HDET within 5% of the oracle, fixed OneCycle not"] == "missed"  # no run
    missed = {t: v for t, _, v in targets(_summary(hdet_low=1.06, fixed_low=1.3, pbt_low=1.05))}
    assert missed["w: from 10x too low, HDET within 5% of the oracle, fixed OneCycle not"] == "missed"
    assert missed["w: from 10x too low, HDET beats PBT at equal compute"] == "missed"


@pytest.mark.ray
@pytest.mark.slow
def test_pbt_population_runs_on_a_local_ray(local_ray, tmp_path):
    from benchmarks.pbt import run_pbt

    out = run_pbt(
        {**quality.spec(TINY, 4, 0), "replicas": 1}, 1e-2, (1e-4, 1e-1), 2, storage=str(tmp_path / "tune")
    )
    assert out["replica_steps"] == 40 and len(out["member_metrics"]) == 2
    assert math.isfinite(out["metric"]) and out["metric"] == min(out["member_metrics"])


def test_gpu_check_dry_run_on_cpu(tmp_path, monkeypatch):
    from benchmarks import common, gpu_check

    monkeypatch.setattr(common, "RESULTS", tmp_path)
    summary = gpu_check.run("cpu", quick=True)
    (row,) = summary["throughput"]
    assert row["ratio"] > 0 and "sync_check" not in summary  # the sync check needs CUDA


def test_bytelm_hdet_windows_are_healthy():
    """The quality benchmark's bytelm runs mean nothing if every window rolls back (a -inf mask buffer
    did)."""
    from hdet_ray.loop import Replica
    from hdet_ray.spec import JobSpec

    spec = JobSpec.parse(
        {
            "task": "bytelm",
            "replicas": 1,
            "steps": 20,
            "sync_every": 10,
            "schedule": {"max_lr": 3e-3},
            "task_options": {"train_bytes": 20_000, "val_bytes": 4096},
        }
    )
    replica = Replica.build(spec)
    replica.train(validate=False)
    assert [r.rollback for r in replica.scheduler.records] == [False, False]
    assert all(r.healthy == [True] for r in replica.scheduler.records)
