"""Run a function on N real processes joined by a gloo process group, and collect each rank's result."""

import os
import pickle
import sys
import tempfile

import pytest
import torch.multiprocessing as mp


def _entry(rank, world, fn, init_file, out_dir, args):
    import faulthandler

    import torch
    import torch.distributed as dist

    faulthandler.enable()  # a native abort in a rank prints every thread's Python stack, not just "SIGABRT"
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        result = fn(rank, world, *args)
        # every rank leaves together: a fast rank that tears the group down while a slow one still finishes
        # the last collective can abort the slow one inside gloo (seen once in CI under load)
        dist.barrier()
    finally:
        dist.destroy_process_group()
    with open(os.path.join(out_dir, f"{rank}.pkl"), "wb") as f:
        pickle.dump(result, f)
    # leave without running the interpreter's teardown: gloo's threads can still be joinable when their
    # static owners are destroyed, and std::terminate then aborts a rank whose work is done and written
    # ("terminate called without an active exception", no Python frame; seen twice in one local run)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def run_ranks(fn, world=4, *args):
    """fn(rank, world, *args) on `world` processes; returns [result of rank 0, ...]. fn must be importable."""
    with tempfile.TemporaryDirectory() as tmp:
        init_file = os.path.join(tmp, "pg")
        mp.spawn(_entry, args=(world, fn, init_file, tmp, args), nprocs=world, join=True)
        out = []
        for r in range(world):
            with open(os.path.join(tmp, f"{r}.pkl"), "rb") as f:
                out.append(pickle.load(f))
        return out


@pytest.fixture
def ranks():
    return run_ranks
