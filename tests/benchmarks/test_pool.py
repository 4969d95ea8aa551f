"""The benchmarks' process pool: real gloo groups of 2 processes, a rank killed by a real signal."""

import os
import signal

import pytest
import torch.multiprocessing as mp

from benchmarks import pool
from benchmarks.pool import read_results, run_jobs


def abort_once(rank: int, world: int, job: dict) -> dict:
    """Rank 1 aborts (SIGABRT, as a native crash in gloo does) the first time it meets the job `abort`."""
    import torch
    import torch.distributed as dist

    marker = job["marker"]
    if job["key"] == "abort" and rank == 1 and not os.path.exists(marker):
        open(marker, "w").close()
        os.kill(os.getpid(), signal.SIGABRT)
    total = torch.tensor([float(rank + 1)])
    dist.all_reduce(total)
    return {"sum": total.item(), "pid": os.getpid()}


def raise_in_job(rank: int, world: int, job: dict) -> dict:
    raise ValueError("a bug in the job")


@pytest.mark.slow
def test_a_rank_killed_by_a_signal_restarts_the_group_on_the_jobs_not_yet_written(tmp_path, capsys):
    results = tmp_path / "runs.jsonl"
    marker = str(tmp_path / "aborted")
    jobs = [{"key": k, "marker": marker} for k in ("before", "abort", "after")]
    run_jobs(abort_once, jobs, 2, results)
    out = read_results(results)
    assert list(out) == ["before", "abort", "after"]  # each written once, in order
    assert all(r["sum"] == 3.0 for r in out.values())
    # "before" finished in the first group; the other two ran in the restarted one (new processes)
    assert out["before"]["pid"] != out["abort"]["pid"] == out["after"]["pid"]
    assert "died with SIGABRT" in capsys.readouterr().out


@pytest.mark.slow
def test_a_python_error_in_a_job_is_raised_not_retried(tmp_path, monkeypatch):
    monkeypatch.setattr(pool, "RESTARTS", 5)
    with pytest.raises(mp.ProcessRaisedException, match="a bug in the job"):
        run_jobs(raise_in_job, [{"key": "bad"}], 2, tmp_path / "runs.jsonl")
    assert not (tmp_path / "runs.jsonl").exists()
