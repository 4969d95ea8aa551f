"""Each benchmark's smallest configuration, to prove the scripts run and count what they claim.

Real gloo process groups (2 processes), a real local Ray for PBT. No timing is asserted: the figures
themselves come from `python -m benchmarks.all`, never from CI.
"""

import math

import pytest

from benchmarks import scale, workloads
from benchmarks.pool import dispatch, read_results, run_jobs
from benchmarks.quality_report import Cell, targets
from benchmarks.speed import make_model, speed_job

TINY = {
    "task": "digits",
    "replicas": 1,
    "steps": 20,
    "sync_every": 10,
    "schedule": {"max_lr": 1e-2},
    "seed": 0,
}


def quality_job(key: str, arm: str, **extra):
    job = {
        "key": key,
        "fn": workloads.run,
        "workload": "mlp",
        "steps": 20,
        "sync_every": 10,
        "seed": 0,
        "max_lr": 0.3,
        "arm": arm,
        "validate_every_window": True,
    }
    return {**job, **extra}


@pytest.mark.slow
def test_quality_and_speed_jobs_on_two_gloo_ranks(tmp_path):
    results = tmp_path / "runs.jsonl"
    jobs = [
        quality_job("fixed", "fixed"),
        quality_job("hdet", "hdet"),
        quality_job(
            "opening", "hdet", hdet={"opening_spread": 10.0, "controller_settings": {"opening_step_down": 0}}
        ),
        quality_job("prodigy", "lrfree", optimizer="prodigy", max_lr=1.0),
        quality_job("dadapt", "lrfree", optimizer="dadapt", max_lr=1.0),
    ]
    jobs += [
        {"key": m, "fn": speed_job, "mode": m, "warmup": 1, "timed": 4, "sync_every": 2}
        for m in ("ddp", "shared_grad", "local", "shared_grad+ddp")
    ]
    run_jobs(dispatch, jobs, 2, results)
    out = read_results(results)
    assert set(out) == {
        "fixed",
        "hdet",
        "opening",
        "prodigy",
        "dadapt",
        "ddp",
        "shared_grad",
        "local",
        "shared_grad+ddp",
    }

    for key in ("fixed", "hdet", "opening", "prodigy"):
        assert math.isfinite(out[key]["metric"]) and out[key]["metric"] < math.log(10), key  # it learned
    assert "records" not in out["fixed"] and len(out["hdet"]["records"]) == 2
    # every HDET window carries the converged model's validation metric (what benchmarks.trajectory plots)
    assert all("val_loss" in r["metrics"] for r in out["hdet"]["records"])
    # the opening window jumps to one of the two range-test levels, 10 ** -1 or 10 ** +1
    assert min(abs(out["opening"]["centres"][0] - c) for c in (0.1, 10.0)) < 1e-9

    model_bytes = 4 * sum(p.numel() for p in make_model().parameters())
    assert out["ddp"]["bytes_per_step"] == model_bytes  # every gradient, once per step
    # local: parameters + AdamW's two moments every 2 steps, plus the window's statistics gather (8 float64:
    # mean, first, tail and lowest loss, finite, count, hypergradient, and the size of what the converge
    # all-reduces, checked equal on every rank); with the controller in-process every rank decides alike, so
    # no Decision travels
    extra = 8 * 8 / 2
    assert out["local"]["bytes_per_step"] == pytest.approx(3 * model_bytes / 2 + extra, rel=1e-9)
    # shared_grad: the gradient every step, plus the parameters every 2 steps; its default optimizer-state
    # policy is 'keep' (the moments agree already), so they do not travel. Through the hook, each step also
    # gathers the ranks' gradient norms (8 bytes, for the clip) with which parameters have a gradient (8 bytes
    # each) and counts contributors (4 bytes)
    gathered = 8 * (1 + len(list(make_model().parameters())))
    assert out["shared_grad"]["bytes_per_step"] == pytest.approx(
        model_bytes * 1.5 + extra + gathered + 4, rel=1e-9
    )
    # on a DDP-wrapped model the scheduler holds DDP's all-reduce off (no bucket passes DDP's hook) and
    # averages itself: the same bytes as on the plain model
    assert out["shared_grad+ddp"]["calls"].get("ddp_bucket_all_reduce", 0) == 0
    assert out["shared_grad+ddp"]["bytes_per_step"] == out["shared_grad"]["bytes_per_step"]
    assert all(out[m]["steps_per_s"] > 0 for m in ("ddp", "shared_grad", "local", "shared_grad+ddp"))

    run_jobs(dispatch, jobs, 2, results)  # every key is done: nothing runs again
    assert len(results.read_text().splitlines()) == 9


def test_scale_decides_at_1024_replicas_and_projects_by_the_ring_formula():
    assert scale.decide_s("slope", 1024, repeats=3) > 0
    p = scale.projected_bytes(1e9, 1000, 50)
    assert p["ddp"] == pytest.approx(2 * 999 / 1000 * 4e9)
    assert p["local"] == pytest.approx(2 * 999 / 1000 * 4e9 * 3 / 50 + (8 * 8 * 1000 + 8 * 1007) / 50)
    assert p["shared_grad"] == pytest.approx(p["ddp"] + p["local"])


def _cell(hdet_low: float, fixed_low: float, prodigy: float) -> Cell:
    runs = {f"w/short/0/fixed/{k}": {"metric": 1.0 if k == 3 else 2.0, "diverged": False} for k in range(7)}
    runs["w/short/0/fixed/1"] = {"metric": fixed_low, "diverged": False}
    runs["w/short/0/hdet/1"] = {"metric": hdet_low, "diverged": False}
    runs["w/short/0/hdet/3"] = {"metric": 1.005, "diverged": False}
    runs["w/short/0/prodigy/"] = {"metric": prodigy, "diverged": False}
    info = {
        "workload": "w",
        "horizon": "short",
        "windows": 20,
        "sync_every": 10,
        "oracle_k": 3,
        "oracle_rate": 0.01,
        "grid": [0.01 * 10 ** ((k - 3) / 2) for k in range(7)],
    }
    return Cell("w/short", info, runs, [0])


def test_targets_are_judged_against_the_oracle_mean():
    met = {t: v for _, t, _, v in targets(_cell(hdet_low=1.04, fixed_low=1.3, prodigy=1.2))}
    assert met["at the oracle's rate: HDET <= 1.01x"] == "met"  # 1.005
    assert met["10x too low: HDET <= 1.10x"] == "met"
    assert met["10x too low: HDET ahead of Prodigy"] == "met"
    assert met["10x too low: HDET no worse than fixed by > 1 sd"] == "met"
    missed = {t: v for _, t, _, v in targets(_cell(hdet_low=1.2, fixed_low=1.1, prodigy=1.05))}
    assert missed["10x too low: HDET <= 1.10x"] == "**missed**"
    assert missed["10x too low: HDET ahead of Prodigy"] == "**missed**"
    assert missed["10x too low: HDET no worse than fixed by > 1 sd"] == "**missed**"  # one seed: sd 0


@pytest.mark.ray
@pytest.mark.slow
def test_pbt_population_runs_on_a_local_ray(local_ray, tmp_path):
    from benchmarks.pbt import run_pbt

    out = run_pbt(TINY, 1e-2, (1e-4, 1e-1), 2, storage=str(tmp_path / "tune"))
    assert out["replica_steps"] == 40 and len(out["member_metrics"]) == 2
    assert math.isfinite(out["metric"]) and out["metric"] == min(out["member_metrics"])
    # the quality benchmark's PBT column builds the cell's own workload (the BatchNorm CNN here)
    cnn = {"name": "cnn", "steps": 20, "sync_every": 10, "seed": 0}
    out = run_pbt(cnn, 1e-2, (1e-4, 1e-1), 2, storage=str(tmp_path / "tune-cnn"), source="workload")
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


def test_signal_measures_a_cosine_per_window_and_reads_unmoved_windows():
    from benchmarks.signal import by_phase, hypergradient_run, rank_signal

    points = hypergradient_run("mlp", steps=20, sync_every=5, max_lr=0.3, seed=0)
    assert [round(f, 2) for f, _ in points] == [0.25, 0.5, 0.75]  # one per window after the first
    assert all(-1.0 <= c <= 1.0 and c != 0.0 for _, c in points)

    def record(window, offset, signal, excluded=()):
        p = {"offset": offset, "signal": signal}
        return {
            "step": 10 * (window + 1),
            "total_steps": 100,
            "params": {"lr": p},
            "excluded": list(excluded),
            "opening": False,
        }

    runs = {
        "mlp/short/0/hdet/4": {
            "records": [
                record(0, 0.0, 0.6),
                record(1, 0.0, -0.2, excluded=[1]),
                record(2, 0.0, 1.0),
                record(3, 0.25, 1.0),
                record(4, 0.0, 1.0),
            ]
        }
    }
    # the excluded window is skipped, and nothing after the controller's first move is read
    assert rank_signal(runs, "mlp", "short", 4) == [(0.1, 0.6), (0.3, 1.0)]
    assert by_phase([(0.1, 0.6), (0.3, 1.0), (0.9, -0.5)]) == [
        "+0.60 (100% > 0, 1)",
        "+1.00 (100% > 0, 1)",
        "-0.50 (0% > 0, 1)",
    ]


@pytest.mark.slow
def test_holdout_quick_runs_its_plan_and_writes_its_table(tmp_path, monkeypatch):
    from benchmarks import common, holdout

    monkeypatch.setattr(common, "RESULTS", tmp_path)
    assert holdout.main(["--quick"]) == 0
    runs = read_results(tmp_path / "quick" / "holdout_runs.jsonl")
    grid = [k for k in runs if "/fixed/" in k]
    assert len(grid) >= 7 and len([k for k in runs if "/hdet/" in k]) == 3
    assert all(len(runs[k]["records"]) == 6 for k in runs if "/hdet/" in k)
    table = (tmp_path / "quick" / "holdout.md").read_text()
    assert table.count("| mlp_adamw |") == 3 and "python -m benchmarks.holdout --quick" in table


def test_holdout_counts_a_diverged_run_as_infinitely_bad():
    from benchmarks.holdout import cell, harm

    inf = math.inf
    assert cell([inf, inf, inf]) == "diverged (3 of 3)"
    assert cell([1.0, inf, 1.2]) == "1.100 ± 0.141 (1 of 3 diverged)"
    assert cell([2.664e27, inf]) == "2.66e+27 ± 0 (1 of 2 diverged)"  # blew up, stayed finite: readable
    # fixed OneCycle diverged on every seed, HDET trained: no harm, whatever HDET's ratio
    assert harm([inf] * 3, [1.5, 1.6, 1.4]) == "no"
    # more diverged HDET runs is harm; otherwise one sd decides
    assert harm([1.0, 1.0, 1.0], [1.0, inf, 1.0]) == "**yes**"
    assert harm([1.0, 1.1, 1.0], [1.5, 1.6, 1.5]) == "**yes**"
    assert harm([1.0, 1.1, 1.0], [1.05, 1.1, 1.0]) == "no"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "arm_field", "arms", "windows", "rows"),
    [
        ("horizon", 3, ["fixed"] * 4 + ["hdet"] * 2, 12, 2),  # 12 windows of the quality job's period
        ("issue_setting", 2, ["fixed"] * 5 + ["hdet"] * 3, 2, 3),  # 20 steps, sync_every=10
    ],
)
def test_a_quick_plan_runs_and_writes_its_table(tmp_path, monkeypatch, name, arm_field, arms, windows, rows):
    import importlib

    from benchmarks import common

    monkeypatch.setattr(common, "RESULTS", tmp_path)
    assert importlib.import_module(f"benchmarks.{name}").main(["--quick"]) == 0
    runs = read_results(tmp_path / "quick" / f"{name}_runs.jsonl")
    assert sorted(k.split("/")[arm_field] for k in runs) == arms
    assert all(len(runs[k]["records"]) == windows for k in runs if "/hdet/" in k)
    table = (tmp_path / "quick" / f"{name}.md").read_text()
    assert table.count("| mlp |") == rows and f"python -m benchmarks.{name} --quick" in table


def test_unseen_grows_its_grid_past_the_end_that_holds_the_best_rate():
    from benchmarks.unseen import EXTEND, grid_best

    def grid(metric_of_k, ks):
        return {f"w/{s}/fixed/{k}": {"metric": metric_of_k(k)} for s in (0, 1) for k in ks}

    # a best inside the grid is the oracle
    assert grid_best(grid(lambda k: (k - 4) ** 2 + 1.0, range(7)), "w", (0, 1)) == (4, None)
    # a best at the top end asks for the rate above it, then stops where the metric turns
    rising = grid(lambda k: (k - 7) ** 2 + 1.0, range(7))
    assert grid_best(rising, "w", (0, 1)) == (6, 7)
    rising |= grid(lambda k: (k - 7) ** 2 + 1.0, [7, 8])
    assert grid_best(rising, "w", (0, 1)) == (7, None)
    # and at the bottom end the rate below; never more than EXTEND steps past either end
    falling = grid(lambda k: float(k) + 10.0, range(-EXTEND, 7))
    assert grid_best(falling, "w", (0, 1)) == (-EXTEND, None)
    # a diverged run (non-finite metric) is never the best
    assert grid_best(grid(lambda k: math.inf if k == 6 else 7.0 - k, range(7)), "w", (0, 1)) == (5, None)


@pytest.mark.slow
def test_unseen_quick_runs_its_plan_and_writes_its_table(tmp_path, monkeypatch):
    from benchmarks import common, unseen

    monkeypatch.setattr(common, "RESULTS", tmp_path)
    assert unseen.main(["--quick"]) == 0
    runs = read_results(tmp_path / "quick" / "unseen_runs.jsonl")
    best, beyond = unseen.grid_best(runs, "softmax", (0,))
    assert beyond is None and len([k for k in runs if "/hdet/" in k]) == 3
    assert {f"softmax/0/{arm}/{best + d}" for arm in ("fixed", "hdet") for d in (-2, 0, 2)} <= set(runs)
    assert all(len(runs[k]["records"]) == 4 for k in runs if "/hdet/" in k)  # 20 steps, sync_every=5
    table = (tmp_path / "quick" / "unseen.md").read_text()
    assert table.count("| softmax |") == 3 and "python -m benchmarks.unseen --quick" in table
    brief = (tmp_path / "quick" / "unseen_summary.md").read_text()  # one workload, each start a row
    assert all(f"| {start} | 1 |" in brief for start in unseen.STARTS)
