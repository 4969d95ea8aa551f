"""The suite's two Ray fixtures, each started once per test session and only when a test asks for it.

- `local_ray`: a local Ray in this test process (`ray.init(address="local")`, 4 logical CPUs, its own
  temp dir). Tests and the code they call share it (`hdet_ray.ray.run_job` uses an initialised Ray);
  nothing may call `ray.shutdown()` on it.
- `token_head`: a separate token-auth Ray head with its Jobs API (`ray start --head --block`, its own
  ports, temp dir and token), started and ended by `service.ray_head.EmbeddedHead`, the same code the
  service uses for its embedded default. Only that head's process group is ended, never `ray stop`.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# Ray Train's controller polls its workers every 2 s and starts a preemption watcher (an actor) for each
# run; with ~30 Ray Train runs on a 2-CPU machine the suite paid seconds per run for both. The tests poll
# every 0.5 s and run without the watcher (nothing is preempted here). Set at import, before any Ray
# starts, so the heads, services and job drivers the tests start inherit them.
os.environ.setdefault("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", "0.5")
os.environ.setdefault("RAY_TRAIN_ENABLE_PREEMPTION_WATCHER", "0")


def _pythonpath(*extra: Path) -> str:
    return os.pathsep.join(p for p in (*map(str, extra), os.environ.get("PYTHONPATH", "")) if p)


@pytest.fixture(scope="session")
def local_ray():
    """The `ray` module, initialised; its workers import this tree and tests/ray's helper tasks."""
    ray = pytest.importorskip("ray")
    ray.init(
        address="local",
        num_cpus=4,
        include_dashboard=False,
        log_to_driver=False,
        _temp_dir=tempfile.mkdtemp(prefix="hdet-t-"),  # short: Ray's socket paths have a length limit
        runtime_env={
            "env_vars": {"PYTHONPATH": _pythonpath(REPO, REPO / "tests" / "ray"), "OMP_NUM_THREADS": "1"}
        },
    )
    yield ray
    ray.shutdown()


@dataclass(frozen=True)
class TokenHead:
    """A running token-auth head: its Jobs API address, its token, and an environment for clients
    (`ray job ...`, the Jobs SDK) that carries the token and sees this tree."""

    address: str
    token: str
    env: dict[str, str]


@pytest.fixture(scope="session")
def token_head(tmp_path_factory) -> Iterator[TokenHead]:
    pytest.importorskip("ray")
    from service.ray_head import EmbeddedHead

    head = EmbeddedHead(tmp_path_factory.mktemp("token-head"), num_cpus=4)
    info = head.start()
    env = {
        **os.environ,
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN": head.token,
        "PYTHONPATH": _pythonpath(REPO),
    }
    try:
        yield TokenHead(info.dashboard_url, head.token, env)
    finally:
        head.stop(timeout_s=10)  # then its whole process group is killed
