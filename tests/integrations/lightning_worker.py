"""Run by test_lightning.py: a small MLP trained by Lightning (`strategy="ddp"`, 2 CPU processes, gloo)
with HDET through `HDETCallback`, logged by a `CSVLogger`; each rank writes what it saw.

    python tests/integrations/lightning_worker.py OUT_DIR      (Lightning starts the second process)
"""

from __future__ import annotations

import json
import os
import sys
import warnings
from pathlib import Path

import lightning.pytorch as pl
import torch
import torch.distributed as dist
import torch.nn.functional as F
from lightning.pytorch.loggers import CSVLogger
from torch.utils.data import DataLoader, TensorDataset

from hdet_ray import HDETOneCycleLR
from hdet_ray.integrations.lightning import HDETCallback

STEPS, SYNC_EVERY = 30, 10


class Regression(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        optimizer = torch.optim.AdamW(self.parameters(), lr=1e-3)
        scheduler = HDETOneCycleLR(
            optimizer,
            max_lr=1e-2,
            total_steps=self.trainer.max_steps,
            sync_every=SYNC_EVERY,
            model=self.trainer.model,
            controller="slope",  # moves on one window's evidence: a 3-window run shows a move
            controller_settings={"trust_windows": 1},
        )
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


def main(out: Path) -> None:
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2 * STEPS * 16, 8, generator=g)
    y = x @ torch.randn(8, 1, generator=g) + 0.1 * torch.randn(len(x), 1, generator=g)
    data = DataLoader(TensorDataset(x, y), batch_size=16)
    pl.seed_everything(0, verbose=False)
    module = Regression()
    trainer = pl.Trainer(
        max_steps=STEPS,
        strategy="ddp",
        accelerator="cpu",
        devices=2,
        callbacks=[HDETCallback()],
        logger=CSVLogger(str(out), name="csv", version=0),
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        log_every_n_steps=STEPS,
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(module, data)
    scheduler = trainer.lr_scheduler_configs[0].scheduler
    flat = torch.cat([p.detach().reshape(-1) for p in module.parameters()])
    gathered = [torch.empty_like(flat) for _ in range(2)]
    dist.all_gather(gathered, flat)
    result = {
        "records": [r.to_dict() for r in scheduler.records],
        "replicas_identical": bool(torch.equal(gathered[0], gathered[1])),
        "averaged_twice_warning": any("all-reduced twice" in str(w.message) for w in caught),
    }
    (out / f"rank{dist.get_rank()}.json").write_text(json.dumps(result))
    # Lightning leaves the gloo group up; a process that exits with it (and DDP's threads) alive can abort
    # at interpreter exit ("terminate called without an active exception", seen once in CI)
    dist.barrier()
    dist.destroy_process_group()
    # and skip the interpreter's teardown, where gloo's threads can still abort a finished rank (as the
    # engine tests' fixture and the benchmarks' pool do)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
