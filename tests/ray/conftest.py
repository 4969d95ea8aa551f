"""Shared pieces of the Ray layer's tests: a real HTTP ingest endpoint and a module-scoped local Ray."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from ingest_server import IngestServer

HERE = Path(__file__).resolve().parent


@pytest.fixture
def ingest():
    server = IngestServer(fail_first=2)
    yield server
    server.close()


@pytest.fixture(scope="module")
def local_ray():
    """One local Ray per test module, on its own temp dir; workers can import tests/ray's helper tasks."""
    import ray

    pythonpath = os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH", "")) if p)
    ray.init(address="local", num_cpus=4, include_dashboard=False, log_to_driver=False,
             _temp_dir=tempfile.mkdtemp(prefix="hdet-t-"),
             runtime_env={"env_vars": {"PYTHONPATH": pythonpath, "OMP_NUM_THREADS": "1"}})
    yield ray
    ray.shutdown()
