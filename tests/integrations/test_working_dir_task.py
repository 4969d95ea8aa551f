"""docs/running.md's recipe: `ray job submit --runtime-env runtime_env.yaml` whose `working_dir` holds a
user's task module and spec, against a real token-auth Ray head (`token_head` in tests/conftest.py:
its own ports and temp dir, ended by its process group)."""

from __future__ import annotations

import subprocess
import textwrap

import pytest

from hdet_ray.ray.trajectory import read_trajectory

pytestmark = [pytest.mark.ray, pytest.mark.slow]

TASK = '''
from hdet_ray.tasks import Digits


def make_task(width: int = 16):
    """digits with a one-layer MLP: stands in for a user's own model"""
    return Digits(width=width, depth=1)
'''


def test_task_module_travels_in_working_dir(token_head, tmp_path):
    project = tmp_path / "my_project"
    project.mkdir()
    (project / "my_task.py").write_text(TASK)
    (project / "spec.yaml").write_text(
        textwrap.dedent("""\
        name: mine
        task: my_task:make_task
        task_options: {width: 8}
        replicas: 2
        steps: 20
        sync_every: 10
        """)
    )
    (tmp_path / "runtime_env.yaml").write_text("working_dir: ./my_project\n")
    runs = tmp_path / "runs"
    cmd = [
        "ray",
        "job",
        "submit",
        "--address",
        token_head.address,
        "--runtime-env",
        "runtime_env.yaml",
        "--",
        "python",
        "-m",
        "hdet_ray",
        "run",
        "spec.yaml",
        "--storage-path",
        str(runs),
    ]
    done = subprocess.run(
        cmd, check=False, cwd=tmp_path, env=token_head.env, capture_output=True, text=True, timeout=400
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    records = read_trajectory(runs / "mine" / "trajectory.jsonl")
    assert [r["window"] for r in records] == [0, 1] and all(len(r["losses"]) == 2 for r in records)
    assert (runs / "mine" / "summary.json").exists()
