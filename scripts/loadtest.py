"""Load script (not a timed test): 100 clients poll a job's trajectory and 20 hold its SSE stream for
60 s while a feeder ingests a window every 0.5 s. Reports errors and p50/p99 latency.

    PYTHONPATH=$PWD python scripts/loadtest.py                      # starts its own service (memory backend)
    python scripts/loadtest.py --url http://127.0.0.1:8000 --token T --job hdet-...   # an existing service

On its own it starts `hdet serve` in a child process with HDET_BACKEND=memory, submits one job and feeds
it synthetic windows through the ingest endpoint, so what is measured is the HTTP service itself.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import httpx


def percentile(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


async def poller(client, job, stop, latencies, errors):
    after = -1
    while not stop.is_set():
        t = time.perf_counter()
        try:
            r = await client.get(f"/v1/jobs/{job}/trajectory", params={"after": after})
            r.raise_for_status()
            latencies.append(time.perf_counter() - t)
            after = r.json()["next_after"]
        except (httpx.HTTPError, ValueError) as e:
            errors.append(f"poll: {e!r}")
        await asyncio.sleep(0.1)


async def streamer(client, job, stop, seen, errors):
    last = None
    while not stop.is_set():
        try:
            headers = {"Last-Event-ID": last} if last else {}
            async with client.stream("GET", f"/v1/jobs/{job}/stream", headers=headers, timeout=None) as r:
                r.raise_for_status()
                async for line in r.aiter_lines():
                    if line.startswith("id: "):
                        last = line[4:]
                        seen.append(int(last))
                    if stop.is_set():
                        return
        except (httpx.HTTPError, ValueError) as e:
            if not stop.is_set():
                errors.append(f"stream: {e!r}")


async def feeder(url, job, ingest_token, stop, errors, spec):
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
    from hdet_ray.spec import JobSpec
    from tests.service.synthetic import record

    js = JobSpec.parse(spec)
    async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {ingest_token}"}) as c:
        w = 0
        while not stop.is_set() and w < js.total_windows:
            r = await c.post(f"/v1/jobs/{job}/ingest", json={"records": [record(js, w).to_dict()]})
            if r.status_code != 200:
                errors.append(f"ingest: {r.status_code}")
            w += 1
            await asyncio.sleep(0.5)


async def run(args, url, token, job, ingest_token, spec):
    limits = httpx.Limits(max_connections=200, max_keepalive_connections=200)
    async with httpx.AsyncClient(
        base_url=url, headers={"Authorization": f"Bearer {token}"}, limits=limits, timeout=30
    ) as client:
        stop, latencies, errors, seen = asyncio.Event(), [], [], [[] for _ in range(args.streams)]
        tasks = [
            asyncio.create_task(poller(client, job, stop, latencies, errors)) for _ in range(args.pollers)
        ]
        tasks += [
            asyncio.create_task(streamer(client, job, stop, seen[i], errors)) for i in range(args.streams)
        ]
        if ingest_token:
            tasks.append(asyncio.create_task(feeder(url, job, ingest_token, stop, errors, spec)))
        await asyncio.sleep(args.seconds)
        stop.set()
        await asyncio.wait(tasks, timeout=10)
        for t in tasks:
            t.cancel()
    dup = sum(len(s) - len(set(s)) for s in seen)
    print(
        json.dumps(
            {
                "pollers": args.pollers,
                "streams": args.streams,
                "seconds": args.seconds,
                "requests": len(latencies),
                "errors": len(errors),
                "first_errors": errors[:5],
                "p50_ms": round(1000 * statistics.median(latencies), 1) if latencies else None,
                "p99_ms": round(1000 * percentile(latencies, 0.99), 1) if latencies else None,
                "events_per_stream_min": min((len(s) for s in seen), default=0),
                "repeated_events": dup,
            },
            indent=1,
        )
    )
    return 1 if errors or dup else 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url"), p.add_argument("--token"), p.add_argument("--job")
    p.add_argument("--pollers", type=int, default=100)
    p.add_argument("--streams", type=int, default=20)
    p.add_argument("--seconds", type=float, default=60)
    args = p.parse_args()
    spec = {"name": "load", "steps": 2000, "sync_every": 10, "replicas": 4}
    if args.url:
        return asyncio.run(run(args, args.url, args.token, args.job, None, spec))
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
    from service.ray_head import free_port

    port, token = free_port(), "loadtest-token-0123456789"
    data = tempfile.mkdtemp(prefix="hdet-load-")
    env = {**os.environ, "HDET_BACKEND": "memory", "HDET_TOKEN": token, "HDET_DATA_DIR": data}
    server = subprocess.Popen(
        [sys.executable, "-m", "hdet_ray", "serve", "--port", str(port), "--log-level", "warning"], env=env
    )
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(100):
            try:
                if httpx.get(url + "/healthz").status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.2)
        job = httpx.post(
            url + "/v1/jobs", json=spec, headers={"Authorization": f"Bearer {token}"}, timeout=60
        ).json()["id"]
        ingest_token = _ingest_token(url, token, job)
        return asyncio.run(run(args, url, token, job, ingest_token, spec))
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=60)


def _ingest_token(url, token, job):
    """The memory backend's log is the command it would have run, which names the job's token file (in
    the data directory this script made, readable by this user only)."""
    r = httpx.get(f"{url}/v1/jobs/{job}/logs", headers={"Authorization": f"Bearer {token}"})
    words = shlex.split(r.text.split("\n", 1)[0])
    with open(json.loads(words[words.index("--spec-json") + 1])["service"]["token_file"]) as f:
        return f.read().strip()


if __name__ == "__main__":
    sys.exit(main())
