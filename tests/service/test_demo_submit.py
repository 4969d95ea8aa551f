"""`hdet demo` when the service does not take its job: one clear line and a FAILED status, not an HTTP
client's traceback. A real HTTP server on a free port refuses the submission with a 500 (a service that
cannot store the job answers so)."""

from __future__ import annotations

import argparse
import http.server
import json
import threading

from service import demo


class _Refuses(http.server.BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = json.dumps({"detail": "Internal Server Error"}).encode()
        self.send_response(500)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def test_a_refused_submission_ends_the_demo_with_one_line_and_no_traceback(capsys, tmp_path):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Refuses)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        args = argparse.Namespace(timeout=5.0, exit_when_done=True)
        status = demo._follow(args, url, thread, "token", tmp_path)
    finally:
        server.shutdown()
    out = capsys.readouterr().out
    assert status == "FAILED"
    assert "hdet demo: the service did not take the demo job" in out and "500" in out
    assert "Traceback" not in out and "dashboard:" not in out
