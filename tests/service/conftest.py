"""Real HTTP servers for the service tests: uvicorn on a free local port, in a thread of the test process."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import httpx
import pytest
import uvicorn

from service import Settings, create_app
from service.backends import MemoryJobs
from service.ray_head import listening_socket

TOKEN = "test-token-0123456789abcdef"


@dataclass
class Server:
    url: str
    token: str
    app: object
    backend: object
    server: uvicorn.Server
    thread: threading.Thread

    def client(self, token: str | None = "default", **kw) -> httpx.Client:
        token = self.token if token == "default" else token
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30, **kw)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=120)


def start_server(settings: Settings, backend=None, timeout_s: float = 180) -> Server:
    # the port is held before the lifespan starts a Ray head, whose processes bind ports of their own
    sock = listening_socket("127.0.0.1", 0)
    port = sock.getsockname()[1]
    settings = settings.model_copy(update={"public_url": settings.public_url or f"http://127.0.0.1:{port}"})
    app = create_app(settings, backend=backend)
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout_s
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the service did not start")
        time.sleep(0.1)
    return Server(f"http://127.0.0.1:{port}", settings.token or "", app, backend, server, thread)


@pytest.fixture(scope="module")
def memory_server(tmp_path_factory):
    """The service with the in-memory backend: every HTTP behaviour, no Ray (that is test_e2e's part)."""
    backend = MemoryJobs()
    settings = Settings(
        token=TOKEN,
        data_dir=tmp_path_factory.mktemp("svc"),
        poll_interval_s=0.2,
        sse_keepalive_s=1.0,
        max_body_bytes=64 * 1024,
    )
    server = start_server(settings, backend)
    yield server
    server.stop()
