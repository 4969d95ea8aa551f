"""The README's first quickstart command, `hdet demo` (what `bash scripts/demo` runs after setup), as a user
runs it: a real service with its embedded Ray head in a process of its own, a real HDET job on digits whose
windows print as they arrive, and a stop by signal that leaves nothing running.

SIGTERM is what `kill`, `timeout` and a container's stop send. The demo serves from a thread, where uvicorn
cannot take the signal itself; before the demo handled it, the process ended at once and its Ray head, which
runs in a session of its own, was left running with nothing that would ever adopt it (seen: a `timeout`
around `bash scripts/demo`).
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.service.test_ray_lifecycle import session_processes

pytestmark = [pytest.mark.ray, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]


def _lines(proc: subprocess.Popen) -> queue.Queue:
    out: queue.Queue = queue.Queue()

    def pump() -> None:
        for line in proc.stdout:
            out.put(line)
        out.put(None)

    threading.Thread(target=pump, daemon=True).start()
    return out


def _until(out: queue.Queue, seen: list[str], predicate, timeout_s: float) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            line = out.get(timeout=1)
        except queue.Empty:
            continue
        if line is None:
            break
        seen.append(line)
        if predicate(line):
            return line
    raise AssertionError("the demo did not print what was waited for; its output:\n" + "".join(seen))


def test_demo_runs_a_real_job_and_sigterm_stops_it_with_its_ray_head():
    env = {k: v for k, v in os.environ.items() if k != "HDET_DATA_DIR"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "hdet_ray", "demo"],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    out, seen, head_pid, data_dir = _lines(proc), [], None, None
    try:
        data = _until(out, seen, lambda line: line.strip().startswith("data:"), 300)
        data_dir = Path(data.split("data:", 1)[1].split(" (", 1)[0].strip())
        # a window of the real run, with its rate and both replicas' losses: the trajectory is visible
        window = _until(out, seen, lambda line: line.strip().startswith("window"), 420)
        assert " lr " in window and "losses" in window
        head_pid = json.loads((data_dir / "ray-head.json").read_text())["pid"]
        assert session_processes(head_pid), "the embedded Ray head is not running while its job is"

        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=150)
        _until(out, seen, lambda line: "stopping" in line, 10)
        assert rc == 0, "".join(seen)
        deadline = time.monotonic() + 30
        while session_processes(head_pid) and time.monotonic() < deadline:
            time.sleep(0.5)
        left = session_processes(head_pid)
        assert not left, f"processes of the Ray head's session outlived the demo: {left}"
        assert not (data_dir / "ray-head.json").exists()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
        if head_pid is not None:
            for pid in session_processes(head_pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        if data_dir is not None and data_dir.name.startswith("hdet-demo-"):
            shutil.rmtree(data_dir, ignore_errors=True)  # the demo keeps its folder for the user, a test not


@pytest.mark.parametrize("command", ["demo", "serve"])
def test_a_port_in_use_is_reported_before_anything_starts(command, tmp_path):
    # `hdet demo` and `hdet serve` listen before the service starts its Ray head, so a port taken is reported
    # at once (a port only probed first could be taken by the head's own processes before uvicorn bound it)
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = {k: v for k, v in os.environ.items() if k != "HDET_DATA_DIR"}
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "hdet_ray",
                command,
                "--port",
                str(port),
                "--data-dir",
                str(tmp_path / "d"),
            ],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == {"demo": 1, "serve": 2}[command], done.stdout + done.stderr
    assert f"hdet {command}: cannot listen on 127.0.0.1:{port}" in done.stdout and "--port" in done.stdout
    assert "starting the service" not in done.stdout and "dashboard at" not in done.stdout
    assert not (tmp_path / "d").exists()  # no data folder, no database, no Ray head
