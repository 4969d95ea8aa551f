"""The dashboard in Debian's headless Chromium, driven over the DevTools protocol (aiohttp's websocket
client, which ray[default] brings). Signs in through the login form, opens a running job's page, pushes
windows through ingest while it is open, waits until the plot shows them, saves a screenshot under the
test's tmp dir, and fails on any JS exception or console error. The job runs on the in-memory backend:
the page only sees the HTTP API, which is the same either way."""

from __future__ import annotations

import asyncio
import shutil

import httpx
import pytest

from tests.service.browser import screenshot, signed_in, start_chromium
from tests.service.test_api import SPEC, ingest_token, records

pytestmark = pytest.mark.skipif(not shutil.which("chromium"), reason="Debian's chromium is not installed")
aiohttp = pytest.importorskip("aiohttp")


def test_dashboard_plots_live_windows(memory_server, tmp_path):
    with memory_server.client() as c:
        job_id = c.post("/v1/jobs", json=SPEC).json()["id"]
    push = httpx.Client(
        base_url=memory_server.url, headers={"Authorization": f"Bearer {ingest_token(memory_server, job_id)}"}
    )
    push.post(f"/v1/jobs/{job_id}/ingest", json={"records": records([0])}).raise_for_status()
    proc, port = start_chromium(tmp_path / "profile")
    try:
        asyncio.run(drive(memory_server, job_id, push, port, tmp_path / "dashboard.png"))
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        push.close()
    assert (tmp_path / "dashboard.png").stat().st_size > 10_000


async def drive(server, job_id, push, port, shot):
    async with signed_in(server, port) as page:
        await page.wait_for("location.pathname === '/' && !!document.querySelector('#jobs tbody tr a')")
        await page.send("Page.navigate", url=f"{server.url}/jobs/{job_id}")
        await page.wait_for(
            "document.getElementById('plots') && document.getElementById('plots').dataset.windows === '1'"
        )
        push.post(f"/v1/jobs/{job_id}/ingest", json={"records": records([1, 2])}).raise_for_status()
        await page.wait_for("+document.getElementById('plots').dataset.windows >= 2")
        await page.wait_for("document.getElementById('status').textContent === 'RUNNING'")
        paths = await page.eval("document.querySelectorAll('#plots svg path').length")
        assert paths >= 3 + 3  # lr: base + 3 replicas; losses: 3 replicas
        await asyncio.sleep(0.5)
        await screenshot(page, shot)
