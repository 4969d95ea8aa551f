"""Studies in the service. API checks over a real HTTP server and SQLite file with the in-memory backend
(it runs nothing: a study's record files are written here by the test, as the runner would write them);
then one real study, 3 candidates x 2 stages, through the embedded Ray head and `hdet promote`."""

from __future__ import annotations

import asyncio
import json
import math
import shlex
import shutil

import httpx
import pytest

from hdet_ray.promotion.executors import finite
from service import Settings
from tests.service.conftest import TOKEN, start_server
from tests.service.test_e2e_ray import wait_for

STUDY = {
    "name": "tiny",
    "metric": "val_loss",
    "base": {"task": "digits", "replicas": 1, "sync_every": 10, "auto_lr": False, "optimizer": "adamw"},
    "candidates": [
        {"name": "ref", "overrides": {"schedule": {"max_lr": 0.01}}},
        {"name": "fast", "overrides": {"schedule": {"max_lr": 0.03}}},
        {"name": "slow", "overrides": {"schedule": {"max_lr": 0.001}}},
    ],
    "retained": {"reference": "ref"},
    "stages": [
        {"name": "screen", "steps": 20, "seeds": [0], "advance": 1},
        {"name": "final", "steps": 40, "seeds": [1], "start": "continue"},
    ],
}


def study_arg(entrypoint: str) -> dict:
    words = shlex.split(entrypoint)
    assert words[:4] == ["python", "-m", "hdet_ray", "promote"]
    return json.loads(words[words.index("--study-json") + 1])


@pytest.fixture(scope="module")
def study(memory_server):
    with memory_server.client() as c:
        created = c.post("/v1/studies", json=STUDY)
    assert created.status_code == 201, created.text
    return created.json()


def test_submit_runs_hdet_promote_on_the_backend(memory_server, study):
    entry = memory_server.backend.entrypoints[study["id"]]
    assert study_arg(entry)["candidates"][1]["overrides"] == {"schedule": {"max_lr": 0.03}}
    words = shlex.split(entry)
    out = words[words.index("--out") + 1]
    assert out.endswith(f"/studies/{study['id']}") and words[words.index("--executor") + 1] == "inprocess"
    with memory_server.client() as c:
        got = c.get(f"/v1/studies/{study['id']}").json()
        assert (got["status"], got["record"], got["definition"]["retries"]) == ("RUNNING", None, 1)
        assert c.get(study["links"]["record_md"]).status_code == 404
        assert c.get(study["links"]["record_png"]).status_code == 404
        assert c.get("/v1/studies/study-nope").status_code == 404
        assert study["id"] in [s["id"] for s in c.get("/v1/studies").json()["items"]]


@pytest.mark.parametrize(
    "change, loc, words",
    [
        ({"stages": []}, ["body", "stages"], "at least 1"),
        ({"retained": {"reference": "nobody"}}, ["body"], "'nobody' is not a candidate"),
        ({"base": {"task": "os:system"}}, ["body", "base", "task"], "not a registered task"),
        ({"base": {"storage_path": "/etc"}}, ["body", "base", "storage_path"], "set by the service"),
        ({"base": {**STUDY["base"], "replicas": 2}}, ["body"], "replicas=2"),
        ({"base": {**STUDY["base"], "sync_every": "often"}}, ["body"], "sync_every"),
        (
            {
                "stages": [
                    {"name": "s", "steps": 10, "seeds": list(range(64)), "hosts": [str(i) for i in range(64)]}
                ]
            },
            ["body", "stages"],
            "at most 2000",
        ),
        ({"bogus": 1}, ["body", "bogus"], "Extra inputs"),
    ],
)
def test_bad_study_is_422_naming_the_field(memory_server, change, loc, words):
    with memory_server.client() as c:
        r = c.post("/v1/studies", json={**STUDY, **change})
    assert r.status_code == 422, r.text
    detail = r.json()["detail"][0]
    assert detail["loc"] == loc and words in detail["msg"], detail


def test_run_job_executor_refuses_continued_stages(memory_server):
    with memory_server.client() as c:
        r = c.post("/v1/studies", params={"executor": "run_job"}, json=STUDY)
        assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "stages", 1, "start"]
        restart = {
            **STUDY,
            "stages": [STUDY["stages"][0], {**STUDY["stages"][1], "start": "restart"}],
            "base": {**STUDY["base"], "replicas": 2},
        }
        ok = c.post("/v1/studies", params={"executor": "run_job"}, json=restart)
        assert ok.status_code == 201, ok.text
    assert "--executor run_job" in memory_server.backend.entrypoints[ok.json()["id"]]


def test_study_routes_need_the_token(memory_server, study):
    for method, path in [
        ("POST", "/v1/studies"),
        ("GET", "/v1/studies"),
        ("GET", study["links"]["self"]),
        ("GET", study["links"]["record_md"]),
        ("GET", study["links"]["record_png"]),
    ]:
        with memory_server.client(token=None) as c:
            assert c.request(method, path).status_code == 401, path
        with memory_server.client(token="not-the-token-at-all") as c:
            assert c.request(method, path).status_code == 403, path


def test_record_is_served_once_written(memory_server):
    with memory_server.client() as c:
        created = c.post("/v1/studies", json=STUDY).json()
    study_dir = memory_server.app.state.studies.out_dir(created["id"]) / STUDY["name"]
    study_dir.mkdir(parents=True)
    record = {"status": "finished", "decisions": {"final": {"winner": "fast"}}, "cells": {}}
    (study_dir / "record.json").write_text(json.dumps(record))
    (study_dir / "record.md").write_text("# Study tiny\n\nwinner: **fast**\n")
    (study_dir / "record.png").write_bytes(b"\x89PNG\r\n\x1a\nnot really")
    memory_server.backend.finish(created["id"])
    with memory_server.client() as c:
        got = c.get(created["links"]["self"]).json()
        assert got["status"] == "SUCCEEDED" and got["record"] == record and got["finished_at"]
        md = c.get(created["links"]["record_md"])
        assert md.headers["content-type"].startswith("text/markdown") and "winner: **fast**" in md.text
        png = c.get(created["links"]["record_png"])
        assert png.headers["content-type"] == "image/png" and png.content.startswith(b"\x89PNG")
        listed = {s["id"]: s for s in c.get("/v1/studies", params={"limit": 200}).json()["items"]}
        assert listed[created["id"]]["winner"] == "fast" and listed[created["id"]]["status"] == "SUCCEEDED"
    with httpx.Client(base_url=memory_server.url) as c:  # the dashboard: cookie sign-in, list and study page
        c.post("/login", data={"token": memory_server.token})
        assert 'id="studies"' in c.get("/").text
        page = c.get(created["links"]["dashboard"])
        assert page.status_code == 200 and created["id"] in page.text and "studies.js" in page.text
        assert (
            c.get(created["links"]["record_png"]).status_code == 200
        )  # the page's <img> reads with the cookie


def test_non_finite_metrics_are_stored_as_no_result():
    assert finite({"val_loss": math.nan, "acc": 1, "x": math.inf}) == {
        "val_loss": None,
        "acc": 1.0,
        "x": None,
    }


@pytest.mark.ray
@pytest.mark.slow
def test_real_study_through_embedded_ray(tmp_path):
    """The real path: the service's own Ray head, the Jobs API, `python -m hdet_ray promote --study-json`,
    3 candidates x 2 stages of the digits task; the record is served and its decisions hold."""
    settings = Settings(token=TOKEN, data_dir=tmp_path, poll_interval_s=0.5, ray_num_cpus=2)
    server = start_server(settings)
    try:
        with server.client() as c:
            created = c.post("/v1/studies", json=STUDY)
            assert created.status_code == 201, created.text
            url = created.json()["links"]["self"]
            got = wait_for(lambda: _ended(c.get(url).json()), 240, "the study to end")
            assert got["status"] == "SUCCEEDED", got["message"]
            record = got["record"]
            assert record["status"] == "finished" and list(record["decisions"]) == ["screen", "final"]
            screen, final = record["decisions"]["screen"], record["decisions"]["final"]
            assert set(screen["advanced"]) >= {"ref"} and len(screen["advanced"]) == 2  # ref + the best one
            assert final["winner"] in screen["advanced"]
            assert sorted(record["cells"]) == sorted(
                [f"screen/{c['name']}/s0" for c in STUDY["candidates"]]
                + [f"final/{name}/s1" for name in screen["advanced"]]
            ), sorted(record["cells"])
            assert all(cell["status"] == "finished" for cell in record["cells"].values())
            md = c.get(f"{url}/record.md")
            assert md.status_code == 200 and final["winner"] in md.text
            png = c.get(f"{url}/record.png")
            assert png.status_code == 200 and png.content.startswith(b"\x89PNG")
        if shutil.which("chromium"):
            _check_dashboard(server, got, tmp_path)
    finally:
        server.stop()


def _check_dashboard(server, study, tmp_path):
    """Headless Chromium: the study is listed on `/`, its page shows the Markdown record and the plot."""
    from tests.service.browser import start_chromium

    proc, port = start_chromium(tmp_path / "profile")
    try:
        asyncio.run(_drive(server, study, port, tmp_path / "study.png"))
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert (tmp_path / "study.png").stat().st_size > 10_000


async def _drive(server, study, port, shot):
    from tests.service.browser import screenshot, signed_in

    async with signed_in(server, port) as page:
        link = f"#studies tbody a[href='/studies/{study['id']}']"
        await page.wait_for(f"location.pathname === '/' && !!document.querySelector({json.dumps(link)})")
        await page.eval(f"document.querySelector({json.dumps(link)}).click(); true")
        winner = study["record"]["decisions"]["final"]["winner"]
        await page.wait_for(f"document.getElementById('record').textContent.includes({json.dumps(winner)})")
        await page.wait_for(
            "document.getElementById('plot').complete && document.getElementById('plot').naturalWidth > 100"
        )
        assert await page.eval("document.getElementById('status').textContent") == "SUCCEEDED"
        await screenshot(page, shot)


def _ended(study: dict) -> dict | None:
    return study if study["status"] in ("SUCCEEDED", "FAILED", "STOPPED") else None
