"""`hdet demo`: the quickstart. Starts the service with an embedded Ray head, submits a small `digits`
job over HTTP, prints the dashboard URL and the token, and runs until Ctrl-C (or SIGTERM, SIGHUP), which
stops the service and the Ray head it started (with a data folder given, `head_on_exit` decides).

    hdet demo                      # then open the printed URL and sign in with the printed token
    hdet demo --exit-when-done     # for tests: stop once the demo job has ended (exit 0 if it SUCCEEDED)
"""

from __future__ import annotations

import argparse
import os
import signal
import tempfile
import threading
import time
from pathlib import Path

DEMO_JOB = {
    "name": "demo-digits",
    "task": "digits",
    "replicas": 2,
    "steps": 300,
    "sync_every": 25,
}  # everything else: the defaults a user gets


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0: a free port")
    parser.add_argument(
        "--data-dir", default=None, help="default: HDET_DATA_DIR, else a new temporary folder"
    )
    parser.add_argument("--exit-when-done", action="store_true", help="stop when the demo job has ended")
    parser.add_argument(
        "--timeout", type=float, default=1800, help="with --exit-when-done: give up after this"
    )


def main(args: argparse.Namespace) -> int:
    import uvicorn

    from service.app import create_app
    from service.cli import public_url
    from service.jobs import load_or_create_token
    from service.ray_head import listening_socket
    from service.settings import Settings

    # listen before the service starts: its embedded Ray head spawns processes that bind ports of their own,
    # and a port that was only probed could be theirs by the time uvicorn bound it (seen: "address already
    # in use" on a loaded machine)
    try:
        sock = listening_socket(args.host, args.port)
    except OSError as e:
        print(
            f"hdet demo: cannot listen on {args.host}:{args.port} ({e.strerror}); --port 0 takes a free one"
        )
        return 1
    port = sock.getsockname()[1]
    env = Settings()
    update: dict[str, object] = {"public_url": public_url(args.host, port)}
    if args.data_dir or "HDET_DATA_DIR" in os.environ:
        update["data_dir"] = Path(args.data_dir) if args.data_dir else env.data_dir
    else:
        # a new folder that no later service will know, so none could adopt a head left running for its
        # unfinished jobs: stopping the demo ends its head whatever runs on it
        update |= {"data_dir": Path(tempfile.mkdtemp(prefix="hdet-demo-")), "head_on_exit": "stop"}
    settings = env.model_copy(update=update)
    data_dir = settings.data_dir
    token, _ = load_or_create_token(settings)
    settings = settings.model_copy(update={"token": token})
    server = uvicorn.Server(
        uvicorn.Config(create_app(settings), host=args.host, port=port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    # uvicorn serves from a thread here, so it cannot take SIGTERM itself: without this a `kill` or `timeout`
    # would end the process at once and leave the embedded Ray head (its own session) running
    _stop_on_terminate()
    thread.start()
    status = "RUNNING"
    try:
        print("hdet demo: starting the service and its embedded Ray head...", flush=True)
        while not server.started:
            if not thread.is_alive():
                print("hdet demo: the service did not start (see the log above)")
                return 1
            time.sleep(0.2)
        status = _follow(args, public_url(args.host, port), thread, token, data_dir)
    except KeyboardInterrupt:
        print("hdet demo: stopping", flush=True)
    finally:
        server.should_exit = True  # the service's shutdown ends its jobs and the Ray head it started
        thread.join(timeout=120)
    return 0 if (not args.exit_when_done or status == "SUCCEEDED") else 1


def _follow(args: argparse.Namespace, url: str, thread: threading.Thread, token: str, data_dir: Path) -> str:
    """Submit the demo job to the service at `url`, print its windows as they arrive; its last status seen."""
    import httpx

    client = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60)
    try:  # the service answers at once; a head whose job agent is not up yet gets the job in the background
        job = client.post("/v1/jobs", json=DEMO_JOB).raise_for_status().json()
    except httpx.HTTPError as e:
        print(f"hdet demo: the service did not take the demo job: {e}", flush=True)
        return "FAILED"
    print(
        f"\n  dashboard: {url}{job['links']['dashboard']}\n  token:     {token}\n"
        f"  job:       {job['id']} (digits, 2 replicas; Ctrl-C to stop the service)\n"
        f"  data:      {data_dir} (the jobs' database, logs and the Ray head's files)\n",
        flush=True,
    )
    status, message, after = "RUNNING", "", -1
    deadline = time.monotonic() + args.timeout
    while thread.is_alive():
        time.sleep(2)
        page = client.get(f"/v1/jobs/{job['id']}/trajectory", params={"after": after}).json()
        for record in page["records"]:
            print(format_window(record), flush=True)
        after = page["next_after"]
        info = client.get(f"/v1/jobs/{job['id']}").json()
        if (info["status"], info["message"]) != (status, message):
            status, message = info["status"], info["message"]
            print(
                f"hdet demo: job {job['id']} is {status} "
                f"({info['progress']['windows']}/{info['progress']['total_windows']} windows)"
                + (f": {message}" if message else ""),
                flush=True,
            )
        if args.exit_when_done and (info["finished_at"] or time.monotonic() > deadline):
            break
    return status


def _stop_on_terminate() -> None:
    """SIGTERM and SIGHUP stop the demo as Ctrl-C does (set from the main thread only: Python runs handlers
    there)."""
    if threading.current_thread() is not threading.main_thread():
        return

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, interrupt)


def format_window(record: dict) -> str:
    """One terminal line per window: the trajectory the dashboard plots."""
    lr = record["params"].get("lr") or next(iter(record["params"].values()))
    centre = lr.get("center") or lr["base"]
    losses = " ".join("  nan" if x is None else f"{x:.3f}" for x in record["losses"])
    metric = "".join(f" {k} {v:.4f}" for k, v in record.get("metrics", {}).items() if k.startswith("val"))
    flag = " ROLLBACK" if record.get("rollback") else ""
    return (
        f"  window {record['window']:3d} step {record['step']:5d}  lr {centre:.3e} "
        f"(x{_exp(lr['new_offset']):.3f})  losses {losses}{metric}{flag}"
    )


def _exp(x: float | None) -> float:
    import math

    return math.exp(x) if x is not None else float("nan")
