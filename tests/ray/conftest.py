"""Shared pieces of the Ray layer's tests: a real HTTP ingest endpoint. (The local Ray is the suite's
session fixture `local_ray`, in tests/conftest.py.)"""

from __future__ import annotations

import pytest
from ingest_server import IngestServer


@pytest.fixture
def ingest():
    server = IngestServer(fail_first=2)
    yield server
    server.close()
