"""Memory: the bytes HDETOneCycleLR adds per model parameter, in memory between steps and in the checkpoint.

    python -m benchmarks.memory            # 1 and 2 gloo processes, a 1.05M-parameter MLP, AdamW (~1 min)

For each setting (processes x `rollback` x `optimizer_state`) it trains 12 steps (two syncs of 5 and part of
a third window) and measures on rank 0:
- in memory: the bytes of every tensor reachable from the scheduler that is not the model's or the
  optimizer's own (parameters, gradients, optimizer state): what the scheduler holds between steps;
- in the checkpoint: `len(torch.save(scheduler.state_dict()))`, against plain OneCycleLR's.
The flat copies a sync packs (and, under shared_grad, the per-step gradient bucket) live only while that
collective runs and are not counted.
"""

from __future__ import annotations

import argparse
import gc
import io
import os
import sys
import tempfile
import types
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from benchmarks import common
from benchmarks.pool import leave_process

WIDTH = 1024
STEPS, SYNC_EVERY = 12, 5
SETTINGS = [("default", None), ("memory", "keep"), ("memory", "average"), ("off", "keep"), ("off", "average")]


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(64, WIDTH),
        torch.nn.ReLU(),
        torch.nn.Linear(WIDTH, WIDTH),
        torch.nn.ReLU(),
        torch.nn.Linear(WIDTH, 10),
    )


# functions and classes lead to module globals (the whole program), modules to the model's own tensors
_NOT_STATE = (torch.nn.Module, type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType)


def _storages(tensors) -> set[int]:
    return {t.untyped_storage().data_ptr() for t in tensors if isinstance(t, torch.Tensor)}


def held_bytes(scheduler, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> int:
    """Bytes of the tensors reachable from `scheduler` that are not the model's or the optimizer's."""
    own = _storages(list(model.parameters()) + list(model.buffers()) + [p.grad for p in model.parameters()])
    own |= _storages(v for st in optimizer.state.values() for v in st.values())
    seen_obj, seen_storage, total = set(), set(), 0
    stack: list[Any] = [scheduler.__dict__]
    while stack:
        obj = stack.pop()
        if id(obj) in seen_obj or obj is optimizer or isinstance(obj, _NOT_STATE):
            continue
        seen_obj.add(id(obj))
        if isinstance(obj, torch.Tensor):
            ptr = obj.untyped_storage().data_ptr()
            if ptr not in own and ptr not in seen_storage:
                seen_storage.add(ptr)
                total += obj.untyped_storage().nbytes()
            continue
        stack.extend(gc.get_referents(obj))
    return total


def _setting(sched, name: str, asked: str | None) -> str:
    if not hasattr(sched, "options"):
        return "-"
    value = getattr(sched.options, name)
    return value if asked not in (None, "default") else f"{value} (default)"


def checkpoint_bytes(state: dict) -> int:
    buf = io.BytesIO()
    torch.save(state, buf)
    return len(buf.getvalue())


def measure(world: int) -> list[dict[str, Any]]:
    from hdet_ray import HDETOneCycleLR

    rank = dist.get_rank() if world > 1 else 0
    rows = []
    g = torch.Generator().manual_seed(rank)
    for rollback, opt_state in [(None, None), *SETTINGS]:
        model = _model()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        if rollback is None:
            sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=1e-2, total_steps=100)
        else:
            sched = HDETOneCycleLR(
                opt,
                max_lr=1e-2,
                total_steps=100,
                sync_every=SYNC_EVERY,
                model=model,
                rollback=None if rollback == "default" else rollback,
                optimizer_state=opt_state,
            )
        for _ in range(STEPS):
            loss = torch.nn.functional.cross_entropy(
                model(torch.randn(32, 64, generator=g)), torch.randint(0, 10, (32,), generator=g)
            )
            opt.zero_grad()
            loss.backward()
            opt.step()
            if rollback is None:
                sched.step()
            else:
                sched.step(loss=loss.detach())
        params = sum(p.numel() for p in model.parameters())
        rows.append(
            {
                "processes": world,
                "scheduler": "OneCycleLR" if rollback is None else "HDETOneCycleLR",
                "rollback": _setting(sched, "rollback", rollback),
                "optimizer_state": _setting(sched, "optimizer_state", opt_state),
                "parameters": params,
                "held_bytes": held_bytes(sched, model, opt),
                "checkpoint_bytes": checkpoint_bytes(sched.state_dict()),
            }
        )
        if rollback is not None:
            sched.close()
    return rows


def _rank(rank: int, world: int, init_file: str, out: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        rows = measure(world)
    finally:
        dist.destroy_process_group()
    if rank == 0:
        common.write_json(Path(out), rows)
    leave_process()


def run(world: int) -> list[dict[str, Any]]:
    if world == 1:
        return measure(1)
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "rows.json")
        mp.spawn(_rank, args=(world, os.path.join(tmp, "pg"), out), nprocs=world, join=True)
        return common.read_json(Path(out))


def report(rows: list[dict[str, Any]], machine: dict[str, Any]) -> str:
    table = common.table(
        [
            "processes",
            "scheduler",
            "rollback",
            "optimizer_state",
            "in memory (bytes/param)",
            "checkpoint (bytes/param)",
            "checkpoint (bytes)",
        ],
        [
            [
                r["processes"],
                r["scheduler"],
                r["rollback"],
                r["optimizer_state"],
                f"{r['held_bytes'] / r['parameters']:.3f}",
                f"{r['checkpoint_bytes'] / r['parameters']:.4f}",
                f"{r['checkpoint_bytes']:,}",
            ]
            for r in rows
        ],
    )
    return (
        f"{rows[0]['parameters']:,}-parameter MLP, AdamW, {STEPS} steps, sync every {SYNC_EVERY}. "
        f"{common.machine_line(machine)}. `{common.command_line()}`\n\n{table}\n"
    )


def main(argv: list[str] | None = None) -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args(argv)
    machine = common.machine()
    rows = run(1) + run(2)
    common.write_json(common.results_dir("memory") / "memory.json", {"machine": machine, "rows": rows})
    sys.stdout.write(report(rows, machine))


if __name__ == "__main__":
    main()
