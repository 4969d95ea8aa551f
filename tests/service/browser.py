"""Headless Chromium driven over the DevTools protocol (aiohttp's websocket client), for dashboard tests."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import shutil
import subprocess
import time

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


class DevToolsError(AssertionError):
    """A DevTools command answered with an error (its reply is the message)."""


# what an evaluation answers while the page is navigating (a click on a link): the old document is gone and
# the new one's context is not there yet
_NAVIGATING = (
    "Inspected target navigated or closed",
    "Execution context was destroyed",
    "Cannot find context",
)


class Page:
    def __init__(self, ws) -> None:
        self.ws, self.next_id, self.errors, self.pending = ws, 0, [], {}

    async def pump(self):
        async for msg in self.ws:
            data = json.loads(msg.data)
            if "id" in data and data["id"] in self.pending:
                self.pending.pop(data["id"]).set_result(data)
            elif data.get("method") == "Runtime.exceptionThrown":
                self.errors.append(
                    data["params"]["exceptionDetails"].get("exception", {}).get("description")
                    or data["params"]["exceptionDetails"]["text"]
                )
            elif data.get("method") == "Runtime.consoleAPICalled" and data["params"]["type"] == "error":
                self.errors.append(str(data["params"]["args"]))
            elif data.get("method") == "Log.entryAdded" and data["params"]["entry"]["level"] == "error":
                self.errors.append(data["params"]["entry"]["text"])

    async def send(self, method, **params):
        self.next_id += 1
        fut = asyncio.get_running_loop().create_future()
        self.pending[self.next_id] = fut
        await self.ws.send_str(json.dumps({"id": self.next_id, "method": method, "params": params}))
        reply = await asyncio.wait_for(fut, 30)
        if "error" in reply:
            raise DevToolsError(reply)
        return reply["result"]

    async def eval(self, expr):
        result = await self.send("Runtime.evaluate", expression=expr, returnByValue=True, awaitPromise=True)
        return result["result"].get("value")

    async def wait_for(self, expr, timeout_s=30):
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                if await self.eval(expr):
                    return
            except DevToolsError as e:  # a navigation under way is "not yet"; any other error is the test's
                if not any(text in str(e) for text in _NAVIGATING):
                    raise
            await asyncio.sleep(0.2)
        raise AssertionError(f"timed out waiting for {expr}")


def start_chromium(profile):
    proc = subprocess.Popen(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={profile}",
            "--remote-debugging-port=0",
            "--window-size=1280,900",
            "about:blank",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    port_file = profile / "DevToolsActivePort"
    deadline = time.monotonic() + 60
    while not (port_file.exists() and port_file.read_text().strip()):
        assert proc.poll() is None and time.monotonic() < deadline, "chromium did not start"
        time.sleep(0.1)
    return proc, int(port_file.read_text().split()[0])


@contextlib.asynccontextmanager
async def signed_in(server, port):
    """A page of the Chromium at `port`, signed in to `server` through its login form.

    On exit it fails the test if the page raised a JS exception or logged a console error."""
    import aiohttp

    async with aiohttp.ClientSession() as http:
        targets = await (await http.get(f"http://127.0.0.1:{port}/json/list")).json()
        ws_url = next(t for t in targets if t["type"] == "page")["webSocketDebuggerUrl"]
        async with http.ws_connect(ws_url, max_msg_size=0) as ws:
            page = Page(ws)
            pump = asyncio.create_task(page.pump())
            for domain in ("Runtime", "Log", "Page"):
                await page.send(f"{domain}.enable")
            await page.send("Page.navigate", url=f"{server.url}/login")
            await page.wait_for("document.readyState === 'complete' && !!document.getElementById('token')")
            await page.eval(
                f"document.getElementById('token').value = {json.dumps(server.token)};"
                "document.querySelector('form').submit(); true"
            )
            try:
                yield page
                assert page.errors == [], page.errors
            finally:
                pump.cancel()


async def screenshot(page, path) -> None:
    path.write_bytes(base64.b64decode((await page.send("Page.captureScreenshot"))["data"]))
