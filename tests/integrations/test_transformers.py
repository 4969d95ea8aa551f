"""Hugging Face `Trainer` on 2 gloo processes (torchrun) with `HDETCallback`: the loss reaches the
controller, the rate moves, the trajectory reaches the Trainer's log, and the replicas end identical."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from service.ray_head import free_port
from tests.integrations.two_ranks import checked_trajectory

MISSING = [
    m for m in ["transformers", "accelerate"] if importlib.util.find_spec(m) is None
]  # imported by the worker only
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(bool(MISSING), reason="pip install hdet-ray[integrations]"),
]

WORKER = Path(__file__).with_name("hf_worker.py")


def test_trainer_with_hdet_callback(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc_per_node",
            "2",
            "--master_port",
            str(free_port()),
            str(WORKER),
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-4000:]
    ranks = checked_trajectory(tmp_path, loss_max=10)
    records = ranks[0]["records"]
    logged = ranks[0]["hdet_logs"]
    assert [h["step"] for h in logged] == [10, 20, 30]  # through trainer.log, at the window's step
    for h, r in zip(logged, records, strict=True):
        assert h["hdet/lr/offset"] == pytest.approx(r["params"]["lr"]["new_offset"])
        assert h["hdet/loss/replica_1"] == pytest.approx(r["losses"][1])
    # the Trainer wraps the model in DDP; the callback hands it to the scheduler, which holds DDP's all-reduce
    # off: had DDP averaged first, HDET would have seen every rank's gradient identical and warned
    assert not any(r["averaged_twice_warning"] for r in ranks)
