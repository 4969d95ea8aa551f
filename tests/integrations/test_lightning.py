"""Lightning (`Trainer(strategy="ddp", accelerator="cpu", devices=2)`, gloo) with `HDETCallback`: the loss
reaches the controller, the rate moves, the trajectory reaches the CSV logger, the replicas end identical."""

from __future__ import annotations

import csv
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from service.ray_head import free_port
from tests.integrations.two_ranks import checked_trajectory

MISSING = [m for m in ["lightning"] if importlib.util.find_spec(m) is None]  # imported by the worker only
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(bool(MISSING), reason="pip install hdet-ray[integrations]"),
]

WORKER = Path(__file__).with_name("lightning_worker.py")


def test_lightning_ddp_with_hdet_callback(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    run = subprocess.run(
        [sys.executable, str(WORKER), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-4000:]
    ranks = checked_trajectory(tmp_path, loss_max=100)
    records = ranks[0]["records"]
    # model=self.trainer.model is DDP, held off by the scheduler: had DDP averaged first, HDET would have seen
    # every rank's gradient identical and warned
    assert not any(r["averaged_twice_warning"] for r in ranks)

    with open(tmp_path / "csv" / "version_0" / "metrics.csv") as f:
        rows = [row for row in csv.DictReader(f) if row.get("hdet/lr/offset")]
    assert [int(row["step"]) for row in rows] == [10, 20, 30]
    for row, r in zip(rows, records, strict=True):
        assert float(row["hdet/lr/offset"]) == pytest.approx(r["params"]["lr"]["new_offset"])
        assert float(row["hdet/loss/replica_0"]) == pytest.approx(r["losses"][0])
