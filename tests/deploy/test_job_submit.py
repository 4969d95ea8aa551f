"""The RayJob's entrypoint, read from deploy/kuberay/rayjob.yaml, runs as it stands through
`ray job submit --working-dir .` against a real local Ray head started with token auth, the way KubeRay's
submitter runs it on a cluster (Kubernetes itself cannot run here).

The head is the suite's `token_head` fixture (tests/conftest.py): a child of the test session with its own
ports, temp dir and token, ended with it; `ray stop` is never called (it would end every Ray on the machine).
"""

from __future__ import annotations

import json
import subprocess

import pytest
import yaml
from k8s_manifests import REPO, entrypoint_argv, one

pytestmark = pytest.mark.ray


def test_unauthenticated_clients_are_refused(token_head):
    command = ["ray", "job", "list", "--address", token_head.address]
    no_token = {k: v for k, v in token_head.env.items() if k not in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN")}
    refused = subprocess.run(command, env=no_token, capture_output=True, text=True, check=False)
    assert refused.returncode != 0
    allowed = subprocess.run(command, env=token_head.env, capture_output=True, text=True, check=False)
    assert allowed.returncode == 0, allowed.stderr[-2000:]  # so the refusal above was the missing token


@pytest.mark.slow
def test_the_rayjob_entrypoint_runs_with_ray_job_submit(token_head):
    rayjob = one("RayJob").doc["spec"]
    runtime_env = yaml.safe_load(rayjob["runtimeEnvYAML"])
    command = [
        "ray",
        "job",
        "submit",
        "--address",
        token_head.address,
        "--working-dir",
        ".",
        "--runtime-env-json",
        json.dumps(runtime_env),
        "--",
        *entrypoint_argv(one("RayJob").doc),
    ]
    done = subprocess.run(
        command, cwd=REPO, env=token_head.env, capture_output=True, text=True, timeout=420, check=False
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    assert "succeeded" in output.lower(), output[-4000:]
    assert "final: val_loss" in output, output[-4000:]  # the entrypoint's summary reached the job's logs
