"""Speed and communication: steps/s per worker and bytes per step, DDP vs HDET shared_grad vs HDET local.

    python -m benchmarks.speed            # N = 2 and 4 gloo CPU workers, a 6.3M-parameter MLP, 2 repeats
    python -m benchmarks.speed --quick    # fewer steps, 1 repeat

Each configuration trains the same model on synthetic data with AdamW for `warmup + timed` steps; steps/s
is rank 0's timed steps over their wall time (one sync included: sync every 50 steps, as the target says).
`shared_grad+ddp` is HDET shared_grad on a DDP-wrapped model passed as `model=`: since 2026-12-04 the
scheduler holds DDP's all-reduce off and averages the gradients itself (before, DDP averaged them,
overlapped with the backward pass), so it measures what a user's DDP script pays for the wrapper.
The three modes alternate within each repeat so that load from other users of the machine spreads over
all of them. The controller's cost per window is timed separately (in-process `decide`, and a round trip
through a minimal Ray actor hosting the same controller) and set against the window's measured time.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any

import torch
from torch import nn

from benchmarks import common
from benchmarks.comm import ByteCounter, ddp_counting_hook
from benchmarks.pool import read_results, run_jobs

MODES = ("ddp", "shared_grad", "local", "shared_grad+ddp")
SETTINGS = {
    "full": {"world": (2, 4), "warmup": 3, "timed": 50, "sync_every": 50, "repeats": 2},
    "quick": {"world": (2, 4), "warmup": 2, "timed": 20, "sync_every": 10, "repeats": 1},
}
WIDTH, IN_DIM, BATCH = 2048, 512, 32


def make_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(IN_DIM, WIDTH), nn.ReLU(), nn.Linear(WIDTH, WIDTH), nn.ReLU(), nn.Linear(WIDTH, IN_DIM)
    )


def speed_job(rank: int, world: int, job: dict[str, Any]) -> dict[str, Any]:
    from torch.nn.parallel import DistributedDataParallel
    from torch.optim.lr_scheduler import OneCycleLR

    from hdet_ray import HDETOneCycleLR

    model = make_model()
    total = job["warmup"] + job["timed"]
    counter = ByteCounter()
    net: nn.Module = model
    if job["mode"] in ("ddp", "shared_grad+ddp"):
        net = DistributedDataParallel(model)
        net.register_comm_hook(None, ddp_counting_hook(counter))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    if job["mode"] == "ddp":
        scheduler = OneCycleLR(optimizer, max_lr=1e-3, total_steps=total)
    else:
        scheduler = HDETOneCycleLR(
            optimizer,
            max_lr=1e-3,
            total_steps=total,
            sync_every=job["sync_every"],
            fanout=job["mode"].removesuffix("+ddp"),
            model=net,
            seed=0,
        )
    g = torch.Generator().manual_seed(rank)
    data = [
        (torch.randn(BATCH, IN_DIM, generator=g), torch.randn(BATCH, IN_DIM, generator=g)) for _ in range(8)
    ]
    # warm-up steps, then align the window: HDET's first timed step starts a window
    for step in range(total):
        if step == job["warmup"]:
            torch.distributed.barrier()
            counter.reset()
            started = time.perf_counter()
        x, y = data[step % len(data)]
        loss = nn.functional.mse_loss(net(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        scheduler.step(loss=loss) if job["mode"] != "ddp" else scheduler.step()
    elapsed = time.perf_counter() - started
    counter.close()
    if job["mode"] != "ddp":
        scheduler.close()
    params = sum(p.numel() for p in model.parameters())
    return {
        "mode": job["mode"],
        "world": world,
        "steps_per_s": job["timed"] / elapsed,
        "bytes_per_step": counter.bytes / job["timed"],
        "calls": dict(counter.calls),
        "params": params,
    }


def controller_cost(
    replicas: int, window_s: float, use_ray: bool = True, repeats: int = 200
) -> dict[str, float]:
    """Seconds per decision: in-process, and through a Ray actor (if `use_ray`), for `replicas` replicas."""
    from benchmarks.scale import actor_decide_s, decide_s

    out = {"in_process_s": decide_s("slope", replicas, repeats)}
    if use_ray:
        out["ray_actor_s"] = actor_decide_s(replicas, repeats=max(20, repeats // 4))
    out.update({f"{k[:-2]}_share": v / window_s for k, v in list(out.items())})
    return out


def summarize(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for r in rows:
        cell = out.setdefault(
            f"{r['mode']}/{r['world']}",
            {
                "mode": r["mode"],
                "world": r["world"],
                "runs": [],
                "bytes_per_step": r["bytes_per_step"],
                "params": r["params"],
                "calls": r["calls"],
            },
        )
        cell["runs"].append(r["steps_per_s"])
    for cell in out.values():
        cell["steps_per_s"] = statistics.median(cell["runs"])
    return out


def markdown(summary: dict[str, Any]) -> str:
    cells, s = summary["cells"], summary["settings"]
    rows = []
    for world in s["world"]:
        ddp = cells[f"ddp/{world}"]["steps_per_s"]
        for mode in MODES:
            c = cells[f"{mode}/{world}"]
            rows.append(
                [
                    mode,
                    world,
                    f"{c['steps_per_s']:.3g}",
                    f"{c['steps_per_s'] / ddp:.3f}",
                    ", ".join(f"{x:.3g}" for x in c["runs"]),
                    f"{c['bytes_per_step'] / 1e6:.3g}",
                    f"{c['bytes_per_step'] / (4 * c['params']):.3g}",
                ]
            )
    params = next(iter(cells.values()))["params"]
    cost = summary["controller"]
    text = [
        (
            f"Command: `{summary['command']}`. Machine: {common.machine_line(summary['machine'])}. "
            f"Model: MLP {IN_DIM}-{WIDTH}-{WIDTH}-{IN_DIM}, {params / 1e6:.2f}M fp32 parameters, "
            f"batch {BATCH}, AdamW; {s['timed']} timed steps after {s['warmup']} warm-up steps, "
            f"HDET sync every {s['sync_every']} steps; median of {s['repeats']} repeat(s), modes interleaved."
        ),
        common.table(
            [
                "mode",
                "N",
                "steps/s per worker (median)",
                "ratio to DDP",
                "repeats",
                "payload MB per step per worker",
                "payload per step / model size",
            ],
            rows,
        ),
        "Payload: bytes handed to collectives per worker (ring all-reduce moves ~2(N-1)/N of it each way).",
        f"Controller cost per window (N = 4, window = {s['sync_every']} steps of HDET local at N = 4, "
        f"{cost['window_s'] * 1e3:.4g} ms): in-process `decide` {cost['in_process_s'] * 1e6:.4g} µs "
        f"({cost['in_process_share'] * 100:.3g}% of the window); through a Ray actor round trip "
        + (
            f"{cost['ray_actor_s'] * 1e3:.4g} ms ({cost['ray_actor_share'] * 100:.3g}%)."
            if "ray_actor_s" in cost
            else "not measured."
        )
        + f" Actor: {cost.get('actor', 'n/a')}.",
    ]
    text.append(common.table(["target", "measured", "verdict"], speed_targets(summary)))
    return "\n\n".join(text) + "\n"


def speed_targets(summary: dict[str, Any]) -> list[list[str]]:
    cells, cost = summary["cells"], summary["controller"]
    n = max(summary["settings"]["world"])
    ddp, shared, local, shared_ddp = (cells[f"{m}/{n}"]["steps_per_s"] for m in MODES)
    rows = [
        [
            f"`local` at least as many steps/s as DDP at N={n}",
            f"{local / ddp:.3f}x DDP",
            "met" if local >= ddp else "missed",
        ],
        [
            f"`shared_grad` within 2% of DDP at N={n}",
            f"{shared / ddp:.3f}x DDP",
            "met" if shared >= 0.98 * ddp else "missed",
        ],
        [
            f"`shared_grad` on a DDP-wrapped model within 2% of DDP at N={n}",
            f"{shared_ddp / ddp:.3f}x DDP",
            "met" if shared_ddp >= 0.98 * ddp else "missed",
        ],
    ]
    for key, label in (("in_process", "in-process"), ("ray_actor", "through the Ray actor")):
        if f"{key}_share" in cost:
            share = cost[f"{key}_share"]
            rows.append(
                [
                    f"controller cost < 1% of a {summary['settings']['sync_every']}-step window ({label})",
                    f"{share * 100:.3g}%",
                    "met" if share < 0.01 else "missed",
                ]
            )
    return rows


def run(mode: str, use_ray: bool = True) -> dict[str, Any]:
    s = SETTINGS[mode]
    out = common.results_dir(mode)
    results_file = out / "speed_runs.jsonl"
    results_file.unlink(missing_ok=True)  # speed is measured afresh, never resumed
    for world in s["world"]:
        jobs = [
            {
                "key": f"{m}/{world}/{rep}",
                "mode": m,
                "warmup": s["warmup"],
                "timed": s["timed"],
                "sync_every": s["sync_every"],
            }
            for rep in range(s["repeats"])
            for m in MODES
        ]
        run_jobs(speed_job, jobs, world, results_file)
    cells = summarize(list(read_results(results_file).values()))
    window_s = s["sync_every"] / cells[f"local/{max(s['world'])}"]["steps_per_s"]
    cost = controller_cost(4, window_s, use_ray=use_ray, repeats=200 if mode == "full" else 50)
    from benchmarks.scale import ACTOR_NOTE

    summary = {
        "machine": common.machine(),
        "command": common.command_line(),
        "mode": mode,
        "settings": s,
        "cells": cells,
        "controller": {**cost, "window_s": window_s, "actor": ACTOR_NOTE},
    }
    common.write_json(out / "speed.json", summary)
    (out / "speed.md").write_text(markdown(summary))
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.speed", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--no-ray", action="store_true", help="skip the Ray actor round trip")
    args = parser.parse_args(argv)
    summary = run("quick" if args.quick else "full", use_ray=not args.no_ray)
    print(markdown(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
