"""HDET under Hugging Face `Trainer`: the Trainer steps the scheduler, this callback feeds it the loss.

The diff against a plain `Trainer` script (run it with `torchrun --nproc_per_node N`; every process is one
replica):

    +from hdet_ray import HDETOneCycleLR
    +from hdet_ray.integrations.transformers import HDETCallback
     args = TrainingArguments(output_dir, max_steps=1000, ...)
    +optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    +scheduler = HDETOneCycleLR(optimizer, max_lr=1e-3, total_steps=args.max_steps, model=model)
    -trainer = Trainer(model=model, args=args, train_dataset=train)
    +trainer = Trainer(model=model, args=args, train_dataset=train, optimizers=(optimizer, scheduler))
    +trainer.add_callback(HDETCallback(trainer))
     trainer.train()

The loss is read from the model's output (`output.loss`, what every `...ForCausalLM`/`...ForSequence-
Classification` model returns when given labels), averaged over gradient-accumulation micro-batches,
and handed to `scheduler.observe` before the Trainer calls `scheduler.step()`. A `compute_loss` of your own
that does not return the loss in the model's output should call `callback.observe(loss)` instead.
Every window's trajectory (`hdet_ray.integrations.loggers.record_scalars`) goes through `trainer.log`, so
every `report_to` integration (TensorBoard, MLflow, W&B, ...) and `trainer.state.log_history` receive it.
After the last step a partial window is converged (`scheduler.finish()`), so every replica ends identical.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from transformers import TrainerCallback

from hdet_ray.integrations._shared import StepLoss, Unlogged, find_scheduler, single_reduce
from hdet_ray.integrations.loggers import record_scalars


class HDETCallback(TrainerCallback):
    """Feeds the training loss to the Trainer's `HDETOneCycleLR` and logs its trajectory.

    Args:
        trainer: the `Trainer` (for `trainer.log`); without it the records go to `state.log_history` only.
    """

    def __init__(self, trainer: Any = None) -> None:
        self.trainer = trainer
        self.scheduler = None
        self._loss = StepLoss()
        self._unlogged = Unlogged()
        self._hook = None
        self._explicit = False

    def observe(self, loss: torch.Tensor) -> None:
        """Add a micro-batch's training loss by hand (instead of reading it from the model's output)."""
        self._explicit = True
        self._loss.add(loss)

    def _from_output(self, module: torch.nn.Module, inputs: Any, output: Any) -> None:
        if not module.training or self._explicit:
            return
        loss = output.get("loss") if isinstance(output, Mapping) else getattr(output, "loss", None)
        if isinstance(loss, torch.Tensor):
            self._loss.add(loss)

    def on_train_begin(self, args, state, control, model=None, lr_scheduler=None, **kwargs):
        self.scheduler = find_scheduler([lr_scheduler], "the Trainer (optimizers=(optimizer, scheduler))")
        if self.trainer is not None:
            single_reduce(self.scheduler, self.trainer.model_wrapped)
        if self._hook is None and model is not None:
            self._hook = model.register_forward_hook(self._from_output)

    def on_optimizer_step(self, args, state, control, **kwargs):
        loss = self._loss.take()
        if loss is not None:
            self.scheduler.observe(loss)

    def on_step_end(self, args, state, control, **kwargs):
        self._log(state)

    def on_train_end(self, args, state, control, **kwargs):
        self.scheduler.finish()
        self._log(state)
        if self._hook is not None:
            self._hook.remove()
            self._hook = None

    def _log(self, state) -> None:
        for record in self._unlogged.take(self.scheduler):
            scalars = record_scalars(record)
            if self.trainer is not None:
                self.trainer.log(scalars)
            else:
                state.log_history.append({**scalars, "step": record.step})
