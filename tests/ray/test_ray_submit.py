"""`ray job submit` against a real token-auth Ray head: the suite's `token_head` fixture (tests/conftest.py;
its own ports, temp dir and token; never `ray stop`, which would end other Ray instances on the machine).

`ray job submit --working-dir . -- python -m hdet_ray run <spec>` itself runs in
tests/deploy/test_job_submit.py (the RayJob's entrypoint as it stands) and, with `--runtime-env` and a
user's task module, in tests/integrations/test_working_dir_task.py; each Ray job costs about a minute here."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from hdet_ray.ray.trajectory import read_trajectory

pytestmark = [pytest.mark.ray, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]


def test_jobs_api_refuses_a_client_without_the_token(token_head):
    env = {k: v for k, v in token_head.env.items() if k not in ("RAY_AUTH_TOKEN",)}
    env["RAY_AUTH_MODE"] = "disabled"
    done = subprocess.run(
        ["ray", "job", "list", "--address", token_head.address],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "401" in done.stdout + done.stderr or "nauthorized" in done.stdout + done.stderr


def test_hdet_submit_waits_for_the_job(token_head, tmp_path, capsys):
    from hdet_ray.cli import main

    spec = (
        '{"name": "sub", "task": "digits", "task_options": {"width": 16, "depth": 1}, "replicas": 2, '
        '"steps": 20, "sync_every": 10}'
    )
    os.environ["RAY_AUTH_MODE"] = "token"
    try:
        rc = main(
            [
                "submit",
                "--spec-json",
                spec,
                "--address",
                token_head.address,
                "--token",
                token_head.token,
                "--working-dir",
                str(REPO),
                "--storage-path",
                str(tmp_path),
                "--wait",
            ]
        )
    finally:
        os.environ.pop("RAY_AUTH_MODE", None)
    out = capsys.readouterr().out
    assert rc == 0, out[-3000:]
    assert [r["window"] for r in read_trajectory(tmp_path / "sub" / "trajectory.jsonl")] == [0, 1]
