"""A real HTTP server speaking the service's ingest route, for the push tests."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class IngestServer:
    """A real HTTP server speaking the service's ingest route; upserts by window like the service does.

    The first `fail_first` POSTs answer 503, so the pusher's retry path runs.
    """

    def __init__(self, token: str = "secret", fail_first: int = 0) -> None:
        self.token, self.fail_first = token, fail_first
        self.requests: list[dict] = []
        self.by_job: dict[str, dict[int, dict]] = {}
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests.append(
                    {
                        "path": self.path,
                        "auth": self.headers.get("Authorization"),
                        "windows": [r["window"] for r in body["records"]],
                    }
                )
                ok_auth = self.headers.get("Authorization") == f"Bearer {server.token}"
                if len(server.requests) <= server.fail_first or not ok_auth:
                    self.send_response(503 if ok_auth else 401)
                    self.end_headers()
                    return
                job = self.path.split("/")[3]
                for r in body["records"]:
                    server.by_job.setdefault(job, {})[r["window"]] = r
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(b'{"ok": true}')

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
