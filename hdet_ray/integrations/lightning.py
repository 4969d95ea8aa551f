"""HDET under Lightning: Lightning steps the scheduler every batch, this callback feeds it the loss.

The diff against a plain Lightning script (`Trainer(strategy="ddp", devices=N)`; every process is one
replica):

    +from hdet_ray import HDETOneCycleLR
    +from hdet_ray.integrations.lightning import HDETCallback

     class Model(L.LightningModule):
         def configure_optimizers(self):
             optimizer = torch.optim.AdamW(self.parameters(), lr=1e-3)
    -        scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=1e-3,
    -                                                        total_steps=self.trainer.max_steps)
    +        scheduler = HDETOneCycleLR(optimizer, max_lr=1e-3, total_steps=self.trainer.max_steps,
    +                                   model=self.trainer.model)
             return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    -trainer = L.Trainer(max_steps=1000, strategy="ddp", devices=2)
    +trainer = L.Trainer(max_steps=1000, strategy="ddp", devices=2, callbacks=[HDETCallback()])

`model=self.trainer.model` is the DDP-wrapped module: the scheduler holds DDP's all-reduce off and averages
the gradients once itself, at the end of each backward pass (as DDP would), with a rank whose gradient is
non-finite left out and one far above the others' clipped first. The loss
is the one Lightning back-propagates (`on_before_backward`), averaged over `accumulate_grad_batches`
micro-batches and handed to `scheduler.observe` before Lightning calls `scheduler.step()`. Every window's
trajectory (`hdet_ray.integrations.loggers.record_scalars`) goes to each of `trainer.loggers` from rank 0
at the window's step. After the last step a partial window is converged (`scheduler.finish()`).
"""

from __future__ import annotations

import lightning.pytorch as pl
import torch

from hdet_ray.integrations._shared import StepLoss, Unlogged, find_scheduler, single_reduce
from hdet_ray.integrations.loggers import record_scalars


class HDETCallback(pl.Callback):
    """Feeds the training loss to the module's `HDETOneCycleLR` (interval 'step') and logs its trajectory."""

    def __init__(self) -> None:
        self.scheduler = None
        self._loss = StepLoss()
        self._unlogged = Unlogged()

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        configs = trainer.lr_scheduler_configs
        self.scheduler = find_scheduler([c.scheduler for c in configs], "configure_optimizers()")
        config = next(c for c in configs if c.scheduler is self.scheduler)
        if config.interval != "step" or config.frequency != 1:
            raise ValueError(
                "HDETCallback: the HDETOneCycleLR's lr_scheduler config needs interval='step' and "
                f"frequency=1 (got interval={config.interval!r}, frequency={config.frequency})"
            )
        single_reduce(self.scheduler, trainer.strategy.model)

    def on_before_backward(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, loss: torch.Tensor
    ) -> None:
        self._loss.add(loss * trainer.accumulate_grad_batches)  # Lightning divided it for accumulation

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        loss = self._loss.take()
        if loss is not None:
            self.scheduler.observe(loss)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self._log(trainer)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.scheduler.finish()
        self._log(trainer)

    def _log(self, trainer: pl.Trainer) -> None:
        records = self._unlogged.take(self.scheduler)
        if not trainer.is_global_zero:
            return
        for record in records:
            scalars = record_scalars(record)
            for logger in trainer.loggers:
                logger.log_metrics(scalars, step=record.step)
