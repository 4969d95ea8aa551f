"""The REST API over a real HTTP server and a real SQLite file, with the in-memory backend (no Ray):
auth on every /v1 route, bad input, idempotent ingest, SSE resume, body limits, metrics."""

from __future__ import annotations

import json
import shlex

import httpx
import pytest

from hdet_ray.spec import JobSpec
from tests.service.synthetic import record

SPEC = {"name": "t", "steps": 100, "sync_every": 10, "replicas": 3}


def records(windows, spec=SPEC):
    js = JobSpec.parse(spec)
    return [record(js, w).to_dict() for w in windows]


@pytest.fixture(scope="module")
def job(memory_server):
    with memory_server.client() as c:
        created = c.post("/v1/jobs", json=SPEC)
    assert created.status_code == 201, created.text
    return created.json()


def ingest_token(server, job_id):
    """The per-job token as the job receives it (the file the spec of the backend's command names)."""
    words = shlex.split(server.backend.entrypoints[job_id])
    with open(json.loads(words[words.index("--spec-json") + 1])["service"]["token_file"]) as f:
        return f.read().strip()


def v1_routes(routes):
    """(method, path) of every /v1 route, through included routers (FastAPI wraps them)."""
    for route in routes:
        inner = getattr(route, "original_router", None)
        if inner is not None:
            yield from v1_routes(inner.routes)
        elif getattr(route, "path", "").startswith("/v1"):
            for method in route.methods - {"HEAD"}:
                yield method, route.path


def test_every_v1_route_needs_a_token(memory_server, job):
    routes = list(v1_routes(memory_server.app.routes))
    assert len(routes) == 14  # jobs 8, studies 5, tasks 1
    for method, path in routes:
        url = path.replace("{job_id}", job["id"]).replace("{study_id}", "study-any")
        with memory_server.client(token=None) as c:
            assert c.request(method, url).status_code == 401, (method, path)
        with memory_server.client(token="not-the-token-at-all") as c:
            assert c.request(method, url).status_code == 403, (method, path)


def test_submit_rejects_code_and_names_the_field(memory_server):
    with memory_server.client() as c:
        for body, field in [
            ({"task": "os:system"}, ["body", "task"]),
            ({"steps": 0}, ["body", "steps"]),
            ({"storage_path": "/etc"}, ["body", "storage_path"]),
            ({"replicas": 5000}, ["body", "replicas"]),
            ({"bogus": 1}, ["body", "bogus"]),
        ]:
            r = c.post("/v1/jobs", json=body)
            assert r.status_code == 422, body
            assert r.json()["detail"][0]["loc"] == field
        r = c.post("/v1/jobs", json={"steps": 10, "sync_every": 20})
        assert r.status_code == 422 and "sync_every" in r.json()["detail"][0]["msg"]
        assert (
            c.post("/v1/jobs", content=b"{not json", headers={"content-type": "application/json"}).status_code
            == 422
        )


def test_unknown_job_is_404_and_finished_job_stop_is_409(memory_server, job):
    with memory_server.client() as c:
        assert c.get("/v1/jobs/hdet-nope").status_code == 404
        assert c.post("/v1/jobs/hdet-nope/stop").status_code == 404
        other = c.post("/v1/jobs", json=SPEC).json()["id"]
        stopped = c.post(f"/v1/jobs/{other}/stop")
        assert stopped.status_code == 200 and stopped.json()["status"] == "STOPPED"
        again = c.post(f"/v1/jobs/{other}/stop")
        assert again.status_code == 409 and "already ended (STOPPED)" in again.json()["detail"]
        page = c.get("/v1/jobs", params={"status": "STOPPED"}).json()
        assert [j["id"] for j in page["items"]] == [other] and page["total"] == 1
        assert c.get("/v1/jobs", params={"status": "DONE"}).status_code == 422


def test_ingest_is_per_job_and_idempotent_by_window(memory_server, job):
    token = ingest_token(memory_server, job["id"])
    with memory_server.client(token=token) as c:
        url = f"/v1/jobs/{job['id']}/ingest"
        assert c.post(url, json={"records": records([0, 1, 2])}).json() == {"received": 3, "changed": 3}
        assert c.post(url, json={"records": records([1, 2])}).json() == {"received": 2, "changed": 0}
        changed = records([2])
        changed[0]["losses"][0] = 9.0
        assert c.post(url, json={"records": changed}).json()["changed"] == 1
        bad = records([3])
        del bad[0]["losses"]
        r = c.post(url, json={"records": bad})
        assert r.status_code == 422 and r.json()["detail"][0]["loc"][:2] == ["body", "records"]
        assert c.post(url, json={"records": [{"window": -1, "step": 0}]}).status_code == 422
    with memory_server.client(token=token) as c:  # the job's token is not the API token
        assert c.get(f"/v1/jobs/{job['id']}").status_code == 403
    with memory_server.client() as c:
        traj = c.get(f"/v1/jobs/{job['id']}/trajectory").json()
        assert [r["window"] for r in traj["records"]] == [0, 1, 2]
        assert traj["records"][2]["losses"][0] == 9.0
        assert [r["window"] for r in c.get(f"/v1/jobs/{job['id']}/trajectory?after=1").json()["records"]] == [
            2
        ]
        assert c.get(f"/v1/jobs/{job['id']}").json()["progress"]["windows"] == 3


def read_events(response, until_window):
    """(id, event, data) of each SSE event up to the window `until_window` or the end event."""
    events, current = [], {}
    for line in response.iter_lines():
        if line == "":
            if "event" in current:
                events.append((current.get("id"), current["event"], json.loads(current["data"])))
                if current["event"] == "end" or events[-1][2].get("window") == until_window:
                    return events
            current = {}
        elif not line.startswith(":"):
            key, _, value = line.partition(": ")
            current[key] = value
    return events


def test_stream_resumes_without_missing_or_repeating(memory_server):
    with memory_server.client() as c:
        job_id = c.post("/v1/jobs", json=SPEC).json()["id"]
    token = ingest_token(memory_server, job_id)
    push = httpx.Client(base_url=memory_server.url, headers={"Authorization": f"Bearer {token}"})
    push.post(f"/v1/jobs/{job_id}/ingest", json={"records": records([0, 1])})
    with memory_server.client() as c:
        with c.stream("GET", f"/v1/jobs/{job_id}/stream") as r:
            first = read_events(r, until_window=1)
        assert [e[2]["window"] for e in first] == [0, 1]
        last_id = first[-1][0]
        # while disconnected: a new window and a re-run window 1 that came out different
        rerun = records([1, 2])
        rerun[0]["losses"][1] = 5.0
        push.post(f"/v1/jobs/{job_id}/ingest", json={"records": rerun})
        with c.stream("GET", f"/v1/jobs/{job_id}/stream", headers={"Last-Event-ID": last_id}) as r:
            second = read_events(r, until_window=2)
        assert [(e[2]["window"], e[2]["losses"][1]) for e in second] == [(1, 5.0), (2, rerun[1]["losses"][1])]
        memory_server.backend.finish(job_id)
        with c.stream("GET", f"/v1/jobs/{job_id}/stream", params={"last_event_id": second[-1][0]}) as r:
            tail = read_events(r, until_window=None)
        assert tail == [(None, "end", {"status": "SUCCEEDED"})]
    push.close()


def test_body_limit_and_metrics(memory_server, job):
    with memory_server.client() as c:
        huge = {"name": "x", "task_options": {"pad": "a" * (70 * 1024)}}
        r = c.post("/v1/jobs", json=huge)
        assert r.status_code == 413 and "limit is 65536 bytes" in r.json()["detail"]
        assert c.get("/healthz").json()["database"] == "sqlite"
        text = c.get("/metrics").text
    assert 'hdet_jobs{status="PENDING"}' in text
    assert 'route="/v1/jobs/{job_id}"' in text and "hdet_http_request_duration_seconds_bucket" in text
    assert int(text.split("\nhdet_windows_ingested_total ")[1].split()[0]) >= 3


def test_dashboard_needs_the_token_in_a_cookie(memory_server, job):
    with httpx.Client(base_url=memory_server.url) as c:
        assert c.get("/").status_code == 303
        assert c.post("/login", data={"token": "wrong"}).status_code == 403
        r = c.post("/login", data={"token": memory_server.token})
        assert r.status_code == 303 and "HttpOnly" in r.headers["set-cookie"]
        page = c.get(f"/jobs/{job['id']}")
        assert page.status_code == 200 and job["id"] in page.text
        assert c.get(f"/v1/jobs/{job['id']}").status_code == 200  # reads with the cookie
        assert c.post(f"/v1/jobs/{job['id']}/stop").status_code == 401  # writes need the header
        assert c.get("/static/dashboard.js").status_code == 200


def test_a_job_without_sync_every_records_the_period_it_runs_with(memory_server):
    # the default sync period (steps // 20, in [1, 25]) is written into the stored spec and the job's own
    # spec, so the record and the dashboard say 5, not null, and a later default cannot change the job
    with memory_server.client() as c:
        created = c.post("/v1/jobs", json={"name": "default-sync", "steps": 100, "replicas": 2})
        assert created.status_code == 201, created.text
        job_id = created.json()["id"]
        body = c.get(f"/v1/jobs/{job_id}").json()
    assert body["spec"]["sync_every"] == 5 and body["progress"]["total_windows"] == 20
    words = shlex.split(memory_server.backend.entrypoints[job_id])
    assert json.loads(words[words.index("--spec-json") + 1])["sync_every"] == 5


def test_a_pushed_window_marks_a_pending_job_running_before_the_next_poll(tmp_path):
    # no poll runs here (no app), so only the push itself can move the status; the restart test read a job
    # with windows as PENDING when it asked the restarted service before its first poll
    from service.backends import MemoryJobs
    from service.events import Broker
    from service.jobs import JobService
    from service.metrics import Metrics
    from service.settings import Settings
    from service.storage import Store
    from tests.service.conftest import TOKEN

    store = Store(f"sqlite:///{tmp_path / 'hdet.db'}")
    jobs = JobService(Settings(token=TOKEN, data_dir=tmp_path), store, MemoryJobs(), Broker(), Metrics())
    job = jobs.submit(SPEC, "http://127.0.0.1:1")
    assert job.status == "PENDING" and "no window yet" in job.message
    assert jobs.ingest(job, records([0])) == 1
    assert (store.get_job(job.id).status, store.get_job(job.id).message) == ("RUNNING", "")
    # a job the poll already ended stays ended when a late push arrives
    store.set_status(job.id, "SUCCEEDED", "done")
    assert jobs.ingest(job, records([1])) == 1 and store.get_job(job.id).status == "SUCCEEDED"
