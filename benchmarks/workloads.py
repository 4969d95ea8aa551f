"""The quality benchmark's workloads, run the way a user runs them: DDP + torch's `OneCycleLR`, or the same
script with `HDETOneCycleLR` swapped in (the README's three-line change), or an LR-free optimizer.

- `mlp`: the digits MLP (`hdet_ray.tasks.Digits`) with SGD + momentum (OneCycle cycles the momentum).
- `cnn`: a small CNN with BatchNorm on the same 8x8 digits images, with Adam.
- `lm`: a byte-level transformer LM (`hdet_ray.tasks.ByteLM`, made smaller than the task's default so that 3
  seeds x 2 horizons fit the benchmark's budget on 2 CPU cores: context 32, width 32) with AdamW (weight decay
  0.01).
The quality benchmark's CNN and the families of `benchmarks.holdout` and `benchmarks.unseen` are in
`benchmarks.families`; `TASKS` below names every workload, its task and its optimizer.

`run(rank, world, job)` is a `benchmarks.pool` job function: every rank trains one replica; rank 0 returns the
final validation metric of the (identical, or converged) model, plus the HDET trajectory when there is one
(and, with `replica_validation`, every replica's own validation metric at each window's end).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.optim.lr_scheduler import OneCycleLR

from benchmarks.families import (
    CTC,
    BagOfWords,
    ByteGRU,
    ByteLMDropout,
    ByteLSTM,
    ByteRNN,
    ClickThrough,
    Counts,
    DecayGroups,
    DeepLinear,
    Denoising,
    DigitsAccumulated,
    DigitsAdversarial,
    DigitsAugmented,
    DigitsAutoencoder,
    DigitsBandit,
    DigitsBayes,
    DigitsBF16,
    DigitsBinarized,
    DigitsCNN,
    DigitsContrastive,
    DigitsCurriculum,
    DigitsDeepMLP,
    DigitsDepthwise,
    DigitsDistill,
    DigitsEMA,
    DigitsExperts,
    DigitsFocal,
    DigitsFullBatch,
    DigitsHinge,
    DigitsLongTail,
    DigitsMixup,
    DigitsMultitask,
    DigitsNoisyLabels,
    DigitsPrivate,
    DigitsResNet,
    DigitsSparseAutoencoder,
    DigitsSpectral,
    DigitsVAE,
    DigitsViT,
    DigitsVQ,
    DigitsWeightNorm,
    Finetune,
    FinetuneGroups,
    FinetuneLoRA,
    FinetuneStaged,
    Flow,
    Forecast,
    Graph,
    Heteroscedastic,
    IllConditioned,
    ManyClasses,
    MaskedLM,
    Median,
    Multilabel,
    Poisson,
    Poisson64,
    Ratings,
    Regression,
    Reverse,
    Segmentation,
    Siren,
    SmallTargets,
    SmoothedTabular,
    Softmax,
    Spirals,
    Surface,
    Tabular,
    TabularWide,
    Waveforms,
)
from hdet_ray.tasks import ByteLM, Digits, Task


@dataclass(frozen=True)
class Workload:
    name: str
    task: Task
    optimizer: str
    """'sgd' (momentum 0.9, cycled by OneCycle), 'adam', 'adamw' (weight decay 0.01), 'nadam' or 'rmsprop'
    (torch's defaults; OneCycle cycles NAdam's beta1, and RMSprop's momentum from 0.95 to 0.85 and back, as
    torch's `OneCycleLR` does for any optimizer with a `momentum` setting), 'nesterov' (SGD, Nesterov
    momentum 0.9, weight decay 5e-4), 'adagrad' (torch's defaults; no momentum to cycle, so both schedulers
    get `cycle_momentum=False`), 'radam' or 'adamax' (torch's defaults; OneCycle cycles their beta1),
    'amsgrad' (AdamW as 'adamw' with `amsgrad=True`: its state keeps the second moment's running maximum),
    'adadelta' (torch's defaults, `lr=1.0` its documented rate; no momentum to cycle: a step of the rate times
    the ratio of two running averages, the past steps' and the gradients' root mean squares), 'sgd_plain'
    (SGD with no momentum; both schedulers get `cycle_momentum=False`, which would otherwise switch it on),
    'adafactor' (torch's `Adafactor` at its defaults, whose step is the rate times each parameter's RMS over
    a factored second moment; no momentum to cycle)."""
    steps: int
    sync_every: int


def make_optimizer(kind: str, params, lr: float, base: str = "adam") -> torch.optim.Optimizer:
    """`kind`: the workload's optimizer, or an LR-free one at its documented settings ('prodigy', 'dadapt';
    `base` picks D-Adaptation's SGD or Adam variant and the weight decay of the workload's optimizer)."""
    decay = 0.01 if base == "adamw" else 0.0
    if kind == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=0.9)
    if kind == "adam":
        return torch.optim.Adam(params, lr=lr)
    if kind == "adamw":
        return torch.optim.AdamW(params, lr=lr, weight_decay=0.01)
    if kind == "amsgrad":
        return torch.optim.AdamW(params, lr=lr, weight_decay=0.01, amsgrad=True)
    if kind == "nadam":
        return torch.optim.NAdam(params, lr=lr)
    if kind == "rmsprop":
        return torch.optim.RMSprop(params, lr=lr)
    if kind == "nesterov":
        return torch.optim.SGD(params, lr=lr, momentum=0.9, nesterov=True, weight_decay=5e-4)
    if kind == "adagrad":
        return torch.optim.Adagrad(params, lr=lr)
    if kind == "sgd_plain":
        return torch.optim.SGD(params, lr=lr)
    if kind == "adadelta":
        return torch.optim.Adadelta(params, lr=lr)
    if kind == "radam":
        return torch.optim.RAdam(params, lr=lr)
    if kind == "adamax":
        return torch.optim.Adamax(params, lr=lr)
    if kind == "adafactor":
        return torch.optim.Adafactor(params, lr=lr)
    if kind == "prodigy":
        from prodigyopt import Prodigy

        return Prodigy(params, lr=lr, weight_decay=decay, safeguard_warmup=True)  # its README: with warm-up
    if kind == "dadapt":
        from dadaptation import DAdaptAdam, DAdaptSGD

        if base == "sgd":
            return DAdaptSGD(params, lr=lr, momentum=0.9)
        return DAdaptAdam(params, lr=lr, weight_decay=decay, decouple=base == "adamw")
    raise ValueError(f"unknown optimizer {kind!r}")


SMALL_BYTES = {"context": 32, "dim": 32, "val_bytes": 16_384}
"""The byte-level models' size in the benchmarks (the LM adds its heads): small enough for 2 CPU cores."""

TASKS = {
    "mlp": (Digits, {}, "sgd"),
    "cnn": (DigitsCNN, {}, "adam"),
    "lm": (ByteLM, {**SMALL_BYTES, "heads": 2}, "adamw"),
    # held out (`benchmarks.holdout`): never run while the defaults were chosen
    "mlp_adamw": (Digits, {}, "adamw"),
    "cnn_sgd": (DigitsCNN, {}, "sgd"),
    "lm_sgd": (ByteLM, {**SMALL_BYTES, "heads": 2}, "sgd"),
    # unseen (`benchmarks.unseen`): model and data families never run while the defaults were chosen
    "regression": (Regression, {}, "adam"),
    "gru": (ByteGRU, SMALL_BYTES, "adam"),
    "softmax": (Softmax, {}, "sgd"),
    "tabular": (Tabular, {}, "sgd"),
    "vit": (DigitsViT, {}, "adamw"),
    "resnet": (DigitsResNet, {}, "sgd"),
    "autoencoder": (DigitsAutoencoder, {}, "adamw"),
    "cnn_rmsprop": (DigitsCNN, {"batch_norm": False}, "rmsprop"),
    "deep_mlp": (DigitsDeepMLP, {}, "nadam"),
    "waveforms": (Waveforms, {}, "nesterov"),
    "ratings": (Ratings, {}, "adagrad"),
    "heteroscedastic": (Heteroscedastic, {}, "adam"),
    "smoothed": (SmoothedTabular, {}, "adamw"),
    "lstm": (ByteLSTM, SMALL_BYTES, "sgd"),
    "graph": (Graph, {}, "adam"),
    "multilabel": (Multilabel, {}, "adamw"),
    "spirals": (Spirals, {}, "sgd"),
    "finetune": (Finetune, {}, "adamw"),
    "contrastive": (DigitsContrastive, {}, "radam"),
    "counts": (Counts, {}, "sgd"),
    "finetune_groups": (FinetuneGroups, {}, "adamw"),
    "bag_of_words": (BagOfWords, {}, "adam"),
    "experts": (DigitsExperts, {}, "adamw"),
    "finetune_staged": (FinetuneStaged, {}, "adamw"),
    "tabular_wide": (TabularWide, {}, "sgd"),
    "denoising": (Denoising, {}, "adamw"),
    "median": (Median, {}, "sgd"),
    "surface": (Surface, {}, "adamax"),
    "vae": (DigitsVAE, {}, "adam"),
    "poisson": (Poisson, {}, "adam"),
    "accumulated": (DigitsAccumulated, {}, "sgd"),
    "decay_groups": (DecayGroups, {}, "adamw"),
    "noisy_labels": (DigitsNoisyLabels, {}, "adam"),
    "vit_postnorm": (DigitsViT, {"norm_first": False}, "adamw"),
    "ill_conditioned": (IllConditioned, {}, "sgd"),
    "binarized": (DigitsBinarized, {}, "adam"),
    "deep_linear": (DeepLinear, {}, "sgd"),
    "spectral": (DigitsSpectral, {}, "adam"),
    "rnn": (ByteRNN, SMALL_BYTES, "sgd"),
    "cnn_amsgrad": (DigitsCNN, {}, "amsgrad"),
    "small_targets": (SmallTargets, {}, "adam"),
    "full_batch": (DigitsFullBatch, {}, "sgd"),
    "curriculum": (DigitsCurriculum, {}, "sgd"),
    "tabular_adadelta": (Tabular, {}, "adadelta"),
    "tiny_batch": (Digits, {"batch_size": 2}, "sgd"),
    "tabular_plain_sgd": (Tabular, {}, "sgd_plain"),
    "mlp_bf16": (DigitsBF16, {}, "sgd"),
    "reverse": (Reverse, {}, "adam"),
    "hinge": (DigitsHinge, {}, "sgd"),
    "bandit": (DigitsBandit, {}, "adam"),
    "bandit_miss": (DigitsBandit, {"report_miss": True}, "adam"),
    "lm_dropout": (ByteLMDropout, {**SMALL_BYTES, "heads": 2}, "adamw"),
    "poisson64": (Poisson64, {}, "adam"),
    "siren": (Siren, {}, "adam"),
    "augmented": (DigitsAugmented, {}, "nesterov"),
    "many_classes": (ManyClasses, {}, "adamw"),
    "forecast": (Forecast, {}, "adam"),
    "flow": (Flow, {}, "adam"),
    "click_through": (ClickThrough, {}, "adamw"),
    "private": (DigitsPrivate, {}, "sgd"),
    "mixup": (DigitsMixup, {}, "adamw"),
    "adversarial": (DigitsAdversarial, {}, "adam"),
    "long_tail": (DigitsLongTail, {}, "sgd"),
    "ema": (DigitsEMA, {}, "adamw"),
    "sparse_autoencoder": (DigitsSparseAutoencoder, {}, "adam"),
    "vq": (DigitsVQ, {}, "adam"),
    "multitask": (DigitsMultitask, {}, "adamw"),
    "distill": (DigitsDistill, {}, "sgd"),
    "lora": (FinetuneLoRA, {}, "adamw"),
    "weight_norm": (DigitsWeightNorm, {}, "sgd"),
    "bayes": (DigitsBayes, {}, "adam"),
    "segmentation": (Segmentation, {}, "adam"),
    "masked_lm": (MaskedLM, {}, "adamw"),
    "depthwise": (DigitsDepthwise, {}, "sgd"),
    "ctc": (CTC, {}, "adam"),
    "focal": (DigitsFocal, {}, "sgd"),
    "lm_adafactor": (ByteLM, {**SMALL_BYTES, "heads": 2}, "adafactor"),
}


def build(name: str) -> tuple[Task, str]:
    cls, options, opt = TASKS[name]
    return cls(**options), opt


def hdet_options(options: dict[str, Any]) -> dict[str, Any]:
    """A job's HDET options (JSON) as `HDETOneCycleLR` keywords: `explore` may be a list of `HyperParam`
    field dicts (tuples given as lists), `health` a dict of `HealthConfig` fields. Always a new dict: the
    jobs of one variant share its options dict (`benchmarks.ablate`; a worker unpickles them as one object),
    so filling in a job's own fields must not reach the next job."""
    from hdet_ray import HealthConfig, HyperParam

    options = dict(options)
    if isinstance(options.get("health"), dict):
        options["health"] = HealthConfig(**options["health"])
    if options.get("explore") is not None:
        options["explore"] = [
            HyperParam(**{k: tuple(v) if isinstance(v, list) else v for k, v in spec.items()})
            for spec in options["explore"]
        ]
    return options


def perturb_(model: nn.Module, scale: float, seed: int) -> None:
    """Scale each parameter element by (1 + scale * N(0, 1)), in place, with noise drawn from its own
    generator seeded by `seed`: the same on every rank, and nothing else's random stream moves. At
    scale 1e-6 a weight changes in its sixth significant digit, a few float32 roundings: the run is the
    same run, and how far its result moves measures how chaotic the training is, not a different start."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(1.0 + scale * torch.randn(p.shape, generator=g, dtype=p.dtype))


ONECYCLE_FIELDS = ("pct_start", "anneal_strategy", "three_phase", "div_factor", "final_div_factor")
"""The `OneCycleLR` arguments a job's `onecycle` may set (the rate and the length are the benchmark's)."""


def onecycle_shape(shape: dict[str, Any] | None) -> dict[str, Any]:
    """A job's `onecycle` arguments, checked: unknown names are refused, not passed on to be ignored."""
    shape = dict(shape or {})
    unknown = sorted(set(shape) - set(ONECYCLE_FIELDS))
    if unknown:
        raise ValueError(f"onecycle: unknown argument(s) {unknown}; allowed: {list(ONECYCLE_FIELDS)}")
    return shape


def run(rank: int, world: int, job: dict[str, Any]) -> dict[str, Any]:
    """job: workload, steps, sync_every, max_lr, seed, arm ('fixed' | 'hdet' | 'lrfree'), hdet (kwargs);
    optionally perturb and perturb_seed (`perturb_`: the initial weights' last digits changed), and ddp (the
    HDET arm's model DDP-wrapped and passed to the scheduler, as a user's DDP script does) and clip (the
    user's `clip_grad_norm_` at that max norm after each backward pass, in every arm) and onecycle (the
    user's other `OneCycleLR` arguments, `ONECYCLE_FIELDS`, given to both schedulers: another shape)."""
    task, opt_kind = build(job["workload"])
    shape = onecycle_shape(job.get("onecycle"))
    seed, steps = int(job["seed"]), int(job["steps"])
    # the global generator (dropout's masks) starts from the job, not from whatever job this process ran last
    torch.manual_seed(seed * 7919 + rank)
    started = time.perf_counter()
    model = task.model(seed)
    if job.get("perturb"):
        perturb_(model, float(job["perturb"]), int(job.get("perturb_seed", 0)))
    arm = job["arm"]
    kind = job["optimizer"] if arm == "lrfree" else opt_kind
    # `param_groups`: the user's optimizer has several groups, each at its share of the rate (a list max_lr)
    groups = task.param_groups(model) if hasattr(task, "param_groups") else None
    # `group_options`: each group's own settings (a weight decay); `group_ratios`: each group's share of the
    # rate (`max_lr` a list); without them the groups share the job's one `max_lr`, as most users' do
    options = getattr(task, "group_options", None) or [{}] * len(groups or ())
    params = [{"params": g, **o} for g, o in zip(groups or (), options, strict=True)] or model.parameters()
    ratios = getattr(task, "group_ratios", None)
    max_lr = [job["max_lr"] * r for r in ratios] if groups and ratios else job["max_lr"]
    optimizer = make_optimizer(kind, params, job["max_lr"] / 25.0, base=opt_kind)
    unused = {"find_unused_parameters": True} if getattr(task, "ddp_unused", False) else {}
    # OneCycle cycles a momentum or beta1 by default and refuses an optimizer with neither (Adagrad): such a
    # user passes cycle_momentum=False, to both schedulers
    # (and so does one whose SGD has no momentum: cycling it would switch momentum on)
    plain = isinstance(optimizer, torch.optim.SGD) and optimizer.defaults["momentum"] == 0
    cycles = {"cycle_momentum": False} if plain or not {"momentum", "betas"} & set(optimizer.defaults) else {}
    hdet = None
    if arm == "hdet":
        from hdet_ray import HDETDivergedError, HDETOneCycleLR

        # `ddp`: the user's DDP wrapper kept and passed as `model=` (the README's three-line change)
        net = DistributedDataParallel(model, **unused) if job.get("ddp") and world > 1 else model
        options = hdet_options(job.get("hdet", {}))
        options.setdefault("sync_every", job["sync_every"])
        hdet = HDETOneCycleLR(
            optimizer,
            max_lr=max_lr,
            total_steps=steps,
            model=net,
            seed=seed,
            **cycles,
            **shape,
            **options,
        )
        scheduler = hdet
    else:
        net = DistributedDataParallel(model, **unused) if world > 1 else model
        scheduler = OneCycleLR(optimizer, max_lr=max_lr, total_steps=steps, **cycles, **shape)
    batches = task.batches(rank, world, seed)
    clip = float(job.get("clip") or getattr(task, "clip", 0.0))  # the job's, else the workload's own
    replica_val: list[list[list[float]]] = []
    diverged = False
    try:
        for i in range(steps):
            if hasattr(task, "at_step"):  # the user's own per-step change (a body unfrozen)
                task.at_step(model, i, steps)
            optimizer.zero_grad(set_to_none=True)
            loss = _accumulated(task, net, batches)
            if clip:  # the user's gradient clip, between backward() and step()
                torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            optimizer.step()
            if hdet is not None:
                window = hdet.window
                if job.get("replica_validation") and (
                    hdet.state.in_window + 1 == hdet.sync_every or i == steps - 1
                ):
                    replica_val.append(_replica_validation(task, model, hdet.multipliers["lr"], world))
                # the loss the user reports: the task's own choice where it has one (a policy gradient's)
                hdet.step(loss=task.reported(loss) if hasattr(task, "reported") else loss)
                if i == steps - 1:
                    hdet.finish()
                if job.get("validate_every_window") and hdet.window != window and rank == 0:
                    # the converged model's validation metric, on the record of the window just closed
                    hdet.records[-1].metrics[task.metric] = task.evaluate(model)[task.metric]
            else:
                scheduler.step()
    except HDETDivergedError:  # type: ignore[misc]  # raised on every rank at the same sync
        diverged = True
    finally:
        if hdet is not None:
            hdet.close()
    metric = task.evaluate(model)[task.metric] if rank == 0 else math.nan
    out: dict[str, Any] = {
        "metric": metric,
        "diverged": diverged or not math.isfinite(metric),
        "wall_s": time.perf_counter() - started,
    }
    if hdet is not None:
        out["records"] = [r.to_dict() for r in hdet.records]
        out["centres"] = [math.exp(r.params["lr"].new_offset) for r in hdet.records]
        out["rollbacks"] = sum(r.rollback for r in hdet.records)
        if job.get("replica_validation"):
            out["replica_validation"] = replica_val
    return out


def _accumulated(task: Task, net: nn.Module, batches: Iterator[Any]) -> torch.Tensor:
    """One optimizer step's backward passes, as its user writes them: `task.accumulate` micro-batches (1 if
    the task names none), each loss divided by their number and its gradient accumulated; a DDP `net` is held
    in `no_sync()` for all but the last, whose backward pass all-reduces the sum. Returns the step's loss,
    the micro-batches' mean (detached where there were several)."""
    micro = int(getattr(task, "accumulate", 1))
    if micro == 1:
        loss = task.loss(net, next(batches))
        loss.backward()
        return loss
    total = torch.zeros(())
    for k in range(micro):
        quiet = net.no_sync() if isinstance(net, DistributedDataParallel) and k < micro - 1 else nullcontext()
        with quiet:
            part = task.loss(net, next(batches)) / micro
            part.backward()
        total += part.detach()
    return total


def _replica_validation(task: Task, model: nn.Module, multiplier: float, world: int) -> list[list[float]]:
    """Every replica's own validation metric and rate multiplier at a window's last step, before the
    average: [[metric, multiplier] per rank] (`benchmarks.val_signal`)."""
    import torch.distributed as dist

    mine = torch.tensor([task.evaluate(model)[task.metric], multiplier], dtype=torch.float64)
    if world == 1:
        return [mine.tolist()]
    every = [torch.zeros_like(mine) for _ in range(world)]
    dist.all_gather(every, mine)
    return [t.tolist() for t in every]
