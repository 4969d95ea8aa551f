"""`ray job submit` against a real token-auth Ray head that this module starts and stops (its own ports,
temp dir and token; never `ray stop`, which would end other Ray instances on the machine)."""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from hdet_ray.ray.trajectory import read_trajectory

pytestmark = [pytest.mark.ray, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


@pytest.fixture(scope="module")
def head():
    token = secrets.token_hex(32)
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token}
    gcs, dash, agent_http, agent_grpc, metrics, rt_agent, client, nm, om = _free_ports(9)
    temp = tempfile.mkdtemp(prefix="hdet-h-")
    cmd = ["ray", "start", "--head", "--block", "--port", str(gcs), "--dashboard-port", str(dash),
           "--dashboard-host", "127.0.0.1", "--include-dashboard", "true", "--temp-dir", temp,
           "--num-cpus", "4", "--dashboard-agent-listen-port", str(agent_http),
           "--dashboard-agent-grpc-port", str(agent_grpc), "--metrics-export-port", str(metrics),
           "--runtime-env-agent-port", str(rt_agent), "--ray-client-server-port", str(client),
           "--node-manager-port", str(nm), "--object-manager-port", str(om)]
    log = open(Path(temp) / "head.log", "w")  # noqa: SIM115 - closed at teardown
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    address = f"http://127.0.0.1:{dash}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            req = urllib.request.Request(f"{address}/api/version", headers={"Authorization": f"Bearer {token}"})
            urllib.request.urlopen(req, timeout=2).close()
            break
        except (urllib.error.URLError, OSError):
            time.sleep(1)
    else:
        proc.kill()
        pytest.fail(f"ray head did not come up: {(Path(temp) / 'head.log').read_text()[-2000:]}")
    yield {"address": address, "token": token, "env": env}
    os.killpg(proc.pid, signal.SIGTERM)  # our own child's process group (its gcs, raylet, workers), nothing else
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    log.close()


def test_ray_job_submit_runs_the_entrypoint_and_writes_the_trajectory(head, tmp_path):
    runs = tmp_path / "runs"
    cmd = ["ray", "job", "submit", "--address", head["address"], "--working-dir", ".", "--",
           "python", "-m", "hdet_ray", "run", "examples/specs/digits-tiny.yaml", "--storage-path", str(runs)]
    done = subprocess.run(cmd, check=False, cwd=REPO, env=head["env"], capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "succeeded" in done.stdout.lower()
    assert "final: val_loss" in done.stdout  # the entrypoint's summary reached the job's logs
    records = read_trajectory(runs / "digits-tiny" / "trajectory.jsonl")
    assert [r["window"] for r in records] == [0, 1, 2, 3]
    assert (runs / "digits-tiny" / "summary.json").exists()


def test_jobs_api_refuses_a_client_without_the_token(head):
    env = {k: v for k, v in head["env"].items() if k not in ("RAY_AUTH_TOKEN",)}
    env["RAY_AUTH_MODE"] = "disabled"
    done = subprocess.run(["ray", "job", "list", "--address", head["address"]], check=False, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "401" in done.stdout + done.stderr or "nauthorized" in done.stdout + done.stderr


def test_hdet_submit_waits_for_the_job(head, tmp_path, capsys):
    from hdet_ray.cli import main

    spec = '{"name": "sub", "task": "digits", "task_options": {"width": 16, "depth": 1}, "replicas": 2, ' \
           '"steps": 20, "sync_every": 10}'
    os.environ["RAY_AUTH_MODE"] = "token"
    try:
        rc = main(["submit", "--spec-json", spec, "--address", head["address"], "--token", head["token"],
                   "--working-dir", str(REPO), "--storage-path", str(tmp_path), "--wait"])
    finally:
        os.environ.pop("RAY_AUTH_MODE", None)
    out = capsys.readouterr().out
    assert rc == 0, out[-3000:]
    assert [r["window"] for r in read_trajectory(tmp_path / "sub" / "trajectory.jsonl")] == [0, 1]
