"""Acceptance: the real service (uvicorn on a free port) with its embedded Ray head runs a job submitted
over HTTP; the SSE stream shows records while it runs; it reaches SUCCEEDED; every window is stored once.
The job is the real `digits` job through `python -m hdet_ray run --spec-json`."""

from __future__ import annotations

import sys
import time

import pytest

from service import Settings
from tests.service.conftest import TOKEN, start_server
from tests.service.test_api import read_events

pytestmark = [pytest.mark.ray, pytest.mark.slow]
# this interpreter, not whatever `python` is first on PATH
ENTRYPOINT = f"{sys.executable} -m hdet_ray run --spec-json {{spec_json}}"
JOB = {"name": "e2e", "task": "digits", "replicas": 2, "steps": 120, "sync_every": 20, "seed": 1}


@pytest.fixture(scope="module")
def ray_server(tmp_path_factory):
    settings = Settings(
        token=TOKEN,
        data_dir=tmp_path_factory.mktemp("e2e"),
        poll_interval_s=0.5,
        entrypoint=ENTRYPOINT,
        ray_num_cpus=2,
    )
    server = start_server(settings)
    yield server
    server.stop()
    assert server.app.state.ray_head.info is None  # the head it owned is gone


def wait_for(predicate, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")


def run_job_and_check(server):
    with server.client() as c:
        created = c.post("/v1/jobs", json=JOB)
        assert created.status_code == 201, created.text
        job_id = created.json()["id"]
        total = 6
        with c.stream("GET", f"/v1/jobs/{job_id}/stream", timeout=600) as r:
            events = read_events(r, until_window=None)
        windows = [e[2]["window"] for e in events if e[1] == "window"]
        assert events[-1][1] == "end" and events[-1][2]["status"] == "SUCCEEDED", c.get(
            f"/v1/jobs/{job_id}/logs", params={"tail": 40}
        ).text
        assert set(windows) == set(range(total))
        job = c.get(f"/v1/jobs/{job_id}").json()
        assert job["status"] == "SUCCEEDED" and job["progress"]["windows"] == total
        stored = [r["window"] for r in c.get(f"/v1/jobs/{job_id}/trajectory").json()["records"]]
        assert stored == list(range(total))  # every window exactly once, in order
        assert "val_loss" in job["latest_metrics"]
        return job_id


def test_real_digits_job(ray_server):
    run_job_and_check(ray_server)
