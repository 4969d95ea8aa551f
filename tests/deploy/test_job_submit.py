"""The RayJob's entrypoint, read from deploy/kuberay/rayjob.yaml, runs as it stands through
`ray job submit --working-dir .` against a real local Ray head started with token auth, the way KubeRay's
submitter runs it on a cluster (Kubernetes itself cannot run here).

The head is this test's own child (`ray start --head --block` with free ports and its own temp dir) and
ends with it; `ray stop` is never called (it would end every Ray on the machine).
"""

from __future__ import annotations

import importlib.util
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import time

import pytest
import yaml
from k8s_manifests import REPO, entrypoint_argv, one

pytestmark = pytest.mark.ray

RAY_LAYER = "hdet_ray.ray.entry"


def _free_ports(count: int) -> list[int]:
    """Distinct free ports (all held open while choosing, so none is handed out twice)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _ray_layer_present() -> bool:
    try:
        return importlib.util.find_spec(RAY_LAYER) is not None
    except ModuleNotFoundError:
        return False


@pytest.fixture(scope="module")
def head(tmp_path_factory):
    """(dashboard address, environment with the token) of a local head with token auth."""
    if shutil.which("ray") is None:
        pytest.skip("the `ray` command is not installed (extra `ray`)")
    temp = tmp_path_factory.mktemp("ray")
    env = dict(os.environ, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(32),
               PYTHONPATH=str(REPO))
    gcs, dashboard, client, agent, metrics = _free_ports(5)
    command = ["ray", "start", "--head", "--block", "--num-cpus", "4", "--temp-dir", str(temp),
               "--port", str(gcs), "--dashboard-port", str(dashboard), "--dashboard-host", "127.0.0.1",
               "--ray-client-server-port", str(client), "--dashboard-agent-listen-port", str(agent),
               "--metrics-export-port", str(metrics)]
    log = (temp / "head.log").open("w")
    process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    address = f"http://127.0.0.1:{dashboard}"
    try:
        deadline = time.monotonic() + 120
        while True:
            if process.poll() is not None:
                tail = (temp / "head.log").read_text()[-2000:]
                pytest.fail(f"ray start exited with {process.returncode}: {tail}")
            ready = subprocess.run(["ray", "job", "list", "--address", address], env=env,
                                   capture_output=True, text=True, check=False)
            if ready.returncode == 0:
                break
            if time.monotonic() > deadline:
                pytest.fail(f"the head's Jobs API did not answer in 120 s: {ready.stderr[-2000:]}")
            time.sleep(1)
        yield address, env
    finally:
        # The head runs in its own session: end its process group, which is only what it started.
        try:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        except ProcessLookupError:
            pass
        log.close()


def test_unauthenticated_clients_are_refused(head):
    address, env = head
    no_token = {k: v for k, v in env.items() if k not in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN")}
    refused = subprocess.run(["ray", "job", "list", "--address", address], env=no_token,
                             capture_output=True, text=True, check=False)
    assert refused.returncode != 0


def test_the_rayjob_entrypoint_runs_with_ray_job_submit(head):
    if not _ray_layer_present():
        pytest.skip(f"{RAY_LAYER} (the Ray layer's job entrypoint, `python -m hdet_ray run`) does not exist "
                    "yet; this test runs for real once it lands")
    address, env = head
    rayjob = one("RayJob").doc["spec"]
    runtime_env = yaml.safe_load(rayjob["runtimeEnvYAML"])
    command = ["ray", "job", "submit", "--address", address, "--working-dir", ".",
               "--runtime-env-json", json.dumps(runtime_env), "--", *entrypoint_argv(one("RayJob").doc)]
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=420, check=False)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    assert "succeeded" in output.lower(), output[-4000:]
