"""Acceptance: restart the service mid-job, first gracefully (SIGTERM: it leaves its Ray head running,
since a job is unfinished) and then by SIGKILL, each time starting it again on the same data directory.
The job keeps running on the embedded Ray head (the new service adopts it), the restarted service shows
the job, and when it ends the stored trajectory has every window exactly once (pushes lost while the
service was down come back from the run's trajectory.jsonl): a routine restart loses no window. The job is
the real digits job."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import httpx
import pytest

from service.ray_head import free_port
from tests.service.conftest import TOKEN
from tests.service.test_e2e_ray import ENTRYPOINT, wait_for

pytestmark = [pytest.mark.ray, pytest.mark.slow]
JOB = {"name": "restart", "task": "digits", "replicas": 2, "steps": 300, "sync_every": 20, "seed": 2}


def serve(data_dir, port, log):
    env = {
        **os.environ,
        "HDET_TOKEN": TOKEN,
        "HDET_DATA_DIR": str(data_dir),
        "HDET_POLL_INTERVAL_S": "0.5",
        "HDET_RAY_NUM_CPUS": "2",
        "HDET_ENTRYPOINT": ENTRYPOINT,
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "hdet_ray", "serve", "--port", str(port), "--log-level", "warning"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    client = httpx.Client(
        base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30
    )

    def up():
        assert proc.poll() is None, "the service exited"
        try:
            return client.get("/healthz").status_code == 200
        except httpx.TransportError:
            return False

    wait_for(up, 180, "the service to start")
    return proc, client


def reached(job: dict, windows: int) -> bool:
    assert job["status"] in ("PENDING", "RUNNING", "SUCCEEDED"), job  # a failed job fails the test now
    return job["progress"]["windows"] >= windows


def test_restart_mid_job_loses_nothing(tmp_path):
    data_dir, port = tmp_path / "data", free_port()
    log = open(tmp_path / "service.log", "ab")  # noqa: SIM115
    proc, client = serve(data_dir, port, log)
    try:
        job_id = client.post("/v1/jobs", json=JOB).json()["id"]
        head = json.loads((data_dir / "ray-head.json").read_text())
        for signum, windows in ((signal.SIGTERM, 2), (signal.SIGKILL, 4)):
            wait_for(
                lambda n=windows, c=client: reached(c.get(f"/v1/jobs/{job_id}").json(), n),
                300,
                f"{windows} windows before the {signum.name}",
            )
            proc.send_signal(signum)
            proc.wait(timeout=60)
            assert os.path.exists(f"/proc/{head['pid']}"), f"{signum.name} ended the head"
            time.sleep(3)  # the job goes on; its pushes to the stopped service fail
            proc, client = serve(data_dir, port, log)
            assert json.loads((data_dir / "ray-head.json").read_text())["pid"] == head["pid"]  # adopted
            job = client.get(f"/v1/jobs/{job_id}").json()
            assert job["status"] in ("RUNNING", "SUCCEEDED"), job
        wait_for(lambda: client.get(f"/v1/jobs/{job_id}").json()["status"] == "SUCCEEDED", 600, "SUCCEEDED")
        stored = [r["window"] for r in client.get(f"/v1/jobs/{job_id}/trajectory").json()["records"]]
        assert stored == list(range(15))
    finally:
        proc.send_signal(signal.SIGTERM)  # a graceful stop ends the head it owns
        proc.wait(timeout=120)
        head_file = data_dir / "ray-head.json"
        if head_file.exists():  # the service failed to end it: end exactly that head
            os.killpg(json.loads(head_file.read_text())["pid"], signal.SIGKILL)
            pytest.fail("the service left its Ray head running")
        log.close()
