"""A stand-in for `python -m hdet_ray run --spec-json ...` while the Ray layer's entrypoint is not in main.

It trains nothing: it plays the controller actor's part of the contract. For each window it writes a
synthetic `WindowRecord` to <storage_path>/<name>/trajectory.jsonl and pushes it to the service's ingest
URL with the job's token (a failed push is not fatal, as the service backfills from the file). After
window 2 it re-sends windows 1 and 2, as a worker-group restart from a checkpoint would.

    python tests/service/standin_entry.py --spec-json '<JobSpec JSON>' [--window-seconds 0.4]
"""

from __future__ import annotations

import argparse
import json
import math
import time
import urllib.request
from pathlib import Path

from hdet_ray.core.records import ParamRecord, WindowRecord
from hdet_ray.spec import JobSpec


def record(spec: JobSpec, window: int) -> WindowRecord:
    step = min((window + 1) * spec.sync_every, spec.steps)
    base = spec.schedule.max_lr * (0.5 + 0.5 * math.cos(math.pi * step / spec.steps))
    multipliers = [2.0 ** (2 * r / max(spec.replicas - 1, 1) - 1) for r in range(spec.replicas)]
    losses = [2.3 * math.exp(-step / spec.steps) * (1 + 0.05 * r) for r in range(spec.replicas)]
    return WindowRecord(
        window=window, step=step, total_steps=spec.steps, losses=losses, start_loss=max(losses),
        healthy=[True] * spec.replicas, excluded=[], reasons={}, weights=[1 / spec.replicas] * spec.replicas,
        params={"lr": ParamRecord(base=base, offset=1.0, new_offset=1.0, multipliers=multipliers,
                                  values=[base * m for m in multipliers])},
        metrics={"val_loss": losses[0] * 1.1} if window > 0 else {})


def push(spec: JobSpec, records: list[WindowRecord]) -> None:
    link = spec.service
    body = json.dumps({"records": [r.to_dict() for r in records]}).encode()
    req = urllib.request.Request(f"{link.url}/v1/jobs/{link.job_id}/ingest", data=body, method="POST",
                                 headers={"Authorization": f"Bearer {link.read_token()}",
                                          "Content-Type": "application/json"})
    try:
        urllib.request.urlopen(req, timeout=5).close()
    except OSError as e:
        print(f"push of windows {[r.window for r in records]} failed: {e}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--spec-json", required=True)
    parser.add_argument("--window-seconds", type=float, default=0.4)
    args = parser.parse_args()
    spec = JobSpec.parse(json.loads(args.spec_json))
    run_dir = Path(spec.storage_path) / (spec.name or "run")
    run_dir.mkdir(parents=True, exist_ok=True)
    with open(run_dir / "trajectory.jsonl", "a") as out:
        for w in range(spec.total_windows):
            time.sleep(args.window_seconds)
            rec = record(spec, w)
            out.write(rec.to_json() + "\n")
            out.flush()
            push(spec, [rec])
            if w == 2:
                push(spec, [record(spec, 1), record(spec, 2)])
    print(f"stand-in finished {spec.total_windows} windows", flush=True)


if __name__ == "__main__":
    main()
