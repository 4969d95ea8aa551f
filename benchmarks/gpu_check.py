"""GPU check (one CUDA GPU, a few minutes; never in CI): HDETOneCycleLR's per-step cost and host syncs.

    python -m benchmarks.gpu_check                  # on a machine with a CUDA GPU (prepared for one H200)
    python -m benchmarks.gpu_check --device cpu     # a dry run of the same code on CPU (no sync check)

1. Steps/s of a real training loop (MLP on synthetic data made on the device, AdamW, fp32/TF32) with
   `torch.optim.lr_scheduler.OneCycleLR` and with `HDETOneCycleLR` (one replica, sync every 50 steps),
   in alternating blocks, for a large and a small model; the ratio HDET/OneCycle is the overhead.
2. No host sync between syncs: every step that does not end a window runs under
   `torch.cuda.set_sync_debug_mode("error")`, so any synchronizing call (`.item()`, `.cpu()`, a pageable
   copy, ...) raises; the window's last step (one host read by design) runs with the mode off. The same
   loop with plain OneCycleLR is the control: if it fails, the loop, not HDET, synchronizes.
Writes benchmarks/results/gpu/gpu_check.json and .md.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import traceback
from typing import Any

import torch
from torch import nn

from benchmarks import common

SIZES = {"large": (4096, 8, 1024), "small": (1024, 4, 256), "tiny": (64, 2, 16)}  # width, layers, batch


def make_model(width: int, layers: int, device: torch.device) -> nn.Module:
    torch.manual_seed(0)
    blocks: list[nn.Module] = []
    for _ in range(layers):
        blocks += [nn.Linear(width, width), nn.GELU()]
    return nn.Sequential(*blocks, nn.Linear(width, width)).to(device)


def make_loop(
    kind: str, width: int, layers: int, batch: int, total: int, sync_every: int, device: torch.device
):
    from torch.optim.lr_scheduler import OneCycleLR

    from hdet_ray import HDETOneCycleLR

    model = make_model(width, layers, device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    if kind == "onecycle":
        scheduler = OneCycleLR(optimizer, max_lr=1e-3, total_steps=total)
    else:
        scheduler = HDETOneCycleLR(
            optimizer, max_lr=1e-3, total_steps=total, sync_every=sync_every, model=model
        )
    g = torch.Generator(device=device).manual_seed(0)
    xs = torch.randn(8, batch, width, device=device, generator=g)
    ys = torch.randn(8, batch, width, device=device, generator=g)

    def step(i: int) -> None:
        loss = nn.functional.mse_loss(model(xs[i % 8]), ys[i % 8])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        scheduler.step(loss=loss) if kind == "hdet" else scheduler.step()

    return step


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def throughput(
    size: str, blocks: int, block_steps: int, sync_every: int, device: torch.device
) -> dict[str, Any]:
    width, layers, batch = SIZES[size]
    total = blocks * block_steps + 20
    loops = {k: make_loop(k, width, layers, batch, total, sync_every, device) for k in ("onecycle", "hdet")}
    done = {k: 0 for k in loops}
    rates: dict[str, list[float]] = {k: [] for k in loops}
    for kind, step in loops.items():  # warm-up: kernels, allocator, cuBLAS handles
        for _ in range(20):
            step(done[kind])
            done[kind] += 1
    for _ in range(blocks):
        for kind, step in loops.items():
            _sync(device)
            t = time.perf_counter()
            for _ in range(block_steps):
                step(done[kind])
                done[kind] += 1
            _sync(device)
            rates[kind].append(block_steps / (time.perf_counter() - t))
    med = {k: statistics.median(v) for k, v in rates.items()}
    return {
        "size": size,
        "width": width,
        "layers": layers,
        "batch": batch,
        "steps_per_s": med,
        "blocks": rates,
        "ratio": med["hdet"] / med["onecycle"],
    }


def sync_check(kind: str, steps: int, sync_every: int, device: torch.device) -> dict[str, Any]:
    """Run `steps` steps with sync debug mode 'error' on every step that does not end a window."""
    width, layers, batch = SIZES["small"]
    step = make_loop(kind, width, layers, batch, steps, sync_every, device)
    checked = 0
    try:
        for i in range(steps):
            window_end = kind == "hdet" and (i + 1) % sync_every == 0
            torch.cuda.set_sync_debug_mode(0 if window_end else "error")
            step(i)
            checked += not window_end
        torch.cuda.set_sync_debug_mode(0)
        return {"kind": kind, "ok": True, "checked_steps": checked, "steps": steps}
    except RuntimeError as e:
        torch.cuda.set_sync_debug_mode(0)
        return {
            "kind": kind,
            "ok": False,
            "checked_steps": checked,
            "steps": steps,
            "error": str(e),
            "where": traceback.format_exc(limit=-4),
        }


def run(device_name: str, quick: bool) -> dict[str, Any]:
    device = torch.device(device_name)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise SystemExit("gpu_check: no CUDA device here; results stay 'not measured'")
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    blocks, block_steps = (2, 30) if quick else (5, 200)
    sizes = ("tiny",) if quick else ("large", "small")
    summary: dict[str, Any] = {
        "machine": common.machine(),
        "command": common.command_line(),
        "device": device_name,
        "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else "none",
        "throughput": [throughput(s, blocks, block_steps, 50, device) for s in sizes],
    }
    if device.type == "cuda":
        summary["sync_check"] = [sync_check(k, 300, 50, device) for k in ("onecycle", "hdet")]
    out = common.results_dir("gpu" if device.type == "cuda" else "quick")
    common.write_json(out / "gpu_check.json", summary)
    (out / "gpu_check.md").write_text(markdown(summary))
    return summary


def markdown(summary: dict[str, Any]) -> str:
    rows = [
        [
            t["size"],
            f"{t['width']} x {t['layers']} layers, batch {t['batch']}",
            f"{t['steps_per_s']['onecycle']:.4g}",
            f"{t['steps_per_s']['hdet']:.4g}",
            f"{t['ratio']:.4f}",
        ]
        for t in summary["throughput"]
    ]
    parts = [
        (
            f"Command: `{summary['command']}`. Device: {summary['gpu']} ({summary['device']}). "
            f"Machine: {common.machine_line(summary['machine'])}."
        ),
        common.table(["model", "shape", "OneCycleLR steps/s", "HDETOneCycleLR steps/s", "ratio"], rows),
    ]
    for c in summary.get("sync_check", []):
        verdict = (
            f"no host sync in {c['checked_steps']} checked steps"
            if c["ok"]
            else f"host sync found after {c['checked_steps']} steps: {c['error']}"
        )
        parts.append(f"- sync check, {c['kind']}: {verdict}")
    return "\n\n".join(parts) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.gpu_check", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--device", default="cuda", help="'cuda' (default) or 'cpu' for a dry run")
    parser.add_argument("--quick", action="store_true", help="a few steps only (the smoke test)")
    args = parser.parse_args(argv)
    summary = run(args.device, args.quick)
    print(markdown(summary))
    checks = summary.get("sync_check", [])
    return 0 if all(c["ok"] for c in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
