"""Schemathesis over every operation of the OpenAPI schema, against the real server (memory backend:
fuzzing would otherwise submit hundreds of real Ray jobs; the Ray path is test_e2e_ray's).
No response may be a 5xx or differ from the schema."""

from __future__ import annotations

import zlib

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.service.test_api import SPEC


@pytest.fixture(scope="module")
def api_schema(memory_server):
    with memory_server.client() as c:
        job_id = c.post("/v1/jobs", json=SPEC).json()["id"]
    memory_server.backend.finish(job_id)  # an ended job: its stream ends instead of waiting
    memory_server.fuzz_job = job_id
    return schemathesis.openapi.from_url(f"{memory_server.url}/openapi.json")


schema = schemathesis.pytest.from_fixture("api_schema")


@schema.parametrize()
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
def test_api_conforms_to_its_schema(case, memory_server):
    # half the cases hit a real job; crc32, unlike hash(), splits them the same way in every run
    if "job_id" in (case.path_parameters or {}) and zlib.crc32(repr(case.query).encode()) % 2:
        case.path_parameters["job_id"] = memory_server.fuzz_job
    case.call_and_validate(
        base_url=memory_server.url,
        headers={"Authorization": f"Bearer {memory_server.token}"},
        timeout=30,
        checks=[
            not_a_server_error,
            status_code_conformance,
            content_type_conformance,
            response_schema_conformance,
        ],
    )
