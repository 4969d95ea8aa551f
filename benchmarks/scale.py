"""Scale on paper: decision time at N = 8 ... 1024 replicas and projected traffic per step at 1,000 GPUs.

    python -m benchmarks.scale            # N = 8 ... 1024, in-process and through a Ray actor
    python -m benchmarks.scale --quick    # fewer repeats

Windows are synthetic (random losses, a log spread of factor 2 over N replicas); the draft `WindowRecord`
that rank 0 sends is built as the engine builds it, and the actor is the job's own controller actor
(`hdet_ray.ray.actor.ControllerActor`), each window a new index as in a real run.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import tempfile
import time
from typing import Any

from benchmarks import common
from hdet_ray.core.controller import ParamWindow, Window, make_controller
from hdet_ray.core.health import ReplicaStats
from hdet_ray.core.records import WindowRecord, draft_record
from hdet_ray.core.spread import coordinates, log_spread

SIZES = (8, 16, 64, 256, 1024)
ACTOR_NOTE = (
    "the job's controller actor, `hdet_ray.ray.actor.ControllerActor` (decide, complete the record, "
    "append it to trajectory.jsonl; no service configured), called as rank 0 calls it"
)


def synthetic(n: int, window: int = 5, seed: int = 0) -> tuple[Window, WindowRecord]:
    rng = random.Random(seed * 7919 + window)
    mults = log_spread(n, 2.0)
    rng.shuffle(mults)
    losses = tuple(2.0 + 0.1 * math.log(m) ** 2 + rng.gauss(0, 0.01) for m in mults)
    base = 1e-3
    params = {
        "lr": ParamWindow(
            scale="log",
            base=base,
            offset=0.0,
            coords=tuple(coordinates(mults, "log")),
            values=tuple(base * m for m in mults),
        )
    }
    w = Window(
        window=window,
        step=(window + 1) * 50,
        total_steps=100_000,
        losses=losses,
        healthy=(True,) * n,
        params=params,
    )
    stats = [
        ReplicaStats(
            mean_loss=x, first_loss=x + 0.1, tail_loss=x, min_loss=x - 0.05, params_finite=True, count=50
        )
        for x in losses
    ]
    return w, draft_record(w, stats, {}, {"lr": list(mults)}, losses[0] + 0.1)


def decide_s(controller: str, n: int, repeats: int = 200) -> float:
    """Median seconds of one in-process `decide` for an n-replica window (state carried across calls)."""
    c = make_controller(controller, trust_windows=1) if controller == "slope" else make_controller(controller)
    state = c.initial_state(["lr"])
    windows = [synthetic(n, window=i)[0] for i in range(8)]
    times = []
    for i in range(repeats + 5):
        w = windows[i % len(windows)]
        t = time.perf_counter()
        state, _ = c.decide(state, w)
        times.append(time.perf_counter() - t)
    return statistics.median(times[5:])


def actor_decide_s(n: int, repeats: int = 50, controller: str = "slope") -> float:
    """Median seconds of rank 0's round trip to the job's controller actor (starts Ray if needed)."""
    import ray

    from hdet_ray.ray.actor import ControllerActor
    from hdet_ray.spec import JobSpec

    started_here = not ray.is_initialized()
    tmp = tempfile.mkdtemp(prefix="hdet-bench-ray-")
    if started_here:
        ray.init(num_cpus=1, include_dashboard=False, _temp_dir=tmp, log_to_driver=False)
    try:
        spec = JobSpec.parse({"replicas": n, "controller": {"name": controller}})
        actor = ControllerActor.remote(spec.model_dump(), f"{tmp}/run")
        pairs = [synthetic(n, window=i) for i in range(repeats + 5)]
        times = []
        for w, r in pairs:
            t = time.perf_counter()
            ray.get(actor.decide.remote(w, r.to_dict()))
            times.append(time.perf_counter() - t)
        ray.kill(actor)
        return statistics.median(times[5:])
    finally:
        if started_here:
            ray.shutdown()


def projected_bytes(params: float, replicas: int, sync_every: int, state_copies: int = 3) -> dict[str, float]:
    """Bytes each worker sends per step with ring all-reduce, fp32, for the three modes.

    DDP: 2 (N-1)/N * 4P every step. shared_grad: the same plus the sync's average of `state_copies` x P
    (parameters and AdamW's two moments under optimizer_state='average') every `sync_every` steps.
    local: only the sync's average. Both HDET modes add the window's all-gather (8 float64 per replica,
    received by every rank) and the Decision broadcast (3 + N + 4 float64) once per window.
    """
    ring = 2 * (replicas - 1) / replicas
    grad = ring * 4 * params
    sync = ring * 4 * params * state_copies / sync_every
    window = (8 * 8 * replicas + 8 * (3 + replicas + 4)) / sync_every
    return {"ddp": grad, "shared_grad": grad + sync + window, "local": sync + window}


def projection_table(params: float = 1e9, replicas: int = 1000) -> str:
    rows = []
    for t in (50, 1000):
        p = projected_bytes(params, replicas, t)
        rows.append(
            [
                t,
                f"{p['ddp'] / 1e9:.3g}",
                f"{p['shared_grad'] / 1e9:.3g}",
                f"{p['local'] / 1e9:.3g}",
                f"{p['local'] / p['ddp']:.3g}",
            ]
        )
    return common.table(["sync every", "DDP GB/step/worker", "shared_grad", "local", "local / DDP"], rows)


def run(mode: str, use_ray: bool = True) -> dict[str, Any]:
    repeats = 200 if mode == "full" else 30
    rows = []
    for n in SIZES:
        row = {
            "replicas": n,
            "slope_s": decide_s("slope", n, repeats),
            "paper_s": decide_s("paper", n, repeats),
        }
        rows.append(row)
    if use_ray:
        import ray

        with tempfile.TemporaryDirectory(prefix="hdet-bench-ray-") as tmp:
            ray.init(num_cpus=1, include_dashboard=False, _temp_dir=tmp, log_to_driver=False)
            try:
                for row in rows:
                    row["actor_s"] = actor_decide_s(row["replicas"], repeats=max(20, repeats // 4))
            finally:
                ray.shutdown()
    summary = {
        "machine": common.machine(),
        "command": common.command_line(),
        "mode": mode,
        "rows": rows,
        "actor": ACTOR_NOTE,
    }
    out = common.results_dir(mode)
    common.write_json(out / "scale.json", summary)
    (out / "scale.md").write_text(markdown(summary))
    return summary


def markdown(summary: dict[str, Any]) -> str:
    rows = [
        [
            r["replicas"],
            f"{r['slope_s'] * 1e3:.3g}",
            f"{r['paper_s'] * 1e3:.3g}",
            f"{r['actor_s'] * 1e3:.3g}" if "actor_s" in r else "not measured",
        ]
        for r in summary["rows"]
    ]
    return (
        "\n\n".join(
            [
                (
                    f"Command: `{summary['command']}`. Machine: {common.machine_line(summary['machine'])}. "
                    f"Synthetic windows; median of repeated decisions. Actor: {summary['actor']}."
                ),
                common.table(
                    [
                        "N replicas",
                        "slope decide (ms, in-process)",
                        "paper decide (ms)",
                        "Ray actor round trip incl. record + JSON line (ms)",
                    ],
                    rows,
                ),
                (
                    "Projected traffic per worker per step at N = 1,000 GPUs, a 1B-parameter model, fp32, "
                    "ring all-reduce, AdamW moments averaged at each sync (`projected_bytes` in "
                    "benchmarks/scale.py):"
                ),
                projection_table(),
                common.table(["target", "measured", "verdict"], scale_targets(summary)),
            ]
        )
        + "\n"
    )


def scale_targets(summary: dict[str, Any]) -> list[list[str]]:
    top = max(summary["rows"], key=lambda r: r["replicas"])
    rows = []
    for key, label in (
        ("slope_s", "slope, in-process"),
        ("paper_s", "paper, in-process"),
        ("actor_s", "slope, Ray actor round trip"),
    ):
        if key in top:
            ms = top[key] * 1e3
            rows.append(
                [
                    f"decision time < 10 ms at N = {top['replicas']} ({label})",
                    f"{ms:.3g} ms",
                    "met" if ms < 10 else "missed",
                ]
            )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.scale", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--no-ray", action="store_true", help="skip the Ray actor round trips")
    args = parser.parse_args(argv)
    print(markdown(run("quick" if args.quick else "full", use_ray=not args.no_ray)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
