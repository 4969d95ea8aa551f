"""`hdet submit SPEC`: run a job spec on a Ray cluster through the Ray Jobs API (what `ray job submit` does).

    RAY_AUTH_MODE=token hdet submit examples/specs/digits.yaml --address http://head:8265 \
        --working-dir . --wait

The entrypoint is `python -m hdet_ray run --spec-json '<spec>'`, so the cluster needs hdet-ray installed
(or `--working-dir` pointing at a checkout). On a token-auth cluster set RAY_AUTH_MODE=token (the Jobs
client then sends the token from RAY_AUTH_TOKEN or ~/.ray/auth_token), or pass `--token`.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

from hdet_ray.spec import TERMINAL, JobSpec, SpecError
from hdet_ray.spec import entrypoint as spec_entrypoint


def entrypoint(spec: JobSpec, storage_path: str | None = None) -> str:
    return spec_entrypoint(spec.model_dump_json(exclude_none=True), storage_path=storage_path)


def job_client(address: str | None = None, token: str | None = None) -> Any:
    from ray.job_submission import JobSubmissionClient

    headers = {"Authorization": f"Bearer {token}"} if token else None
    return JobSubmissionClient(
        address or os.environ.get("RAY_ADDRESS") or "http://127.0.0.1:8265", headers=headers
    )


def submit_job(
    spec: JobSpec,
    *,
    address: str | None = None,
    token: str | None = None,
    working_dir: str | None = None,
    storage_path: str | None = None,
    submission_id: str | None = None,
    client: Any = None,
) -> str:
    """Submit `spec` with the Ray Jobs API; returns the submission id."""
    client = client or job_client(address, token)
    runtime_env = {"working_dir": working_dir} if working_dir else None
    return client.submit_job(
        entrypoint=entrypoint(spec, storage_path),
        runtime_env=runtime_env,
        submission_id=submission_id,
        metadata={"hdet_job": spec.name or ""},
    )


def wait(client: Any, submission_id: str, poll_s: float = 2.0, timeout_s: float | None = None) -> str:
    """Poll until the job ends; returns its final status name."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while True:
        status = str(client.get_job_status(submission_id)).rsplit(".", 1)[-1]
        if status in TERMINAL or (deadline is not None and time.monotonic() > deadline):
            return status
        time.sleep(poll_s)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("spec", nargs="?", help="job spec file (YAML or JSON)")
    parser.add_argument("--spec-json", help="the job spec as a JSON string (instead of a file)")
    parser.add_argument("--name", help="job name (default: the spec's, or a generated id)")
    parser.add_argument(
        "--address", help="Ray dashboard address (default: RAY_ADDRESS or http://127.0.0.1:8265)"
    )
    parser.add_argument("--token", help="Ray auth token to send (default: the Jobs client's own lookup)")
    parser.add_argument("--working-dir", help="directory uploaded as the job's working dir")
    parser.add_argument("--storage-path", help="where the run is written on the cluster (default ./runs)")
    parser.add_argument("--wait", action="store_true", help="wait for the job, then print its logs")


def main(args: argparse.Namespace) -> int:
    from hdet_ray.ray.entry import load_spec

    try:
        spec = load_spec(args)
    except SpecError as e:
        print(f"hdet submit: {e}", file=sys.stderr)
        return 2
    client = job_client(args.address, args.token)
    job_id = submit_job(spec, working_dir=args.working_dir, storage_path=args.storage_path, client=client)
    print(f"submitted {job_id}\n  follow: ray job logs --follow {job_id}\n  stop:   ray job stop {job_id}")
    if not args.wait:
        return 0
    status = wait(client, job_id)
    print(client.get_job_logs(job_id), end="")
    print(f"{job_id}: {status}")
    return 0 if status == "SUCCEEDED" else 1
