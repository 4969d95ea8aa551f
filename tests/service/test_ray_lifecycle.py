"""Acceptance of the job lifecycle with the real service (uvicorn on a free port) and its embedded Ray head
of 2 CPUs, running the real `python -m hdet_ray run` entrypoint:

- the default spec (4 replicas) is refused with a 422 naming `replicas`, at once;
- two jobs with the same name run side by side and both succeed (identity is the job id);
- a job forced to diverge ends FAILED with "diverged" in its message (the engine's error survives Ray);
- the ingest token is in none of: logs, messages, Ray's job list, any file others may read;
- killing the head's GCS makes /healthz 503 and the running job leave RUNNING within 60 s.
"""

from __future__ import annotations

import os
import signal
import stat
import time
from pathlib import Path

import pytest

from service import Settings
from tests.service.conftest import TOKEN, start_server
from tests.service.test_e2e_ray import ENTRYPOINT, wait_for

pytestmark = [
    pytest.mark.ray,
    pytest.mark.slow,
]
TINY = {
    "task": "digits",
    "task_options": {"width": 32, "depth": 1},
    "replicas": 1,
    "steps": 20,
    "sync_every": 10,
}


def _server(data_dir: Path):
    settings = Settings(
        token=TOKEN,
        data_dir=data_dir,
        poll_interval_s=0.5,
        entrypoint=ENTRYPOINT,
        ray_num_cpus=2,
        head_on_exit="stop",
    )
    return start_server(settings)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    server = _server(tmp_path_factory.mktemp("life"))
    yield server
    server.stop()
    assert server.app.state.ray_head.info is None


def session_processes(session: int, name: str = "") -> list[int]:
    """Pids of the live processes named `name` (any, if "") in the process session `session` (the Ray head
    runs in a session of its own); zombies are left out."""
    found = []
    for stat_file in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat_file.read_text()
        except OSError:
            continue
        comm, rest = text[text.index("(") + 1 : text.rindex(")")], text[text.rindex(")") + 2 :].split()
        # fields after comm: state ppid pgrp session
        if comm.startswith(name[:15]) and rest[0] != "Z" and int(rest[3]) == session:
            found.append(int(stat_file.parent.name))
    return found


def wait_end(c, job_id: str, timeout_s: float = 300) -> dict:
    return wait_for(
        lambda: (j := c.get(f"/v1/jobs/{job_id}").json())["finished_at"] and j,
        timeout_s,
        f"job {job_id} to end",
    )


def test_default_spec_that_cannot_fit_is_422(server):
    t0 = time.monotonic()
    with server.client() as c:
        r = c.post("/v1/jobs", json={"name": "default"})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "replicas"], r.text
    assert "the Ray cluster has 2" in r.json()["detail"][0]["msg"] and time.monotonic() - t0 < 60


def test_same_name_jobs_both_succeed_and_divergence_is_reported(server):
    with server.client() as c:
        twins = [c.post("/v1/jobs", json={**TINY, "name": "twin", "seed": s}).json()["id"] for s in (0, 1)]
        first = c.get(f"/v1/jobs/{twins[0]}").json()
        assert first["status"] == "PENDING" and first["message"].startswith("waiting for 1 CPUs"), first
        boom = c.post(  # queued behind the twins (2 CPUs): it starts when one of them ends
            "/v1/jobs",
            json={
                **TINY,
                "name": "boom",
                "steps": 40,
                "schedule": {"max_lr": 1e4},
                "controller": {"max_rollbacks": 0},
            },
        ).json()["id"]
        ends = [wait_end(c, j) for j in twins]
        logs = {j: c.get(f"/v1/jobs/{j}/logs").text for j in twins}
        assert [e["status"] for e in ends] == ["SUCCEEDED", "SUCCEEDED"], (ends, logs)
        assert [e["progress"]["windows"] for e in ends] == [2, 2]
        end = wait_end(c, boom)
        assert end["status"] == "FAILED" and "diverged" in end["message"], end
        assert "--spec-json" not in end["message"] and len(end["message"]) < 500
        texts = [c.get(f"/v1/jobs/{j}").text + c.get(f"/v1/jobs/{j}/logs").text for j in [*twins, boom]]
        texts.append(c.get("/v1/jobs").text)
    jobs = server.app.state.hdet.jobs
    tokens = [jobs.secrets(jobs.store.get_job(j))[0] for j in [*twins, boom]]
    texts.append(str(jobs.backend.client.list_jobs()))
    for token in tokens:
        assert not any(token in t for t in texts)
    roots = [jobs.settings.data_dir, Path(server.app.state.ray_head.info.temp_dir)]
    readable = []
    for root in roots:
        for d, _, files in os.walk(root):
            for f in files:
                path = Path(d) / f
                try:
                    if path.is_symlink() or not stat.S_IMODE(path.stat().st_mode) & stat.S_IROTH:
                        continue
                    data = path.read_bytes()
                except OSError:
                    continue
                readable += [str(path) for t in tokens if t.encode() in data]
    assert readable == []


def test_dead_head_is_503_and_its_job_is_lost(tmp_path):
    server = _server(tmp_path)
    try:
        with server.client() as c:
            job_id = c.post("/v1/jobs", json={**TINY, "name": "long", "steps": 4000}).json()["id"]
            wait_for(
                lambda: c.get(f"/v1/jobs/{job_id}").json()["status"] == "RUNNING", 300, "the first window"
            )
            gcs = session_processes(server.app.state.ray_head.info.pid, "gcs_server")
            assert len(gcs) == 1, gcs
            os.kill(gcs[0], signal.SIGKILL)
            t0 = time.monotonic()
            wait_for(lambda: c.get("/healthz").status_code == 503, 60, "/healthz to say 503")
            job = wait_for(
                lambda: (j := c.get(f"/v1/jobs/{job_id}").json())["status"] != "RUNNING" and j,
                60,
                "the job to leave RUNNING",
            )
            assert time.monotonic() - t0 < 60
            assert job["status"] == "FAILED" and job["message"].startswith("lost:"), job
            assert c.post("/v1/jobs", json={**TINY, "name": "late"}).status_code == 503
    finally:
        server.stop()
