"""A user's own task through the service: the example plugin package (examples/plugin_task) is installed
into a temporary directory, put on the path of this process and of the Ray head the service starts, and
then listed by GET /v1/tasks and run by POST /v1/jobs to SUCCEEDED (real service, real embedded Ray)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from service import Settings
from service.backends import MemoryJobs
from tests.service.conftest import TOKEN, start_server

PLUGIN = Path(__file__).resolve().parents[2] / "examples" / "plugin_task"
JOB = {
    "name": "plugin",
    "task": "sine",
    "task_options": {"width": 16},
    "replicas": 2,
    "steps": 60,
    "sync_every": 20,
    "seed": 3,
}


@pytest.fixture(scope="module")
def plugin_path(tmp_path_factory):
    """`pip install --target` of a copy of the example (the build leaves nothing in the source tree)."""
    root = tmp_path_factory.mktemp("plugin")
    shutil.copytree(PLUGIN, root / "src")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(root / "site"),
            str(root / "src"),
        ],
        check=True,
        timeout=300,
    )
    old_path, old_env = list(sys.path), os.environ.get("PYTHONPATH")
    sys.path.insert(0, str(root / "site"))
    os.environ["PYTHONPATH"] = os.pathsep.join([str(root / "site"), *filter(None, [old_env])])
    yield root / "site"
    sys.path[:] = old_path
    if old_env is None:
        os.environ.pop("PYTHONPATH")
    else:
        os.environ["PYTHONPATH"] = old_env


def test_registry_lists_and_refuses(plugin_path, tmp_path):
    from hdet_ray.tasks import make_task, registered_names

    assert registered_names() == ["bytelm", "digits", "sine"]
    assert make_task("sine", width=4).model(0)[0].out_features == 4
    with pytest.raises(ValueError, match="bad task_options"):
        make_task("sine", depth=3)
    server = start_server(Settings(token=TOKEN, data_dir=tmp_path, poll_interval_s=0.2), MemoryJobs())
    try:
        with server.client() as c:
            items = {t["name"]: t for t in c.get("/v1/tasks").json()["items"]}
            assert sorted(items) == ["bytelm", "digits", "sine"]
            sine = items["sine"]
            assert sine["source"] == "entry point hdet_plugin_example:make_task"
            assert sine["options"]["properties"]["width"] == {
                "default": 32,
                "title": "Width",
                "type": "integer",
            }
            assert sine["options"]["additionalProperties"] is False
            assert items["digits"]["options"]["properties"]["depth"]["default"] == 2
            assert (
                c.get("/v1/tasks", headers={"Authorization": "Bearer wrong-token-entirely"}).status_code
                == 403
            )

            r = c.post("/v1/jobs", json={**JOB, "task_options": {"width": "wide"}})
            assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "task_options"], r.text
            assert "width" in r.json()["detail"][0]["msg"]
            for code in ("hdet_plugin_example:make_task", "os:system", "nosuchtask"):
                r = c.post("/v1/jobs", json={**JOB, "task": code})  # code is never accepted over REST
                assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "task"], r.text
            r = c.post(
                "/v1/jobs", json={**JOB, "log_to": {"tensorboard": "/tmp/anywhere"}}
            )  # no paths over REST
            assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "log_to"], r.text
            assert c.post("/v1/jobs", json=JOB).status_code == 201
    finally:
        server.stop()


def test_a_plugin_that_does_not_load_is_listed_with_its_error(plugin_path, tmp_path, monkeypatch):
    """A distribution whose entry point names a missing module: the others are still listed and usable."""
    info = tmp_path / "site" / "broken_plugin-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[hdet_ray.tasks]\nbroken = no_such_module_here:make_task\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    server = start_server(Settings(token=TOKEN, data_dir=tmp_path / "svc", poll_interval_s=0.2), MemoryJobs())
    try:
        with server.client() as c:
            items = {t["name"]: t for t in c.get("/v1/tasks").json()["items"]}
            assert sorted(items) == ["broken", "bytelm", "digits", "sine"]
            assert "does not load" in items["broken"]["error"] and items["sine"]["error"] is None
            r = c.post("/v1/jobs", json={**JOB, "task": "broken"})
            assert r.status_code == 422 and "does not load" in r.json()["detail"][0]["msg"], r.text
    finally:
        server.stop()


@pytest.mark.ray
@pytest.mark.slow
def test_plugin_job_runs_through_the_service(plugin_path, tmp_path):
    settings = Settings(
        token=TOKEN,
        data_dir=tmp_path,
        poll_interval_s=0.5,
        ray_num_cpus=2,
        entrypoint=f"{sys.executable} -m hdet_ray run --spec-json {{spec_json}}",
    )
    server = start_server(settings)  # its Ray head inherits PYTHONPATH, hence the plugin
    try:
        with server.client() as c:
            created = c.post("/v1/jobs", json=JOB)
            assert created.status_code == 201, created.text
            job_id = created.json()["id"]
            deadline = time.monotonic() + 300
            while (job := c.get(f"/v1/jobs/{job_id}").json())["status"] not in (
                "SUCCEEDED",
                "FAILED",
                "STOPPED",
            ):
                assert time.monotonic() < deadline, job
                time.sleep(1)
            logs = c.get(f"/v1/jobs/{job_id}/logs", params={"tail": 40}).text
            assert job["status"] == "SUCCEEDED", logs
            records = c.get(f"/v1/jobs/{job_id}/trajectory").json()["records"]
            assert [r["window"] for r in records] == [0, 1, 2]
            assert all(len(r["losses"]) == 2 for r in records)
            assert records[-1]["step"] == 60
            assert 0 < job["latest_metrics"]["val_mse"] < 1.0  # the plugin's own metric came back
    finally:
        server.stop()
