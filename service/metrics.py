"""Prometheus text exposition (format 0.0.4) of a few counters and a latency histogram, and the ASGI
middleware that times requests by route template (not raw path, so job ids do not explode the labels)."""

from __future__ import annotations

import threading
import time
from collections import defaultdict

BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class Metrics:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.windows_ingested = 0
        self._hist: dict[tuple[str, str, str], list[float]] = defaultdict(lambda: [0.0] * (len(BUCKETS) + 2))

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        with self._lock:
            h = self._hist[(method, route, str(status))]
            for i, le in enumerate(BUCKETS):
                if seconds <= le:
                    h[i] += 1
            h[-2] += 1  # count
            h[-1] += seconds  # sum

    def add_windows(self, n: int) -> None:
        with self._lock:
            self.windows_ingested += n

    def render(self, jobs_by_status: dict[str, int], streams: int) -> str:
        out = ["# HELP hdet_jobs Jobs known to the service, by status.", "# TYPE hdet_jobs gauge"]
        out += [f'hdet_jobs{{status="{s}"}} {n}' for s, n in sorted(jobs_by_status.items())]
        out += [
            "# HELP hdet_windows_ingested_total Window records stored or changed since start.",
            "# TYPE hdet_windows_ingested_total counter",
            f"hdet_windows_ingested_total {self.windows_ingested}",
            "# HELP hdet_sse_streams Open trajectory streams.",
            "# TYPE hdet_sse_streams gauge",
            f"hdet_sse_streams {streams}",
            "# HELP hdet_http_request_duration_seconds HTTP request latency by route template.",
            "# TYPE hdet_http_request_duration_seconds histogram",
        ]
        with self._lock:
            items = sorted((k, list(v)) for k, v in self._hist.items())
        for (method, route, status), h in items:
            labels = f'method="{method}",route="{_escape(route)}",status="{status}"'
            for i, le in enumerate(BUCKETS):
                out.append(f'hdet_http_request_duration_seconds_bucket{{{labels},le="{le}"}} {int(h[i])}')
            out.append(f'hdet_http_request_duration_seconds_bucket{{{labels},le="+Inf"}} {int(h[-2])}')
            out.append(f"hdet_http_request_duration_seconds_count{{{labels}}} {int(h[-2])}")
            out.append(f"hdet_http_request_duration_seconds_sum{{{labels}}} {h[-1]:.6f}")
        return "\n".join(out) + "\n"


def _escape(s: str) -> str:
    return s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class TimingMiddleware:
    """Times each HTTP request until its response starts (streams count their time to first byte)."""

    def __init__(self, app, metrics: Metrics) -> None:
        self.app, self.metrics = app, metrics

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        start = time.perf_counter()
        status = 500

        started = False

        def observe(code: int) -> None:
            route = getattr(scope.get("route"), "path", None) or "unmatched"
            self.metrics.observe(scope["method"], route, code, time.perf_counter() - start)

        async def timed_send(message):
            nonlocal status, started
            if message["type"] == "http.response.start":
                status, started = message["status"], True
                observe(status)
            await send(message)

        try:
            await self.app(scope, receive, timed_send)
        except Exception:
            if not started:  # the server's error middleware, outside this one, answers 500: count it here
                observe(500)
            raise


class BodyLimitMiddleware:
    """413 for a request body over `limit` bytes, whether it declares its length or streams it (chunked):
    the body is read up to the limit before the app sees it, so the app never mistakes the cut for a
    malformed body (400)."""

    def __init__(self, app, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = dict(scope.get("headers") or [])
        length = headers.get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.limit):
            return await _too_large(send, self.limit)
        if scope.get("method") in ("GET", "HEAD", "DELETE", "OPTIONS"):
            return await self.app(scope, receive, send)
        chunks, seen = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                return
            chunks.append(message.get("body", b""))
            seen += len(chunks[-1])
            if seen > self.limit:
                return await _too_large(send, self.limit)
            if not message.get("more_body", False):
                break
        body, replayed = b"".join(chunks), False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


async def _too_large(send, limit: int) -> None:
    body = f'{{"detail":"request body too large: the limit is {limit} bytes"}}'.encode()
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})
