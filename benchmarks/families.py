"""The benchmarks' model and data families beyond `hdet_ray.tasks`: the quality benchmark's BatchNorm CNN
(`DigitsCNN`) and every family `benchmarks.unseen` runs. Each is a `hdet_ray.tasks.Task`;
`benchmarks.workloads` names them, with their optimizers, in `TASKS`.

`benchmarks.holdout` swaps the quality workloads' optimizers; `benchmarks.unseen` adds model and data
families no default was chosen on: `regression` (a teacher-student regression, MSE, an MLP with LayerNorm,
Adam), `gru` (a GRU byte LM, Adam), `softmax` (softmax regression on the digits: convex, SGD + momentum) and
`tabular` (synthetic tabular classification on features of scales 0.1 to 10, an MLP with dropout, SGD +
momentum), then two added after every default of 2026-12-03 was fixed: `vit` (a vision transformer on the
digits' 2x2 patches, AdamW) and `resnet` (a residual CNN with GroupNorm on the digits, SGD + momentum), and
on 2026-12-04 `autoencoder` (an undercomplete autoencoder on the digits, reconstruction MSE, AdamW), then
`cnn_rmsprop` (a CNN with no normalization layer, RMSprop) and `deep_mlp` (a deep ReLU MLP with no
normalization layer, NAdam), and on 2026-12-05 `waveforms` (a dilated 1-D CNN on synthetic signals, SGD with
Nesterov momentum and weight decay) and `ratings` (matrix factorization, Adagrad), then `heteroscedastic` (a
regression on the Gaussian negative log-likelihood of a predicted mean and variance, whose training loss ends
below zero; Adam) and `smoothed` (the tabular data with a residual MLP trained with label smoothing, whose
loss has a floor well above zero; AdamW) and `lstm` (an LSTM byte LM, SGD + momentum with the gradient
clipped at norm 0.5), and on 2026-12-05 `graph` (a two-layer GCN on a synthetic graph, full-batch, so that
dropout is a gradient's only noise; Adam) and `multilabel` (24 sigmoid cross-entropies on synthetic
features, whose loss first falls fast to the labels' base rates; AdamW), and `spirals` (three spiral arms
in the plane, an MLP, 8 points a batch per rank; SGD + momentum), then `finetune` (an MLP pretrained on a
source classification task, fine-tuned with a new head on a related one; AdamW), and `contrastive` (an MLP
encoder of the digits trained on the InfoNCE loss between two shifted, noisy views of each image; RAdam),
and `counts` (a Poisson regression of counts through an exponential link; SGD + momentum), then
`finetune_groups` (the fine-tune with the body at a tenth of the head's rate, two parameter groups; AdamW),
`bag_of_words` (an `EmbeddingBag` classifier on Zipf-distributed tokens: sparse embedding gradients; Adam) and
`experts` (a top-1 mixture of four expert MLPs on the digits; AdamW), then `finetune_staged` (the fine-tune
with its body frozen for the first fifth of the steps; AdamW) and `tabular_wide` (the tabular classifier at
256 rows a rank; SGD + momentum), then `denoising` (a diffusion model's noise-prediction loss on 8-D
mixture data, a noise level per row: a loss noisy at every rate; AdamW), `median` (regression under
heavy-tailed noise on the absolute error; SGD + momentum) and `surface` (a tanh MLP fitting a smooth 2-D
surface full-batch with no noise at all; Adamax), then `vae` (a variational autoencoder on the digits: the
negative ELBO with a reparameterised sample drawn per rank and step; Adam) and `poisson` (a physics-informed
network solving u'' = f on [0, 1], whose loss differentiates the network twice inside the forward pass, at
random collocation points; Adam), and `accumulated` (the digits MLP under SGD + momentum at micro-batches of
8, four accumulated per optimizer step; `_accumulated`) and `decay_groups` (the regression under AdamW in two
parameter groups, weight decay 0.1 on the weight matrices and none on biases and norms, one `max_lr`), then
`noisy_labels` (the digits MLP on training labels of which a fixed 30% are wrong, validated on clean ones;
Adam) and `vit_postnorm` (the ViT with post-norm layers, the original transformer's; AdamW), then
`ill_conditioned` (linear least squares on features whose scales span 100x; SGD + momentum) and `binarized`
(an MLP with sign activations trained through the straight-through estimator; Adam), then `deep_linear` (a
deep linear network from a small start, saddle to saddle; SGD + momentum) and `spectral` (the digits MLP
with spectrally normalised hidden layers, whose power-iteration buffers move in every forward pass; Adam),
then `rnn` (an Elman RNN byte LM under SGD + momentum with no clip) and `cnn_amsgrad` (the BatchNorm CNN
under AdamW with `amsgrad=True`), then `small_targets` (the regression with targets a thousand times
smaller, not standardised; Adam) and `full_batch` (the digits MLP on each rank's whole share every step, no
sampling noise; SGD + momentum), then `curriculum` (the digits MLP on training images whose noise grows over
the run, so the training loss rises by design; SGD + momentum) and `tabular_adadelta` (the tabular classifier
under Adadelta, whose step is the rate times a ratio of running averages), then `tiny_batch` (the digits MLP
at 2 images a rank a step: a gradient and a loss dominated by sampling noise; SGD + momentum) and
`tabular_plain_sgd` (the tabular classifier under SGD with no momentum), then `mlp_bf16` (the digits MLP
under bfloat16 autocast; SGD + momentum) and `reverse` (a transformer encoder reversing sequences of tokens:
a loss on a plateau until a sudden phase transition; Adam), then `hinge` (the digits MLP on the
multi-class hinge loss, which reaches exactly zero; SGD + momentum) and `bandit` (the digits as a contextual
bandit trained by REINFORCE: a surrogate loss around zero that measures nothing; Adam), and
`bandit_miss` (the bandit reporting its miss rate, 1 - the mean reward, to HDET instead of the surrogate),
then `lm_dropout` (the byte LM with dropout 0.1; AdamW) and `poisson64` (the physics-informed network in
float64; Adam), and on 2026-12-07 `siren` (the surface fitted by a network of sine units, w0 = 30; Adam),
`augmented` (the BatchNorm CNN on digits shifted by up to a pixel each way, SGD with Nesterov momentum and
weight decay) and `many_classes` (256 classes of noisy Gaussian prototypes, 64 rows a class; AdamW), then
`forecast` (a GRU forecasting the chaotic Mackey-Glass series 8 steps ahead, validated on its latest
stretch; Adam), `flow` (a RealNVP-style normalizing flow on two half-moons, whose negative log-likelihood
goes below zero; Adam) and `click_through` (click prediction from 8 Zipf-distributed categorical fields
through embeddings, 5% positive; AdamW), then `private` (the digits MLP under DP-SGD: each example's gradient
clipped, Gaussian noise of fixed size added to the batch's; SGD + momentum), `mixup` (the digits MLP on
batches blended with a shuffle of themselves, alpha 0.4, validated clean; AdamW) and `adversarial` (the
digits MLP under FGSM adversarial training with a random start, validated under the attack; Adam), then
`long_tail` (the digits MLP on a training set whose class c keeps 0.7 ** c of its images, validated
balanced; SGD + momentum), `ema` (the digits MLP scored on an exponential moving average of its weights,
the user's own copy; AdamW) and `sparse_autoencoder` (an overcomplete ReLU autoencoder on the digits with
an L1 penalty on its codes; Adam), then `vq` (a vector-quantised autoencoder on the digits, a codebook of
64 with the straight-through estimator; Adam), `multitask` (one trunk, two heads: the digit's class and the
image's unstandardised total ink, their losses summed; AdamW) and `distill` (a narrow student distilled from
a wider teacher at temperature 4; SGD + momentum), then `lora` (the fine-tune by low-rank adapters beside
its frozen pretrained layers; AdamW), `weight_norm` (the digits MLP with weight-normalised layers; SGD +
momentum) and `bayes` (a Bayesian MLP on the digits by Bayes by backprop, weights drawn in every forward
pass, the KL to the prior most of the loss; Adam), then `segmentation` (a U-Net labelling every pixel of 16x16
images of disks and squares; Adam), `masked_lm` (BERT's masked-byte objective on the LM's text, a
bidirectional transformer encoder; AdamW) and `depthwise` (a MobileNet-style CNN of depthwise-separable blocks
with GroupNorm and SiLU on the digits; SGD + momentum), then on 2026-12-08 `ctc` (unaligned sequence labelling
on the CTC loss, a 1-D CNN tagging every frame; Adam), `focal` (the digits MLP on the focal loss, gamma 2; SGD
+ momentum) and `lm_adafactor` (the byte LM under torch's `Adafactor`).
"""

from __future__ import annotations

import itertools
import math
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import torch
from torch import nn

from hdet_ray.tasks import ByteLM, Digits, Task


@dataclass
class DigitsCNN(Digits):
    """A small CNN with BatchNorm on the 8x8 digits images (the MLP's data, split and metric); with
    `batch_norm=False` the same CNN with no normalization layer."""

    channels: int = 16
    batch_norm: bool = True
    name: str = field(default="digits_cnn", init=False)

    def model(self, seed: int) -> nn.Module:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            c = self.channels
            norm = nn.BatchNorm2d if self.batch_norm else lambda _: nn.Identity()
            return nn.Sequential(
                nn.Unflatten(1, (1, 8, 8)),
                nn.Conv2d(1, c, 3, padding=1),
                norm(c),
                nn.ReLU(),
                nn.Conv2d(c, 2 * c, 3, padding=1),
                norm(2 * c),
                nn.ReLU(),
                nn.MaxPool2d(2),
                nn.Flatten(),
                nn.Linear(2 * c * 16, 10),
            )


@dataclass
class DigitsAutoencoder(Digits):
    """An undercomplete autoencoder on the 8x8 digits (64 -> 64 -> 8 -> 64 -> 64, SiLU): no labels, the loss
    and metric the reconstruction's MSE on the digits' held-out images. No chance level: not a classifier."""

    hidden: int = 64
    code: int = 8
    name: str = field(default="digits_autoencoder", init=False)
    chance_loss: float | None = field(default=None, init=False)  # type: ignore[assignment]

    def model(self, seed: int) -> nn.Module:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            h, c = self.hidden, self.code
            return nn.Sequential(
                nn.Linear(64, h),
                nn.SiLU(),
                nn.Linear(h, c),
                nn.SiLU(),
                nn.Linear(c, h),
                nn.SiLU(),
                nn.Linear(h, 64),
            )

    def loss(self, model: nn.Module, batch: Any) -> torch.Tensor:
        x, _ = batch
        return nn.functional.mse_loss(model(x), x)

    @torch.no_grad()
    def evaluate(self, model: nn.Module) -> dict[str, float]:
        x = self.validation_set()[0]  # the images Digits holds out
        return {"val_loss": float(nn.functional.mse_loss(model(x), x))}


@dataclass
class _Synthetic(Task):
    """A fixed synthetic data set (`_data`: inputs and targets, the first `validation` rows held out) in
    shuffled batches of `batch_size` per rank, trained and validated on `criterion` (`metric` val_loss)."""

    criterion = staticmethod(nn.functional.mse_loss)
    train: int = 8192
    validation: int = 1024
    batch_size: int = 32

    def _data(self) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError

    def _draw(self) -> tuple[torch.Generator, int]:
        """The generator a data set is drawn from (seeded 0: one fixed data set for every run) and its number
        of rows, `train` + `validation`."""
        return torch.Generator().manual_seed(0), self.train + self.validation

    def batches(self, rank: int, replicas: int, seed: int):
        return _shuffled(*self._data(), self.validation, self.batch_size, rank, replicas, seed)

    def loss(self, model: nn.Module, batch: Any) -> torch.Tensor:
        x, y = batch
        return self.criterion(model(x), y)

    def _validation(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The held-out inputs and what `_score` compares the model's output with."""
        x, y = self._data()
        return x[: self.validation], y[: self.validation]

    def _score(self, out: torch.Tensor, target: torch.Tensor) -> dict[str, float]:
        return {"val_loss": float(self.criterion(out, target))}

    @torch.no_grad()
    def evaluate(self, model: nn.Module) -> dict[str, float]:
        x, target = self._validation()
        was_training = model.training
        model.eval()  # dropout off (the tabular classifier's); the other tasks have no such layer
        out = model(x)
        model.train(was_training)
        return self._score(out, target)


def _teacher_weights(
    inputs: int, hidden: int, g: torch.Generator, outputs: int = 1
) -> tuple[torch.Tensor, torch.Tensor]:
    """A random tanh network's two weight matrices, drawn from `g`."""
    w1 = torch.randn(inputs, hidden, generator=g) * 2.0 / math.sqrt(inputs)
    w2 = torch.randn(hidden, outputs, generator=g) / math.sqrt(hidden)
    return w1, w2


def _teacher(x: torch.Tensor, hidden: int, g: torch.Generator, outputs: int = 1) -> torch.Tensor:
    """A fixed random tanh network's output (n, `outputs`) on inputs `x`, its weights drawn from `g`."""
    return _teach(x, _teacher_weights(x.shape[1], hidden, g, outputs))


def _teach(x: torch.Tensor, weights: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """The tanh network of `weights` (`_teacher_weights`) on inputs `x`."""
    w1, w2 = weights
    return torch.tanh(x @ w1) @ w2


def _redrawn(y: torch.Tensor, classes: int, flip: float, g: torch.Generator) -> torch.Tensor:
    """Class labels `y` with a fraction `flip` of them redrawn at random from `g`."""
    redraw = torch.rand(len(y), generator=g) < flip
    return torch.where(redraw, torch.randint(0, classes, (len(y),), generator=g), y)


@dataclass
class Regression(_Synthetic):
    """Teacher-student regression: 16 Gaussian inputs, the target a fixed random tanh network's output plus
    noise (scaled to unit variance), the student an MLP with LayerNorm and GELU; metric validation MSE. No
    chance level: the loss scale is not a cross-entropy's."""

    width: int = 128
    inputs: int = 16
    validation: int = 1024
    batch_size: int = 32
    noise: float = 0.1
    name: str = field(default="regression", init=False)
    metric: str = field(default="val_loss", init=False)
    criterion = staticmethod(nn.functional.mse_loss)

    def _data(self) -> tuple[torch.Tensor, torch.Tensor]:
        g, _ = self._draw()
        x = torch.randn(self.train + self.validation, self.inputs, generator=g)
        y = _teacher(x, 64, g)
        y = y + self.noise * y.std() * torch.randn(y.shape, generator=g)
        return x, (y - y.mean()) / y.std()

    def model(self, seed: int) -> nn.Module:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            w = self.width
            return nn.Sequential(
                nn.Linear(self.inputs, w),
                nn.LayerNorm(w),
                nn.GELU(),
                nn.Linear(w, w),
                nn.LayerNorm(w),
                nn.GELU(),
                nn.Linear(w, 1),
            )


def _shuffled(
    x: torch.Tensor, y: torch.Tensor, validation: int, batch_size: int, rank: int, replicas: int, seed: int
):
    """Endless shuffled batches of this rank's shard of the training rows (after the first `validation`)."""
    x, y = x[validation:][rank::replicas], y[validation:][rank::replicas]
    g = torch.Generator().manual_seed(seed * 7919 + rank)
    while True:
        order = torch.randperm(len(y), generator=g)
        for i in range(0, len(y) - batch_size + 1, batch_size):
            idx = order[i : i + batch_size]
            yield x[idx], y[idx]


def _whole_share(x: torch.Tensor, y: torch.Tensor, validation: int, rank: int, replicas: int):
    """Full-batch: this rank's whole share of the training rows (after the first `validation`), every step."""
    x, y = x[validation:][rank::replicas], y[validation:][rank::replicas]
    while True:
        yield x, y


def _pretrain(
    net: nn.Module, x: torch.Tensor, y: torch.Tensor, steps: int, batch: int, seed: int
) -> nn.Module:
    """`net` trained once, the same bits on every call: Adam at 1e-3 on the cross-entropy, `steps` batches of
    `batch` rows drawn with replacement by a generator seeded `seed` (gradients on even where the caller
    runs under `torch.no_grad`)."""
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(seed)
    with torch.enable_grad():
        for _ in range(steps):
            idx = torch.randint(0, len(y), (batch,), generator=g)
            opt.zero_grad()
            nn.functional.cross_entropy(net(x[idx]), y[idx]).backward()
            opt.step()
    return net


def _two_hidden(inputs: int, width: int, outputs: int, dropout: float = 0.0) -> nn.Sequential:
    """An MLP with two hidden ReLU layers of `width`, each followed by dropout if `dropout` > 0."""
    layers: list[nn.Module] = []
    for size in (inputs, width):
        layers += [nn.Linear(size, width), nn.ReLU()] + ([nn.Dropout(dropout)] if dropout > 0 else [])
    return nn.Sequential(*layers, nn.Linear(width, outputs))


@dataclass
class Tabular(_Synthetic):
    """Synthetic tabular classification: 32 Gaussian features on scales from 0.1 to 10 (ill-conditioned for
    SGD), 8 classes given by a fixed random tanh network on the standardised features, 5% of the labels
    redrawn at random; an MLP with dropout 0.1; metric validation cross-entropy. No chance level is named."""

    features: int = 32
    classes: int = 8
    width: int = 256
    validation: int = 2048
    batch_size: int = 32
    flip: float = 0.05
    name: str = field(default="tabular", init=False)
    metric: str = field(default="val_loss", init=False)
    criterion = staticmethod(nn.functional.cross_entropy)

    def _data(self) -> tuple[torch.Tensor, torch.Tensor]:
        g, n = self._draw()
        z = torch.randn(n, self.features, generator=g)
        y = _teacher(z, 64, g, outputs=self.classes).argmax(1)
        y = _redrawn(y, self.classes, self.flip, g)
        return z * torch.logspace(-1, 1, self.features), y

    def model(self, seed: int) -> nn.Module:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return _two_hidden(self.features, self.width, self.classes, dropout=0.1)


class _ResidualMLP(nn.Module):
    """Pre-norm residual blocks (LayerNorm, a Linear to twice the width, GELU, a Linear back) on an input
    projection, then a LayerNorm and a linear head."""

    def __init__(self, inputs: int, width: int, blocks: int, outputs: int) -> None:
        super().__init__()
        self.project = nn.Linear(inputs, width)
        self.blocks = nn.ModuleList(
            nn.Sequential(
                nn.LayerNorm(width), nn.Linear(width, 2 * width), nn.GELU(), nn.Linear(2 * width, width)
            )
            for _ in range(blocks)
        )
        self.head = nn.Sequential(nn.LayerNorm(width), nn.Linear(width, outputs))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.project(x)
        for block in self.blocks:
            h = h + block(h)
        return self.head(h)


@dataclass
class SmoothedTabular(Tabular):
    """The tabular classification data with a residual MLP (3 pre-norm blocks of width 128, LayerNorm,
    GELU), trained with label smoothing 0.1, so the training loss has a floor well above zero (about 0.5 on
    8 classes) and never falls by the factors an unsmoothed loss does; metric `val_error`, the held-out
    error rate (the 5% of labels redrawn at random set its floor). No chance level is named."""

    width: int = 128
    blocks: int = 3
    name: str = field(default="smoothed", init=False)
    metric: str = field(default="val_error", init=False)
    criterion = staticmethod(partial(nn.functional.cross_entropy, label_smoothing=0.1))

    def _score(self, out: torch.Tensor, target: torch.Tensor) -> dict[str, float]:
        return {"val_error": float((out.argmax(1) != target).float().mean())}

    def model(self, seed: int) -> nn.Module:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return _ResidualMLP(self.features, self.width, self.blocks, self.classes)


class _Recurrent(nn.Module):
    """Byte embedding, one recurrent layer (`cell`: nn.GRU or nn.LSTM), a linear head over the 256 bytes."""

    def __init__(self, dim: int, hidden: int, cell: type[nn.Module]) -> None:
        super().__init__()
        self.embed = nn.Embedding(256, dim)
        self.rnn = cell(dim, hidden, batch_first=True)
        self.head = nn.Linear(hidden, 256)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.head(self.rnn(self.embed(idx))[0])


@dataclass
class ByteGRU(ByteLM):
    """A one-layer GRU over the byte LM's data (its batches, split and bits-per-byte metric)."""

    hidden: int = 64
    name: str = field(default="bytegru", init=False)
    cell = nn.GRU

    def model(self, seed: int) -> nn.Module:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return _Recurrent(self.dim, self.hidden, self.cell)


@dataclass
class ByteLSTM(ByteGRU):
    """A one-layer LSTM over the byte LM's data, trained the way recurrent LMs long were: SGD with momentum
    and the gradient clipped to norm `clip` after every backward pass (in both arms, as its user would)."""

    clip: float = 0.5
    name: str = field(default="bytelstm", init=False)
    cell = nn.LSTM


@dataclass
class ByteRNN(ByteGRU):
    """A one-layer Elman RNN (`nn.RNN`, tanh) over the byte LM's data, under SGD + momentum with no gradient
    clip: with no gates the gradient through 32 steps can grow without bound, and a rate past the edge meets
    a cliff, a single step whose gradient is orders of magnitude larger than the last."""

    name: str = field(default="byternn", init=False)
    cell = nn.RNN


@dataclass
class Softmax(Digits):
    """Softmax regression (one linear layer) on the digits: a convex problem."""

    name: str = field(default="digits_softmax", init=False)

    def model(self, seed: int) -> nn.Module:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return nn.Linear(64, 10)


class _ViT(nn.Module):
    """A vision transformer for 8x8 images: 2x2 patches (16 tokens), pre-norm encoder layers (post-norm with
    `norm_first=False`, the original transformer's, which needs its warm-up), mean-pooled."""

    def __init__(self, dim: int, heads: int, layers: int, norm_first: bool = True) -> None:
        super().__init__()
        self.embed = nn.Linear(4, dim)
        self.position = nn.Parameter(0.02 * torch.randn(16, dim))
        layer = nn.TransformerEncoderLayer(
            dim, heads, dim_feedforward=2 * dim, dropout=0.0, batch_first=True, norm_first=norm_first
        )
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        patches = x.view(-1, 4, 2, 4, 2).permute(0, 1, 3, 2, 4).reshape(-1, 16, 4)
        h = self.encoder(self.embed(patches) + self.position)
        return self.head(self.norm(h).mean(1))


@dataclass
class DigitsViT(Digits):
    """A tiny vision transformer on the 8x8 digits (the MLP's data, split and metric); `norm_first=False`:
    post-norm layers."""

    dim: int = 32
    heads: int = 2
    layers: int = 2
    norm_first: bool = True
    name: str = field(default="digits_vit", init=False)

    def model(self, seed: int) -> nn.Module:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return _ViT(self.dim, self.heads, self.layers, self.norm_first)


class _Residual(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(channels, channels, 3, padding=1),
            nn.GroupNorm(4, channels),
            nn.ReLU(),
            nn.Conv2d(channels, channels, 3, padding=1),
            nn.GroupNorm(4, channels),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x + self.body(x))


class _ResNet(nn.Sequential):
    """A GroupNorm stem, two residual blocks, global average pooling and a linear head, for 8x8 images."""

    def __init__(self, c: int) -> None:
        stem = [nn.Unflatten(1, (1, 8, 8)), nn.Conv2d(1, c, 3, padding=1), nn.GroupNorm(4, c), nn.ReLU()]
        pool = [nn.AdaptiveAvgPool2d(1), nn.Flatten()]
        super().__init__(*stem, _Residual(c), _Residual(c), *pool, nn.Linear(c, 10))


@dataclass
class DigitsResNet(Digits):
    """A small residual CNN with GroupNorm on the 8x8 digits (no BatchNorm: nothing in buffers)."""

    channels: int = 16
    name: str = field(default="digits_resnet", init=False)

    def model(self, seed: int) -> nn.Module:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return _ResNet(self.channels)


@dataclass
class DigitsDeepMLP(Digits):
    """A deep ReLU MLP with no normalization layer on the digits: 6 hidden layers of 64."""

    depth: int = 6
    width: int = 64
    name: str = field(default="digits_deep_mlp", init=False)
    # the network is `Digits.model`'s at this depth and width


@dataclass
class Waveforms(_Synthetic):
    """Synthetic 1-D signal classification: 6 classes of sine waves at nearby frequencies (a period of 6 to
    11 samples), each with a random phase, amplitude and slow drift, under Gaussian noise of unit variance,
    64 samples long; a 1-D convolutional network (dilations 1, 2, 4, no normalization, global average
    pooling); metric validation cross-entropy. No chance level is named."""

    classes: int = 6
    length: int = 64
    channels: int = 32
    validation: int = 2048
    batch_size: int = 32
    noise: float = 1.0
    name: str = field(default="waveforms", init=False)
    metric: str = field(default="val_loss", init=False)
    criterion = staticmethod(nn.functional.cross_entropy)

    def _data(self) -> tuple[torch.Tensor, torch.Tensor]:
        g, n = self._draw()
        y = torch.randint(0, self.classes, (n,), generator=g)
        period = 6.0 + y.float()  # class c: a period of 6 + c samples
        t = torch.arange(self.length, dtype=torch.float32)
        phase = 2 * math.pi * torch.rand(n, 1, generator=g)
        amplitude = 0.5 + torch.rand(n, 1, generator=g)
        drift = torch.randn(n, 1, generator=g) * t / self.length
        wave = amplitude * torch.sin(2 * math.pi * t / period[:, None] + phase) + drift
        x = wave + self.noise * torch.randn(n, self.length, generator=g)
        return x[:, None, :], y

    def model(self, seed: int) -> nn.Module:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            c = self.channels
            return nn.Sequential(
                nn.Conv1d(1, c, 5, padding=2),
                nn.ReLU(),
                nn.Conv1d(c, c, 5, padding=4, dilation=2),
                nn.ReLU(),
                nn.Conv1d(c, c, 5, padding=8, dilation=4),
                nn.ReLU(),
                nn.AdaptiveAvgPool1d(1),
                nn.Flatten(),
                nn.Linear(c, self.classes),
            )


class _Factors(nn.Module):
    def __init__(self, users: int, items: int, dim: int) -> None:
        super().__init__()
        self.user, self.item = nn.Embedding(users, dim), nn.Embedding(items, dim)
        self.user_bias, self.item_bias = nn.Embedding(users, 1), nn.Embedding(items, 1)
        for e in (self.user, self.item):
            nn.init.normal_(e.weight, std=0.1)
        for e in (self.user_bias, self.item_bias):
            nn.init.zeros_(e.weight)

    def forward(self, pairs: torch.Tensor) -> torch.Tensor:
        u, i = pairs[:, 0], pairs[:, 1]
        dot = (self.user(u) * self.item(i)).sum(1)
        return dot + self.user_bias(u)[:, 0] + self.item_bias(i)[:, 0]


@dataclass
class Ratings(_Synthetic):
    """Matrix factorization: ratings of 300 users by 300 items from a fixed rank-8 truth plus user and
    item offsets and noise (standardised); 20,000 observed pairs to train on, 4,096 held out; a dot product
    of 32-wide embeddings plus biases; metric validation MSE. Sparse data that a model this wide can
    overfit. No chance level is named."""

    users: int = 300
    items: int = 300
    rank: int = 8
    dim: int = 32
    train: int = 20_000
    validation: int = 4096
    batch_size: int = 64
    noise: float = 0.5
    name: str = field(default="ratings", init=False)
    metric: str = field(default="val_loss", init=False)
    criterion = staticmethod(nn.functional.mse_loss)

    def _data(self) -> tuple[torch.Tensor, torch.Tensor]:
        g, n = self._draw()
        u = torch.randn(self.users, self.rank, generator=g)
        v = torch.randn(self.items, self.rank, generator=g)
        pairs = torch.stack(
            [
                torch.randint(0, self.users, (n,), generator=g),
                torch.randint(0, self.items, (n,), generator=g),
            ],
            1,
        )
        y = (u[pairs[:, 0]] * v[pairs[:, 1]]).sum(1) / math.sqrt(self.rank)
        y = (
            y
            + 0.5 * torch.randn(self.users, generator=g)[pairs[:, 0]]
            + 0.5 * torch.randn(self.items, generator=g)[pairs[:, 1]]
        )
        y = y + self.noise * torch.randn(n, generator=g)
        return pairs, (y - y.mean()) / y.std()

    def model(self, seed: int) -> nn.Module:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return _Factors(self.users, self.items, self.dim)


def _gaussian_nll(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Gaussian negative log-likelihood (less its constant) of targets `y` (n, 1) under the mean `out[:, :1]`
    and log-variance `out[:, 1:]`: negative once the predicted spread is below about 0.6."""
    mean, log_var = out[:, :1], out[:, 1:]
    return 0.5 * (log_var + (y - mean) ** 2 * torch.exp(-log_var)).mean()


@dataclass
class Heteroscedastic(_Synthetic):
    """Regression with input-dependent noise, trained on the Gaussian negative log-likelihood of a predicted
    mean and log-variance, so the training loss crosses zero and ends negative (a log-density); 8 Gaussian
    inputs, the mean a fixed random tanh network's output (unit variance), the noise's sd 0.05 to 0.5 by a
    second one; an MLP with GELU; metric `val_error`, the held-out mean squared error of the predicted mean
    against the noise-free truth. No chance level."""

    width: int = 128
    inputs: int = 8
    name: str = field(default="heteroscedastic", init=False)
    metric: str = field(default="val_error", init=False)
    criterion = staticmethod(_gaussian_nll)

    def _truth(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        g, _ = self._draw()
        x = torch.randn(self.train + self.validation, self.inputs, generator=g)
        mean = _teacher(x, 32, g)
        mean = (mean - mean.mean()) / mean.std()
        sd = 0.05 + 0.45 * torch.sigmoid(2.0 * x @ torch.randn(self.inputs, 1, generator=g))
        return x, mean + sd * torch.randn(mean.shape, generator=g), mean

    def _data(self) -> tuple[torch.Tensor, torch.Tensor]:
        x, y, _ = self._truth()
        return x, y

    def _validation(self) -> tuple[torch.Tensor, torch.Tensor]:
        x, _, mean = self._truth()  # scored against the noise-free mean
        return x[: self.validation], mean[: self.validation]

    def _score(self, out: torch.Tensor, target: torch.Tensor) -> dict[str, float]:
        return {"val_error": float(((out[:, :1] - target) ** 2).mean())}

    def model(self, seed: int) -> nn.Module:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            w = self.width
            return nn.Sequential(
                nn.Linear(self.inputs, w), nn.GELU(), nn.Linear(w, w), nn.GELU(), nn.Linear(w, 2)
            )


class _GCN(nn.Module):
    """Two graph convolutions (Kipf and Welling's): logits = A relu(A dropout(X) W1) W2 with the normalised
    adjacency A = D^-1/2 (adjacency + I) D^-1/2, dropout 0.5 on the features and the hidden layer; called
    with node indices, it returns those nodes' logits (the whole graph is propagated each call). The graph is
    a plain attribute, not a buffer: fixed, the same on every rank, nothing to average."""

    def __init__(self, features: torch.Tensor, adjacency: torch.Tensor, hidden: int, classes: int) -> None:
        super().__init__()
        self.features, self.adjacency = features, adjacency
        self.first, self.second = nn.Linear(features.shape[1], hidden), nn.Linear(hidden, classes)
        self.dropout = nn.Dropout(0.5)

    def forward(self, nodes: torch.Tensor) -> torch.Tensor:
        h = torch.relu(torch.sparse.mm(self.adjacency, self.first(self.dropout(self.features))))
        return torch.sparse.mm(self.adjacency, self.second(self.dropout(h)))[nodes]


@dataclass
class Graph(_Synthetic):
    """Semi-supervised node classification on a fixed synthetic graph (a stochastic block model): 3,000
    nodes in 6 classes, about 8 edges per node, 60% of them within a class; each node's 64 features are its
    class's mean direction under Gaussian noise (a linear model on the features alone gets half the held-out
    nodes right, the GCN about 84%); 1,200 labelled nodes to train on, 1,000 held
    out, the rest unlabelled; a two-layer GCN; metric validation cross-entropy. Full-batch: every step reads
    the rank's whole share of the labelled nodes, so the only noise in a gradient is dropout's. No chance
    level is named."""

    nodes: int = 3000
    classes: int = 6
    features: int = 64
    degree: float = 8.0
    within: float = 0.6
    signal: float = 0.15
    hidden: int = 64
    train: int = 1200
    validation: int = 1000
    name: str = field(default="graph", init=False)
    metric: str = field(default="val_loss", init=False)
    criterion = staticmethod(nn.functional.cross_entropy)

    def _graph(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(features (nodes, features), the normalised adjacency (sparse), labels (nodes,))."""
        g, _ = self._draw()  # one fixed graph for every run
        n, c = self.nodes, self.classes
        y = torch.randint(0, c, (n,), generator=g)
        means = nn.functional.normalize(torch.randn(c, self.features, generator=g), dim=1)
        x = self.signal * math.sqrt(self.features) * means[y] + torch.randn(n, self.features, generator=g)
        edges = int(n * self.degree / 2)
        u = torch.randint(0, n, (edges,), generator=g)
        same = torch.rand(edges, generator=g) < self.within
        # the other end: a random node of u's class, or of a random other class
        other = (y[u] + torch.randint(1, c, (edges,), generator=g)) % c
        target = torch.where(same, y[u], other)
        by_class = torch.argsort(y, stable=True)  # the nodes of class 0, then of class 1, ...
        count = torch.bincount(y, minlength=c)
        start = torch.cumsum(count, 0) - count
        pick = (torch.rand(edges, generator=g) * count[target]).long()
        v = by_class[start[target] + pick]
        loops = torch.arange(n)
        rows, cols = torch.cat([u, v, loops]), torch.cat([v, u, loops])
        edge = torch.unique(rows * n + cols)  # each (row, column) once: a repeated edge counts once
        i = torch.stack([edge // n, edge % n])
        d = torch.bincount(i[0], minlength=n).float().rsqrt()
        adjacency = torch.sparse_coo_tensor(i, d[i[0]] * d[i[1]], (n, n), check_invariants=True).coalesce()
        return x, adjacency, y

    def _data(self) -> tuple[torch.Tensor, torch.Tensor]:
        _, _, y = self._graph()
        labelled = torch.arange(self.validation + self.train)  # the held-out nodes first
        return labelled, y[labelled]

    def batches(self, rank: int, replicas: int, seed: int):
        return _whole_share(*self._data(), self.validation, rank, replicas)

    def model(self, seed: int) -> nn.Module:
        x, adjacency, _ = self._graph()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return _GCN(x, adjacency, self.hidden, self.classes)


@dataclass
class Multilabel(_Synthetic):
    """Multi-label classification: 32 Gaussian features, 24 labels, each on where a fixed random tanh
    network's output for it passes its own 90th percentile (about 10% of labels on), 3% of them flipped;
    an MLP (two hidden ReLU layers of 256) on a sigmoid cross-entropy per label, so the loss first falls fast
    as the labels' base rates are learned (0.69 to about 0.33) and the rest is slower; metric validation
    loss. No chance level is named."""

    features: int = 32
    labels: int = 24
    width: int = 256
    validation: int = 2048
    batch_size: int = 32
    flip: float = 0.03
    name: str = field(default="multilabel", init=False)
    metric: str = field(default="val_loss", init=False)
    criterion = staticmethod(nn.functional.binary_cross_entropy_with_logits)

    def _data(self) -> tuple[torch.Tensor, torch.Tensor]:
        g, n = self._draw()
        x = torch.randn(n, self.features, generator=g)
        score = _teacher(x, 64, g, outputs=self.labels)
        y = (score > score.quantile(0.9, dim=0)).float()
        flipped = torch.rand(y.shape, generator=g) < self.flip
        return x, torch.where(flipped, 1.0 - y, y)

    def model(self, seed: int) -> nn.Module:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return _two_hidden(self.features, self.width, self.labels)


@dataclass
class Spirals(_Synthetic):
    """Three interleaved spiral arms in the plane, one turn each (each point's angle and radius jittered);
    8 points a batch per rank (32 a step over 4 ranks, but each replica's window loss and hypergradient
    come from its own 8), an MLP with two hidden ReLU layers of 128; metric validation cross-entropy. A rate
    too high leaves it at the constant guess (ln 3). No chance level is named."""

    classes: int = 3
    turns: float = 1.0
    jitter: float = 0.15
    width: int = 128
    validation: int = 2048
    batch_size: int = 8
    name: str = field(default="spirals", init=False)
    metric: str = field(default="val_loss", init=False)
    criterion = staticmethod(nn.functional.cross_entropy)

    def _data(self) -> tuple[torch.Tensor, torch.Tensor]:
        g, n = self._draw()
        y = torch.randint(0, self.classes, (n,), generator=g)
        r = torch.rand(n, generator=g)  # 0 at the centre, 1 at the arm's end
        angle = 2 * math.pi * (self.turns * r + y / self.classes)
        angle = angle + self.jitter * torch.randn(n, generator=g) / (0.2 + r)
        radius = r + 0.05 * torch.randn(n, generator=g)
        return torch.stack([radius * torch.cos(angle), radius * torch.sin(angle)], 1), y

    def model(self, seed: int) -> nn.Module:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return _two_hidden(2, self.width, self.classes)


_PRETRAINED: dict[tuple, dict[str, torch.Tensor]] = {}
"""`Finetune`'s pretrained body per configuration, made once per process."""


@dataclass
class Finetune(_Synthetic):
    """Fine-tuning with a new head: an MLP (two hidden ReLU layers of 256) pretrained, once and the same for
    every run, on a source task (32 Gaussian features, 8 classes given by a fixed random tanh teacher; Adam at
    1e-3, `pretrain_steps` batches of 128 drawn from its own 16,384 rows), then trained here on a related
    target task (the same kind of features, 8 classes given by a teacher whose weights are the source's plus
    noise of `related` their size, 5% of the labels redrawn) with its final layer replaced by a new one drawn
    from the run's seed. The loss starts near ln 8, falls fast as the head learns and then slowly as the body
    adapts: a user's fine-tune. Metric validation cross-entropy. No chance level is named."""

    features: int = 32
    classes: int = 8
    width: int = 256
    validation: int = 2048
    batch_size: int = 32
    related: float = 0.5
    flip: float = 0.05
    pretrain_steps: int = 1000
    name: str = field(default="finetune", init=False)
    metric: str = field(default="val_loss", init=False)
    criterion = staticmethod(nn.functional.cross_entropy)

    def _teachers(self, g: torch.Generator) -> tuple[tuple[torch.Tensor, ...], tuple[torch.Tensor, ...]]:
        """(the source teacher's weights, the target teacher's), drawn from `g`."""
        w1, w2 = _teacher_weights(self.features, 64, g, self.classes)
        n1, n2 = torch.randn(w1.shape, generator=g), torch.randn(w2.shape, generator=g)
        return (w1, w2), (w1 + self.related * n1 * w1.std(), w2 + self.related * n2 * w2.std())

    def _labels(self, x: torch.Tensor, teacher: tuple[torch.Tensor, ...], g: torch.Generator) -> torch.Tensor:
        return _redrawn(_teach(x, teacher).argmax(1), self.classes, self.flip, g)

    def _data(self) -> tuple[torch.Tensor, torch.Tensor]:
        g, n = self._draw()
        _, target = self._teachers(g)
        x = torch.randn(n, self.features, generator=g)
        return x, self._labels(x, target, g)

    def _source(self) -> tuple[torch.Tensor, torch.Tensor]:
        g, _ = self._draw()
        source, _ = self._teachers(g)
        g = torch.Generator().manual_seed(1)  # the source task's rows: a draw of their own
        x = torch.randn(16_384, self.features, generator=g)
        return x, self._labels(x, source, g)

    def pretrained(self) -> dict[str, torch.Tensor]:
        """The body's weights after pretraining on the source task (the same bits on every call)."""
        key = ("v1", self.features, self.classes, self.width, self.related, self.flip, self.pretrain_steps)
        cached = Path(tempfile.gettempdir()) / f"hdet-bench-finetune-{'-'.join(map(str, key))}.pt"
        if key not in _PRETRAINED and cached.exists():
            _PRETRAINED[key] = torch.load(cached)
        if key not in _PRETRAINED:
            x, y = self._source()
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(0)
                net = _pretrain(
                    _two_hidden(self.features, self.width, self.classes), x, y, self.pretrain_steps, 128, 2
                )
            _PRETRAINED[key] = {k: v.detach().clone() for k, v in net.state_dict().items()}
            # one process's pretraining serves the rest (the 4 ranks of a run, the next runs): it is
            # deterministic, so whichever process writes it writes the same bits; written whole or not at all
            part = cached.with_suffix(f".{os.getpid()}.part")
            torch.save(_PRETRAINED[key], part)
            os.replace(part, cached)
        return _PRETRAINED[key]

    def model(self, seed: int) -> nn.Module:
        net = _two_hidden(self.features, self.width, self.classes)
        net.load_state_dict(self.pretrained())
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            net[-1] = nn.Linear(self.width, self.classes)  # a new head for the target task
        return net


@dataclass
class Counts(_Synthetic):
    """Poisson regression of counts: 16 Gaussian inputs, the log of each row's rate a fixed random tanh
    network's output (scaled to mean 1 and sd 1: rates from about 0.1 to 50), the count drawn from it; an MLP
    (two hidden ReLU layers of 128) predicts the log-rate, trained and validated on the Poisson negative
    log-likelihood (`poisson_nll_loss` with its Stirling term). The exponential link makes a step too long
    blow up fast: the gradient grows as the predicted rate does. No chance level is named."""

    width: int = 128
    inputs: int = 16
    validation: int = 1024
    batch_size: int = 32
    name: str = field(default="counts", init=False)
    metric: str = field(default="val_loss", init=False)

    @staticmethod
    def criterion(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return nn.functional.poisson_nll_loss(out.squeeze(1), y, log_input=True, full=True)

    def _data(self) -> tuple[torch.Tensor, torch.Tensor]:
        g, _ = self._draw()
        x = torch.randn(self.train + self.validation, self.inputs, generator=g)
        log_rate = _teacher(x, 64, g).squeeze(1)
        log_rate = 1.0 + (log_rate - log_rate.mean()) / log_rate.std()
        return x, torch.poisson(log_rate.exp(), generator=g)

    def model(self, seed: int) -> nn.Module:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return _two_hidden(self.inputs, self.width, 1)


def _shifted_views(x: torch.Tensor, g: torch.Generator, noise: float) -> torch.Tensor:
    """A view of each 8x8 digit: moved by up to one pixel each way (the edge wraps round), plus Gaussian
    noise of `noise` (the pixels are in [0, 1])."""
    images = x.view(-1, 8, 8)
    moves = torch.randint(-1, 2, (len(x), 2), generator=g)
    out = torch.empty_like(images)
    for dy in (-1, 0, 1):
        for dx in (-1, 0, 1):
            rows = ((moves[:, 0] == dy) & (moves[:, 1] == dx)).nonzero().flatten()
            out[rows] = torch.roll(images[rows], shifts=(dy, dx), dims=(1, 2))
    return out.reshape(len(x), 64) + noise * torch.randn(len(x), 64, generator=g)


def _info_nce(z: torch.Tensor, temperature: float) -> torch.Tensor:
    """The contrastive loss of 2B embeddings whose rows i and i + B are two views of one image: each row's
    cross-entropy of finding its partner among the other 2B - 1 (cosine similarity / `temperature`)."""
    z = nn.functional.normalize(z, dim=1)
    n = len(z) // 2
    sim = z @ z.T / temperature
    sim = sim.masked_fill(torch.eye(2 * n, dtype=torch.bool), float("-inf"))
    partner = torch.cat([torch.arange(n, 2 * n), torch.arange(n)])
    return nn.functional.cross_entropy(sim, partner)


@dataclass
class DigitsContrastive(Digits):
    """Self-supervised contrastive learning on the 8x8 digits: two views of each image (moved by up to a
    pixel, plus noise), an MLP encoder (64 -> 256 -> 256 -> 32, ReLU), and the InfoNCE loss at temperature
    0.2 over a rank's batch (32 images, 64 views: each view's partner among 63). No labels; the metric is the
    same loss on the held-out images in batches of 32, with views drawn once. Its floor is well above zero
    and depends on the batch; an encoder collapsed to one point sits at ln 63 (no chance level is named)."""

    temperature: float = 0.2
    noise: float = 0.1
    embedding: int = 32
    width: int = 256
    name: str = field(default="digits_contrastive", init=False)
    chance_loss: float | None = field(default=None, init=False)  # type: ignore[assignment]

    def model(self, seed: int) -> nn.Module:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            w = self.width
            return nn.Sequential(
                nn.Linear(64, w), nn.ReLU(), nn.Linear(w, w), nn.ReLU(), nn.Linear(w, self.embedding)
            )

    def batches(self, rank: int, replicas: int, seed: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        g = torch.Generator().manual_seed(seed * 7919 + rank + 1_000_003)  # the views' own draws
        for x, _ in super().batches(rank, replicas, seed):
            yield _shifted_views(x, g, self.noise), _shifted_views(x, g, self.noise)

    def loss(self, model: nn.Module, batch: Any) -> torch.Tensor:
        a, b = batch
        return _info_nce(model(torch.cat([a, b])), self.temperature)

    @torch.no_grad()
    def evaluate(self, model: nn.Module) -> dict[str, float]:
        x = self.validation_set()[0]  # the images Digits holds out
        g = torch.Generator().manual_seed(0)
        a, b = _shifted_views(x, g, self.noise), _shifted_views(x, g, self.noise)
        n = self.batch_size
        losses = [
            float(_info_nce(model(torch.cat([a[i : i + n], b[i : i + n]])), self.temperature))
            for i in range(0, len(x) - n + 1, n)
        ]
        return {"val_loss": sum(losses) / len(losses)}


@dataclass
class FinetuneGroups(Finetune):
    """The fine-tune above with discriminative rates, as a user writes it: two parameter groups, the
    pretrained body at `body_ratio` of the new head's rate (OneCycleLR's `max_lr` a list, one rate a group).
    HDET's rate multiplier scales both groups alike."""

    body_ratio: float = 0.1
    name: str = field(default="finetune_groups", init=False)  # type: ignore[assignment]

    def param_groups(self, model: nn.Module) -> list[list[nn.Parameter]]:
        """(the body's parameters, the head's): the optimizer's two groups."""
        head = list(model[-1].parameters())
        body = [p for p in model.parameters() if all(p is not q for q in head)]
        return [body, head]

    @property
    def group_ratios(self) -> tuple[float, ...]:
        """Each group's share of the job's `max_lr`, in `param_groups`' order."""
        return (self.body_ratio, 1.0)


@dataclass
class FinetuneStaged(Finetune):
    """The fine-tune above in two stages, as a user writes a linear probe then a full fine-tune: the
    pretrained body frozen (`requires_grad` False, still in the optimizer) for the first `frozen_until` of
    the steps, so only the new head trains, then unfrozen. DDP is told `find_unused_parameters` (its user
    wraps the whole model, then freezes the body)."""

    frozen_until: float = 0.2
    name: str = field(default="finetune_staged", init=False)  # type: ignore[assignment]
    ddp_unused: bool = field(default=True, init=False)

    def at_step(self, model: nn.Module, step: int, steps: int) -> None:
        """Before each step's forward pass: the body trains from `frozen_until` x `steps` on."""
        trains = step >= self.frozen_until * steps
        for p in list(model.parameters())[:-2]:  # all but the head's weight and bias
            p.requires_grad_(trains)


@dataclass
class TabularWide(Tabular):
    """The tabular classifier at a large batch: 256 rows a rank (1,024 a step on 4 ranks), drawn from 32,768
    training rows, so the gradient's noise is an eighth of the tabular workload's and the best rate sits
    nearer the edge of stability."""

    train: int = 32768
    batch_size: int = 256
    name: str = field(default="tabular_wide", init=False)


@dataclass
class BagOfWords(_Synthetic):
    """Text classification from a bag of token embeddings: documents of 32 tokens from a 4,096-token
    vocabulary with Zipf frequencies (exponent 1.1), each of 6 classes over-using its own 64 topic tokens
    (drawn from the rarer half of the vocabulary) in a quarter of its positions; the model an `EmbeddingBag`
    (mean, width 64) and a linear layer. A batch touches a few hundred of the 4,096 rows, so most embedding
    rows get a zero gradient at most steps and the rare ones learn from few: a sparse-gradient workload.
    Metric validation cross-entropy. No chance level is named."""

    vocab: int = 4096
    length: int = 32
    classes: int = 6
    topic: int = 64
    share: float = 0.25
    dim: int = 64
    name: str = field(default="bag_of_words", init=False)
    metric: str = field(default="val_loss", init=False)
    criterion = staticmethod(nn.functional.cross_entropy)

    def _data(self) -> tuple[torch.Tensor, torch.Tensor]:
        g, n = self._draw()
        ranks = torch.arange(1, self.vocab + 1, dtype=torch.float64)
        zipf = ranks.pow(-1.1)
        rare = torch.randperm(self.vocab // 2, generator=g) + self.vocab // 2
        topics = rare[: self.classes * self.topic].view(self.classes, self.topic)
        y = torch.randint(0, self.classes, (n,), generator=g)
        background = torch.multinomial(zipf / zipf.sum(), n * self.length, True, generator=g)
        x = background.view(n, self.length)
        own = torch.rand(n, self.length, generator=g) < self.share
        picks = topics[
            y.unsqueeze(1).expand(n, self.length), torch.randint(0, self.topic, (n, self.length), generator=g)
        ]
        return torch.where(own, picks, x), y

    def model(self, seed: int) -> nn.Module:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return _BagModel(self.vocab, self.dim, self.classes)


class _BagModel(nn.Module):
    def __init__(self, vocab: int, dim: int, classes: int) -> None:
        super().__init__()
        self.embed = nn.EmbeddingBag(vocab, dim, mode="mean")
        self.out = nn.Linear(dim, classes)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.out(self.embed(tokens))


class _TopOneExperts(nn.Module):
    """A mixture of `experts` two-layer MLPs with top-1 routing: a linear router's softmax picks one expert
    per input, whose output is scaled by that probability (so the router learns), and a shared linear head.
    An expert no input of a batch was routed to has no gradient on that rank at that step."""

    def __init__(self, inputs: int, width: int, experts: int, outputs: int) -> None:
        super().__init__()
        self.inp = nn.Linear(inputs, width)
        self.router = nn.Linear(width, experts)
        self.experts = nn.ModuleList(
            nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width)) for _ in range(experts)
        )
        self.out = nn.Linear(width, outputs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.inp(x))
        gate = torch.softmax(self.router(h), dim=1)
        weight, pick = gate.max(dim=1)
        mixed = torch.zeros_like(h)
        for k, expert in enumerate(self.experts):
            rows = (pick == k).nonzero().flatten()
            if len(rows):
                mixed = mixed.index_add(0, rows, weight[rows, None] * expert(h[rows]))
        return self.out(h + mixed)


@dataclass
class DigitsExperts(Digits):
    """A top-1 mixture of 4 expert MLPs on the digits (width 64, a residual around the experts), AdamW: a
    routed model, in which an expert no image of a rank's batch went to gets no gradient there."""

    width: int = 64
    experts: int = 4
    name: str = field(default="digits_experts", init=False)
    ddp_unused: bool = field(default=True, init=False)
    """DDP needs `find_unused_parameters=True` for a routed model (an expert may get no input)."""

    def model(self, seed: int) -> nn.Module:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return _TopOneExperts(64, self.width, self.experts, 10)


def _hidden_layers(
    inputs: int, width: int, depth: int, outputs: int, activation: type[nn.Module]
) -> nn.Sequential:
    """An MLP with `depth` hidden layers of `width`, each followed by `activation`."""
    layers: list[nn.Module] = []
    for size in (inputs, *[width] * (depth - 1)):
        layers += [nn.Linear(size, width), activation()]
    return nn.Sequential(*layers, nn.Linear(width, outputs))


def _time_features(t: torch.Tensor, bands: int) -> torch.Tensor:
    """A noise level t in [0, 1] (n, 1) as `bands` sines and cosines of doubling frequency (n, 2 bands)."""
    angles = math.pi * t * 2.0 ** torch.arange(bands, dtype=t.dtype)
    return torch.cat([angles.sin(), angles.cos()], dim=1)


@dataclass
class Denoising(_Synthetic):
    """A diffusion model's training objective on 8-D data: points from a fixed mixture of 16 Gaussians
    (means of sd 1.5, each component of sd 0.3, standardised); each training row gets its own noise level t,
    uniform in [0, 1], and noise eps, drawn per rank and step, and the model (an MLP with three hidden SiLU
    layers of 256, fed the noised point cos(pi t / 2) x + sin(pi t / 2) eps and 8 features of t) predicts eps
    under MSE. Near t = 0 the noise is all but unpredictable, so the loss stays high and every batch's loss
    is dominated by its draw of t: a window's loss is noisy at any rate. Metric the same loss on the held-out
    points, each with 4 noise draws fixed once. No chance level is named."""

    dim: int = 8
    components: int = 16
    width: int = 256
    bands: int = 4
    batch_size: int = 64
    draws: int = 4
    name: str = field(default="denoising", init=False)
    metric: str = field(default="val_loss", init=False)

    def _data(self) -> tuple[torch.Tensor, torch.Tensor]:
        g, n = self._draw()
        means = 1.5 * torch.randn(self.components, self.dim, generator=g)
        pick = torch.randint(0, self.components, (n,), generator=g)
        x = means[pick] + 0.3 * torch.randn(n, self.dim, generator=g)
        x = (x - x.mean(0)) / x.std(0)
        return x, x  # the target is drawn per batch (`_noised`)

    def _noised(self, x: torch.Tensor, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """(the model's input: the noised points and t's features, the noise it should predict)."""
        t = torch.rand(len(x), 1, generator=g)
        eps = torch.randn(x.shape, generator=g)
        noised = torch.cos(0.5 * math.pi * t) * x + torch.sin(0.5 * math.pi * t) * eps
        return torch.cat([noised, _time_features(t, self.bands)], dim=1), eps

    def batches(self, rank: int, replicas: int, seed: int):
        g = torch.Generator().manual_seed(seed * 7919 + rank + 104_729)
        for x, _ in super().batches(rank, replicas, seed):
            yield self._noised(x, g)

    def _validation(self) -> tuple[torch.Tensor, torch.Tensor]:
        x = self._data()[0][: self.validation].repeat(self.draws, 1)
        return self._noised(x, torch.Generator().manual_seed(1))

    def model(self, seed: int) -> nn.Module:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return _hidden_layers(self.dim + 2 * self.bands, self.width, 3, self.dim, nn.SiLU)


@dataclass
class Median(_Synthetic):
    """Robust regression under heavy-tailed noise: 16 Gaussian inputs, the target a fixed random tanh
    network's output (unit sd) plus 0.5 x Student-t noise with 2 degrees of freedom (infinite variance: a
    squared error would chase the outliers), trained on the absolute error (L1: the conditional median),
    whose gradient has the same size for every row however far off it is; an MLP with two hidden ReLU
    layers of 128. Metric the held-out mean absolute error against the noise-free target. No chance level
    is named."""

    width: int = 128
    inputs: int = 16
    noise: float = 0.5
    name: str = field(default="median", init=False)
    metric: str = field(default="val_loss", init=False)
    criterion = staticmethod(nn.functional.l1_loss)

    def _drawn(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(inputs, the noise-free target, the noisy target trained on)."""
        g, n = self._draw()
        x = torch.randn(n, self.inputs, generator=g)
        truth = _teacher(x, 64, g)
        truth = (truth - truth.mean()) / truth.std()
        z, a, b = (torch.randn(truth.shape, generator=g) for _ in range(3))
        student_t = z / ((a**2 + b**2) / 2.0).sqrt()  # 2 degrees of freedom
        return x, truth, truth + self.noise * student_t

    def _data(self) -> tuple[torch.Tensor, torch.Tensor]:
        x, _, noisy = self._drawn()
        return x, noisy

    def _validation(self) -> tuple[torch.Tensor, torch.Tensor]:
        x, truth, _ = self._drawn()
        return x[: self.validation], truth[: self.validation]

    def model(self, seed: int) -> nn.Module:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return _two_hidden(self.inputs, self.width, 1)


@dataclass
class Surface(_Synthetic):
    """Fitting a smooth surface, full-batch and noise-free: 4,096 points uniform in the square [-1, 1]^2 to
    train on and 1,024 held out, the target sin(3 pi u) cos(2 pi v) + 0.5 tanh(4 u v); a tanh MLP with
    three hidden layers of 128; MSE. Every step reads the rank's whole share of the points and nothing is
    random after the initial weights, so a replica's loss differs from another's only by its rate and its
    share. Adamax (Adam under the infinity norm). Metric the held-out MSE. No chance level is named."""

    train: int = 4096
    width: int = 128
    name: str = field(default="surface", init=False)
    metric: str = field(default="val_loss", init=False)

    def _data(self) -> tuple[torch.Tensor, torch.Tensor]:
        g, n = self._draw()
        x = 2.0 * torch.rand(n, 2, generator=g) - 1.0
        u, v = x[:, :1], x[:, 1:]
        return x, torch.sin(3 * math.pi * u) * torch.cos(2 * math.pi * v) + 0.5 * torch.tanh(4 * u * v)

    def batches(self, rank: int, replicas: int, seed: int):
        return _whole_share(*self._data(), self.validation, rank, replicas)

    def model(self, seed: int) -> nn.Module:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return _hidden_layers(2, self.width, 3, 1, nn.Tanh)


class _VAE(nn.Module):
    """Encoder 64 -> hidden -> (mean, log variance) of a `code`-D Gaussian; decoder code -> hidden -> 64 pixel
    logits. `forward(x, eps)` takes the reparameterisation's noise from the caller (its rank's generator)."""

    def __init__(self, pixels: int, hidden: int, code: int) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(pixels, hidden), nn.SiLU(), nn.Linear(hidden, 2 * code))
        self.decoder = nn.Sequential(nn.Linear(code, hidden), nn.SiLU(), nn.Linear(hidden, pixels))

    def forward(self, x: torch.Tensor, eps: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        mean, log_var = self.encoder(x).chunk(2, dim=1)
        return self.decoder(mean + torch.exp(0.5 * log_var) * eps), mean, log_var


def _negative_elbo(out: tuple[torch.Tensor, torch.Tensor, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """Per image: the pixels' Bernoulli cross-entropy (summed) plus the code's KL divergence from N(0, I)."""
    logits, mean, log_var = out
    recon = nn.functional.binary_cross_entropy_with_logits(logits, x, reduction="none").sum(1)
    kl = -0.5 * (1.0 + log_var - mean.pow(2) - log_var.exp()).sum(1)
    return (recon + kl).mean()


@dataclass
class DigitsVAE(Digits):
    """A variational autoencoder on the 8x8 digits (pixels in [0, 1] as Bernoulli means; an 8-D Gaussian code,
    hidden layers of 128, SiLU): the negative ELBO, whose reparameterised sample makes every step's loss and
    gradient noisy beyond the batch's draw, and whose log variance is an exponent that a step too long blows
    up. The noise is drawn per rank and step from the rank's own generator. Metric: the held-out negative
    ELBO (each image with 4 noise draws fixed once) less the pixels' own entropy, a constant the model cannot
    reduce, so that ratios compare what it can. No chance level is named."""

    hidden: int = 128
    code: int = 8
    draws: int = 4
    name: str = field(default="digits_vae", init=False)
    chance_loss: float | None = field(default=None, init=False)  # type: ignore[assignment]

    def model(self, seed: int) -> nn.Module:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return _VAE(64, self.hidden, self.code)

    def batches(self, rank: int, replicas: int, seed: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        g = torch.Generator().manual_seed(seed * 7919 + rank + 15_485_863)
        for x, _ in super().batches(rank, replicas, seed):
            yield x, torch.randn(len(x), self.code, generator=g)

    def loss(self, model: nn.Module, batch: Any) -> torch.Tensor:
        x, eps = batch
        return _negative_elbo(model(x, eps), x)

    @torch.no_grad()
    def evaluate(self, model: nn.Module) -> dict[str, float]:
        x = self.validation_set()[0].repeat(self.draws, 1)
        eps = torch.randn(len(x), self.code, generator=torch.Generator().manual_seed(1))
        entropy = nn.functional.binary_cross_entropy(x, x, reduction="none").sum(1).mean()
        return {"val_loss": float(_negative_elbo(model(x, eps), x) - entropy)}


@dataclass
class DecayGroups(Regression):
    """The regression above under the AdamW recipe of most transformer training scripts: two parameter
    groups, the weight matrices at weight decay 0.1 and the biases and LayerNorm parameters at none, one
    `max_lr` for both (OneCycleLR, like HDET, gives every group the same schedule)."""

    decay: float = 0.1
    name: str = field(default="decay_groups", init=False)

    def param_groups(self, model: nn.Module) -> list[list[nn.Parameter]]:
        """(the weight matrices, the biases and norms' parameters)."""
        params = list(model.parameters())
        return [[p for p in params if p.dim() > 1], [p for p in params if p.dim() <= 1]]

    @property
    def group_options(self) -> tuple[dict[str, float], ...]:
        return ({"weight_decay": self.decay}, {"weight_decay": 0.0})


@dataclass
class SmallTargets(Regression):
    """The regression above with its targets in a unit a thousand times too large (metres recorded as
    kilometres), as a user who did not standardise them trains it: the network's first outputs are of its
    initialisation's scale (a first loss near 0.1), it learns to output almost nothing within a few steps
    (the loss of the targets' variance, 1e-6), and the fit proper runs from there toward 1e-8. Adam's steps
    do not depend on the gradient's scale; a threshold in absolute units or relative to the first loss shows
    here."""

    scale: float = 1e-3
    name: str = field(default="small_targets", init=False)

    def _data(self) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = super()._data()
        return x, self.scale * y


@dataclass
class DigitsFullBatch(Digits):
    """The digits MLP under SGD + momentum on full batches: each rank steps on the whole of its share of the
    training images (374 of 1,497 on 4 ranks) every step, so the gradient carries no sampling noise and the
    rate meets a sharp edge of stability (losses that spike and recover, the catapults of full-batch
    training) rather than a noise floor."""

    batch_size: int = 374
    name: str = field(default="digits_full_batch", init=False)


@dataclass
class DigitsCurriculum(Digits):
    """The digits MLP (SGD + momentum) on a curriculum that ends hard: Gaussian noise is added to the
    training images, its standard deviation growing linearly from 0 to `noise` (in units of the pixels'
    range) over the first `ramp` batches and held there; validated on the held-out images under noise of
    that final level (one fixed draw). The training loss falls while the images are clean, then rises as
    they get harder, whatever the rate: a run whose loss climbs by design, as under progressive resizing or
    a sequence-length warm-up."""

    noise: float = 0.5
    ramp: int = 400
    name: str = field(default="digits_curriculum", init=False)

    def batches(self, rank: int, replicas: int, seed: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        g = torch.Generator().manual_seed(seed * 104729 + rank)
        for i, (x, y) in enumerate(super().batches(rank, replicas, seed)):
            level = self.noise * min(1.0, i / self.ramp)
            yield x + level * torch.randn(x.shape, generator=g), y

    def validation_set(self) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = super().validation_set()
        return x + self.noise * torch.randn(x.shape, generator=torch.Generator().manual_seed(20261206)), y


@dataclass
class DigitsAccumulated(Digits):
    """The digits MLP (SGD + momentum, the quality benchmark's `mlp`) trained the way a user short of memory
    trains it: micro-batches of 8 images, the gradients of 4 accumulated before each optimizer step (the
    effective batch of 32 the `mlp` workload takes at once), under DDP held in `no_sync()` for the first
    three. The scheduler sees one step per optimizer step, and the loss passed to it is the micro-batches'
    mean; `shared_grad` averages after every backward pass, four times a step."""

    batch_size: int = 8
    accumulate: int = 4
    name: str = field(default="digits_accumulated", init=False)


@dataclass
class DigitsNoisyLabels(Digits):
    """The digits MLP trained on labels of which a fixed 30% were replaced by another class drawn uniformly
    (the same images flipped on every seed and rank), validated on the clean held-out labels: fitting the
    training loss further means memorising the flipped labels, so the loss the controller reads and the
    validation metric part ways late in a run."""

    noise: float = 0.3
    name: str = field(default="digits_noisy_labels", init=False)

    def training_set(self) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = super().training_set()
        g = torch.Generator().manual_seed(20261206)
        flipped = torch.rand(len(y), generator=g) < self.noise
        other = (y + torch.randint(1, 10, y.shape, generator=g)) % 10
        return x, torch.where(flipped, other, y)


@dataclass
class IllConditioned(_Synthetic):
    """Linear least squares on 32 Gaussian features whose standard deviations run from 1 down to 0.01
    (log-spaced: the Hessian's eigenvalues span 10,000x), every feature carrying an equal share of the
    target's variance (its weight 1 / its scale), plus noise at 1% of the target's variance; the model one
    `nn.Linear`. Convex: the largest feature sets the stability edge, the smallest the progress, so the
    best rate sits at the edge and a rate past it diverges at once. Metric: validation MSE (target
    variance 1)."""

    inputs: int = 32
    noise: float = 0.1
    name: str = field(default="ill_conditioned", init=False)

    def _data(self) -> tuple[torch.Tensor, torch.Tensor]:
        g, rows = self._draw()
        scales = torch.logspace(0.0, -2.0, self.inputs)
        x = torch.randn(rows, self.inputs, generator=g) * scales
        w = torch.randn(self.inputs, 1, generator=g) / scales.unsqueeze(1) / math.sqrt(self.inputs)
        y = x @ w
        y = y + self.noise * y.std() * torch.randn(y.shape, generator=g)
        return x, y / y.std()

    def model(self, seed: int) -> nn.Module:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return nn.Linear(self.inputs, 1)


class _Binarize(nn.Module):
    """sign(x) forward; backward the straight-through estimator of the hard tanh (gradient 1 inside
    [-1, 1], 0 outside), as binarized networks train."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        clipped = nn.functional.hardtanh(x)
        return clipped + (torch.sign(clipped) - clipped).detach()


@dataclass
class DigitsBinarized(Digits):
    """An MLP on the digits whose hidden activations are binarized to +-1 (two hidden layers of 256, each
    Linear -> BatchNorm -> sign), trained through the straight-through estimator: the gradient every
    replica applies is not the loss's (whose gradient through sign is zero almost everywhere), so the
    hypergradient's reading of it is an estimator's. Real-valued weights; the MLP's data, split and metric."""

    width: int = 256
    name: str = field(default="digits_binarized", init=False)

    def model(self, seed: int) -> nn.Module:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            w = self.width
            return nn.Sequential(
                nn.Linear(64, w),
                nn.BatchNorm1d(w),
                _Binarize(),
                nn.Linear(w, w),
                nn.BatchNorm1d(w),
                _Binarize(),
                nn.Linear(w, 10),
            )


@dataclass
class DeepLinear(_Synthetic):
    """A deep linear network (four 32-wide `nn.Linear` layers, no bias, no nonlinearity, initialised small)
    fitting a linear map of 16 Gaussian inputs to 16 outputs whose singular values halve one to the next
    (4, 2, 1, 0.5, ...), plus noise at 1% of the target's variance. Non-convex: from a small start the
    gradient is a product of small matrices, so the loss sits on a plateau before each singular value is
    learned, largest first (saddle to saddle), and a rate too low stays on the first plateau for long.
    Metric: validation MSE."""

    inputs: int = 16
    width: int = 32
    layers: int = 4
    init: float = 0.3
    noise: float = 0.1
    name: str = field(default="deep_linear", init=False)

    def _data(self) -> tuple[torch.Tensor, torch.Tensor]:
        g, rows = self._draw()
        u, _ = torch.linalg.qr(torch.randn(self.inputs, self.inputs, generator=g))
        v, _ = torch.linalg.qr(torch.randn(self.inputs, self.inputs, generator=g))
        singular = 4.0 * 0.5 ** torch.arange(self.inputs, dtype=torch.float32)
        x = torch.randn(rows, self.inputs, generator=g)
        y = x @ (u * singular) @ v.T
        return x, y + self.noise * y.std() * torch.randn(y.shape, generator=g)

    def model(self, seed: int) -> nn.Module:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            sizes = [self.inputs] + [self.width] * (self.layers - 1) + [self.inputs]
            layers = [nn.Linear(a, b, bias=False) for a, b in itertools.pairwise(sizes)]
            for layer in layers:
                nn.init.normal_(layer.weight, std=self.init / math.sqrt(layer.in_features))
            return nn.Sequential(*layers)


@dataclass
class DigitsSpectral(Digits):
    """The digits MLP with spectral normalisation on its hidden `nn.Linear` layers (the output layer left
    free to scale the logits; `torch.nn.utils.parametrizations.spectral_norm`): each such weight is divided
    by its largest singular value,
    estimated by a power iteration whose vectors are buffers updated in every training forward pass, so
    each replica's buffers move with its own weights and are averaged with them. Lipschitz-bounded layers
    learn slowly at a small rate and tolerate a large one."""

    name: str = field(default="digits_spectral", init=False)

    def model(self, seed: int) -> nn.Module:
        from torch.nn.utils.parametrizations import spectral_norm

        model = super().model(seed)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            for i, layer in enumerate(model[:-1]):
                if isinstance(layer, nn.Linear):
                    model[i] = spectral_norm(layer)
        return model


@dataclass
class Poisson(Task):
    """A physics-informed network: u'' = f on [0, 1] with u(0) = u(1) = 0, whose solution is
    u(x) = sin(3 pi x) exp(-x) (f its second derivative). The loss is the mean squared residual of u'' - f at
    64 collocation points a rank draws uniformly at each step, plus the squared boundary values; u'' comes
    from two `torch.autograd.grad` calls with `create_graph=True` inside the loss, so the backward pass runs
    through a derivative of the network (a tanh MLP, three hidden layers of 64). Metric: the MSE of u against
    the solution on 1,024 evenly spaced points. Adam. No chance level is named."""

    width: int = 64
    points: int = 64
    name: str = field(default="poisson", init=False)
    metric: str = field(default="val_loss", init=False)

    @staticmethod
    def solution(x: torch.Tensor) -> torch.Tensor:
        return torch.sin(3 * math.pi * x) * torch.exp(-x)

    @staticmethod
    def source(x: torch.Tensor) -> torch.Tensor:
        """f = u'' for the solution above."""
        k = 3 * math.pi
        return torch.exp(-x) * ((1 - k * k) * torch.sin(k * x) - 2 * k * torch.cos(k * x))

    def model(self, seed: int) -> nn.Module:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return _hidden_layers(1, self.width, 3, 1, nn.Tanh)

    def batches(self, rank: int, replicas: int, seed: int) -> Iterator[torch.Tensor]:
        g = torch.Generator().manual_seed(seed * 7919 + rank)
        while True:
            yield torch.rand(self.points, 1, generator=g)

    def loss(self, model: nn.Module, batch: Any) -> torch.Tensor:
        x = batch.clone().requires_grad_(True)
        u = model(x)
        (du,) = torch.autograd.grad(u.sum(), x, create_graph=True)
        (d2u,) = torch.autograd.grad(du.sum(), x, create_graph=True)
        boundary = model(torch.tensor([[0.0], [1.0]], dtype=batch.dtype))
        return (d2u - self.source(x)).pow(2).mean() + boundary.pow(2).mean()

    @torch.no_grad()
    def evaluate(self, model: nn.Module) -> dict[str, float]:
        x = torch.linspace(0.0, 1.0, 1024, dtype=next(model.parameters()).dtype).unsqueeze(1)
        return {"val_loss": float(nn.functional.mse_loss(model(x), self.solution(x)))}


@dataclass
class Poisson64(Poisson):
    """The physics-informed network above in float64, as such networks are often trained: weights,
    collocation points, gradients and Adam's state in double precision (HDET's buckets, hypergradient copy
    and snapshots then hold float64)."""

    name: str = field(default="poisson64", init=False)

    def model(self, seed: int) -> nn.Module:
        return super().model(seed).double()

    def batches(self, rank: int, replicas: int, seed: int) -> Iterator[torch.Tensor]:
        return (x.double() for x in super().batches(rank, replicas, seed))


@dataclass
class DigitsBF16(Digits):
    """The digits MLP (SGD + momentum, the quality benchmark's `mlp`) trained under bfloat16 autocast, as
    most GPU scripts now train (`torch.autocast`, here the CPU's): the forward pass's matrix products run in
    bfloat16 (8 bits of mantissa), the weights, gradients' accumulation and optimizer state stay float32,
    and the loss is computed under the autocast too. Validated in float32."""

    name: str = field(default="digits_bf16", init=False)

    def loss(self, model: nn.Module, batch: Any) -> torch.Tensor:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return super().loss(model, batch)


@dataclass
class DigitsHinge(Digits):
    """The digits MLP (SGD + momentum) trained on the multi-class hinge loss (`multi_margin_loss`: a
    support vector machine's, margin 1) instead of a cross-entropy: a batch whose every margin is met has a
    loss of exactly zero, and the training set is separable, so window losses head for zero and can reach
    it. Metric: the held-out hinge loss."""

    name: str = field(default="digits_hinge", init=False)
    criterion = staticmethod(nn.functional.multi_margin_loss)


@dataclass
class DigitsBandit(Digits):
    """The digits as a contextual bandit trained by REINFORCE, as a policy gradient is written: the MLP is a
    policy over the 10 classes, each image's action is sampled from it (the global generator, seeded per
    rank), the reward is 1 for the right class, and the loss is the surrogate -(reward - the batch's mean
    reward) x log-probability of the action. That loss is not the objective: its value hovers around zero,
    either sign, whatever the policy's quality (the baseline centres it), so the window losses carry no level
    to judge progress or a blow-up by; only its gradient means anything. Metric: the held-out
    cross-entropy of the policy against the right class (minus the log-probability it gives the action that
    earns the reward)."""

    report_miss: bool = False
    """Report to HDET 1 - the batch's mean reward (the sampled actions' error rate: a level that means
    quality) instead of the surrogate; the surrogate is back-propagated either way."""
    name: str = field(default="digits_bandit", init=False)

    def loss(self, model: nn.Module, batch: Any) -> torch.Tensor:
        x, y = batch
        logp = nn.functional.log_softmax(model(x), 1)
        action = torch.multinomial(logp.detach().exp(), 1).squeeze(1)
        reward = (action == y).float()
        self._miss = 1.0 - reward.mean()
        return -((reward - reward.mean()) * logp.gather(1, action[:, None]).squeeze(1)).mean()

    def reported(self, loss: torch.Tensor) -> torch.Tensor:
        """What the user gives `step(loss=...)`: the surrogate, or with `report_miss` the step's miss rate."""
        return self._miss if self.report_miss else loss


@dataclass
class ByteLMDropout(ByteLM):
    """The byte-level transformer LM (the quality benchmark's `lm`, AdamW) with dropout 0.1 in every
    attention and feed-forward block, as GPT-2-style training scripts set it: each step's loss carries the
    masks' noise, and validation runs with dropout off."""

    dropout: float = 0.1
    name: str = field(default="bytelm_dropout", init=False)

    def model(self, seed: int) -> nn.Module:
        net = super().model(seed)
        for m in net.modules():
            if isinstance(m, nn.Dropout):
                m.p = self.dropout
        return net


class _SequenceTransformer(nn.Module):
    """Token embedding plus a learned position embedding, pre-norm encoder layers (no mask: every position
    sees the whole sequence), a final LayerNorm and a linear head per position."""

    def __init__(self, vocab: int, length: int, dim: int, heads: int, layers: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.position = nn.Parameter(0.02 * torch.randn(length, dim))
        layer = nn.TransformerEncoderLayer(
            dim, heads, dim_feedforward=2 * dim, dropout=0.0, batch_first=True, norm_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.norm(self.encoder(self.embed(x) + self.position)))


@dataclass
class Reverse(_Synthetic):
    """An algorithmic task: reverse a sequence of 12 tokens drawn uniformly from 10 symbols, a transformer
    encoder (2 pre-norm layers of width 32, 2 heads) predicting every output position at once; per-token
    cross-entropy, metric held-out cross-entropy. Its loss sits on a plateau (about 1.9, below ln 10 = 2.30
    as the middle positions are learned) until attention finds the mirrored position, then drops to near
    zero within a few dozen steps: a phase transition whose timing the rate sets, and a rate too low may not
    reach it in the run. No chance level is named."""

    vocab: int = 10
    length: int = 12
    dim: int = 32
    heads: int = 2
    layers: int = 2
    name: str = field(default="reverse", init=False)
    metric: str = field(default="val_loss", init=False)

    @staticmethod
    def criterion(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return nn.functional.cross_entropy(out.flatten(0, 1), y.flatten())

    def _data(self) -> tuple[torch.Tensor, torch.Tensor]:
        g, n = self._draw()
        x = torch.randint(0, self.vocab, (n, self.length), generator=g)
        return x, x.flip(1)

    def model(self, seed: int) -> nn.Module:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return _SequenceTransformer(self.vocab, self.length, self.dim, self.heads, self.layers)


class _Sine(nn.Module):
    """sin(w0 x): a SIREN's activation."""

    def __init__(self, w0: float) -> None:
        super().__init__()
        self.w0 = w0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sin(self.w0 * x)


@dataclass
class Siren(Surface):
    """The surface of `Surface` (full-batch, noise-free, MSE) fitted by a SIREN: three hidden layers of 128
    with sine activations sin(w0 x), w0 = 30 as the SIREN paper sets it, and that paper's initialisation
    (the first layer's weights uniform in +-1/2, the later ones in +-sqrt(6 / 128) / w0); Adam, the
    paper's optimizer. A network of periodic units, whose loss surface is rough at scales a plain MLP's is
    not. Metric the held-out MSE. No chance level is named."""

    w0: float = 30.0
    name: str = field(default="siren", init=False)

    def model(self, seed: int) -> nn.Module:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            net = _hidden_layers(2, self.width, 3, 1, partial(_Sine, self.w0))
            linears = [m for m in net if isinstance(m, nn.Linear)]
            with torch.no_grad():
                for i, layer in enumerate(linears):
                    bound = (
                        1.0 / layer.in_features if i == 0 else math.sqrt(6.0 / layer.in_features) / self.w0
                    )
                    layer.weight.uniform_(-bound, bound)
            return net


@dataclass
class DigitsAugmented(DigitsCNN):
    """The BatchNorm CNN on the digits trained as image classifiers are: each training image shifted by
    -1, 0 or +1 pixel in each direction (drawn per image from the rank's generator, the border filled with
    zeros), under SGD with Nesterov momentum and weight decay 5e-4; validated on the held-out images as
    they are. The training loss is read on shifted images, so it stays above what the network does on the
    unshifted ones."""

    name: str = field(default="digits_augmented", init=False)

    def batches(self, rank: int, replicas: int, seed: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        g = torch.Generator().manual_seed(seed * 15485863 + rank)
        for x, y in super().batches(rank, replicas, seed):
            padded = nn.functional.pad(x.view(-1, 8, 8), (1, 1, 1, 1))
            dx, dy = (torch.randint(0, 3, (len(x),), generator=g) for _ in range(2))
            rows = (dy[:, None] + torch.arange(8))[:, :, None]
            cols = (dx[:, None] + torch.arange(8))[:, None, :]
            shifted = padded[torch.arange(len(x))[:, None, None], rows, cols]
            yield shifted.reshape(len(x), 64), y


@dataclass
class ManyClasses(_Synthetic):
    """Classification into 256 classes: each class a fixed random prototype in 64 dimensions (unit
    Gaussian), each row its class's prototype plus Gaussian noise of sd 3, 64 training rows a class; an MLP
    with two hidden ReLU layers of 256 and a 256-way softmax, AdamW. The loss starts near ln 256 = 5.5 and
    the output layer is the network's largest. Metric validation cross-entropy. No chance level is named."""

    classes: int = 256
    features: int = 64
    noise: float = 3.0
    width: int = 256
    train: int = 16384
    validation: int = 2048
    name: str = field(default="many_classes", init=False)
    metric: str = field(default="val_loss", init=False)
    criterion = staticmethod(nn.functional.cross_entropy)

    def _data(self) -> tuple[torch.Tensor, torch.Tensor]:
        g, n = self._draw()
        prototypes = torch.randn(self.classes, self.features, generator=g)
        y = torch.randint(0, self.classes, (n,), generator=g)
        return prototypes[y] + self.noise * torch.randn(n, self.features, generator=g), y

    def model(self, seed: int) -> nn.Module:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return _two_hidden(self.features, self.width, self.classes)


def _mackey_glass(n: int, g: torch.Generator, tau: int = 17) -> torch.Tensor:
    """`n` values of the Mackey-Glass series (beta 0.2, gamma 0.1, exponent 10, delay `tau`, unit steps)
    after a burn-in of 500, from a constant history of 1.2 plus a small draw from `g`: chaotic at tau 17."""
    history = (1.2 + 0.01 * torch.randn(tau + 1, generator=g, dtype=torch.float64)).tolist()
    for _ in range(500 + n):
        lagged = history[-tau - 1]
        history.append(history[-1] + 0.2 * lagged / (1.0 + lagged**10) - 0.1 * history[-1])
    return torch.tensor(history[-n:], dtype=torch.float32)


class _Forecaster(nn.Module):
    """A GRU over a window of past values, its last state mapped to the next `horizon` values."""

    def __init__(self, hidden: int, horizon: int) -> None:
        super().__init__()
        self.rnn = nn.GRU(1, hidden, batch_first=True)
        self.head = nn.Linear(hidden, horizon)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.rnn(x[:, :, None])[0][:, -1])


@dataclass
class Forecast(_Synthetic):
    """Time-series forecasting: from 32 past values of the chaotic Mackey-Glass series (standardised),
    predict the next 8; a GRU of 64 units, MSE, Adam. The held-out windows are the series' last stretch (a
    later time than every training window, as a forecast is judged), so they are the first rows only by
    the split's convention. Metric the held-out MSE. No chance level is named."""

    context: int = 32
    horizon: int = 8
    hidden: int = 64
    name: str = field(default="forecast", init=False)
    metric: str = field(default="val_loss", init=False)

    def _data(self) -> tuple[torch.Tensor, torch.Tensor]:
        g, n = self._draw()
        span = self.context + self.horizon
        series = _mackey_glass(n + span, g)
        series = (series - series.mean()) / series.std()
        windows = series.unfold(0, span, 1)[:n].flip(0)  # the latest windows first: held out
        return windows[:, : self.context], windows[:, self.context :]

    def model(self, seed: int) -> nn.Module:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return _Forecaster(self.hidden, self.horizon)


class _Coupling(nn.Module):
    """An affine coupling on 2-D points: one coordinate (`keep`) passes, the other is scaled and shifted by
    an MLP of it, the log-scale bounded by tanh. Returns the new points and each row's log |det|."""

    def __init__(self, keep: int, width: int) -> None:
        super().__init__()
        self.keep = keep
        self.net = _hidden_layers(1, width, 2, 2, nn.ReLU)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        kept, moved = x[:, self.keep : self.keep + 1], x[:, 1 - self.keep : 2 - self.keep]
        log_scale, shift = self.net(kept).chunk(2, dim=1)
        log_scale = torch.tanh(log_scale)
        moved = moved * log_scale.exp() + shift
        out = torch.cat([kept, moved], 1) if self.keep == 0 else torch.cat([moved, kept], 1)
        return out, log_scale.squeeze(1)


class _Flow(nn.Module):
    """A RealNVP-style flow of affine couplings alternating which coordinate passes; `forward` gives each
    row's log-density under a standard normal base."""

    def __init__(self, couplings: int, width: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList(_Coupling(i % 2, width) for i in range(couplings))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        log_det = torch.zeros(len(x))
        for layer in self.layers:
            x, step = layer(x)
            log_det = log_det + step
        return -0.5 * (x**2).sum(1) - math.log(2 * math.pi) + log_det


@dataclass
class Flow(_Synthetic):
    """Density estimation with a normalizing flow: two interleaved half-moons in the plane (Gaussian noise of
    sd 0.1, standardised), modelled by 6 affine couplings with MLPs of width 64 (tanh-bounded log-scales);
    the loss the negative log-likelihood in nats a point, which goes below zero as the density sharpens;
    Adam. Metric the held-out negative log-likelihood. No chance level is named."""

    couplings: int = 6
    width: int = 64
    name: str = field(default="flow", init=False)
    metric: str = field(default="val_loss", init=False)

    @staticmethod
    def criterion(log_density: torch.Tensor, _: torch.Tensor) -> torch.Tensor:
        return -log_density.mean()

    def _data(self) -> tuple[torch.Tensor, torch.Tensor]:
        g, n = self._draw()
        upper = torch.rand(n, generator=g) < 0.5
        angle = math.pi * torch.rand(n, generator=g)
        x = torch.stack([angle.cos(), angle.sin()], 1)
        x = torch.where(upper[:, None], x, torch.stack([1.0 - angle.cos(), 0.5 - angle.sin()], 1))
        x = x + 0.1 * torch.randn(n, 2, generator=g)
        x = (x - x.mean(0)) / x.std(0)
        return x, x

    def model(self, seed: int) -> nn.Module:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return _Flow(self.couplings, self.width)


class _FieldEmbeddings(nn.Module):
    """One embedding table per categorical field, concatenated, then an MLP to one logit."""

    def __init__(self, cardinalities: tuple[int, ...], dim: int, width: int) -> None:
        super().__init__()
        self.tables = nn.ModuleList(nn.Embedding(c, dim) for c in cardinalities)
        self.mlp = _hidden_layers(dim * len(cardinalities), width, 1, 1, nn.ReLU)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mlp(torch.cat([t(x[:, i]) for i, t in enumerate(self.tables)], 1)).squeeze(1)


@dataclass
class ClickThrough(_Synthetic):
    """Click-through prediction: 8 categorical fields (1,000 to 10 values each, Zipf-distributed, so most
    rows share a few values and the rest are rare), a click drawn from a fixed logistic model of per-value
    effects plus one two-field interaction, about 5% positive; an embedding of 8 per value and field, an MLP
    of 128, binary cross-entropy on the logit; AdamW (its weight decay reaches the embeddings). Metric the
    held-out log loss, whose floor is the clicks' own entropy. No chance level is named."""

    cardinalities: tuple[int, ...] = (1000, 500, 200, 100, 50, 20, 10, 1000)
    dim: int = 8
    width: int = 128
    train: int = 32768
    validation: int = 4096
    batch_size: int = 64
    rate: float = 0.05
    name: str = field(default="click_through", init=False)
    metric: str = field(default="val_loss", init=False)
    criterion = staticmethod(nn.functional.binary_cross_entropy_with_logits)

    def _data(self) -> tuple[torch.Tensor, torch.Tensor]:
        g, n = self._draw()
        fields, score = [], torch.zeros(n)
        for c in self.cardinalities:
            zipf = 1.0 / torch.arange(1, c + 1, dtype=torch.float32) ** 1.1
            idx = torch.multinomial(zipf / zipf.sum(), n, replacement=True, generator=g)
            score = score + 0.7 * torch.randn(c, generator=g)[idx]
            fields.append(idx)
        a, b = (torch.randn(c, 4, generator=g) for c in self.cardinalities[:2])
        score = score + 0.5 * (a[fields[0]] * b[fields[1]]).sum(1)
        bias = torch.zeros(())
        for _ in range(50):  # Newton's method on the mean click rate
            p = torch.sigmoid(score + bias)
            bias = bias - (p.mean() - self.rate) / (p * (1 - p)).mean()
        clicks = torch.bernoulli(torch.sigmoid(score + bias), generator=g)
        return torch.stack(fields, 1), clicks

    def model(self, seed: int) -> nn.Module:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return _FieldEmbeddings(self.cardinalities, self.dim, self.width)


def _inner(model: nn.Module) -> nn.Module:
    """The network itself: a DDP wrapper's module (fixed OneCycle's runs), else the model. A forward pass
    whose graph is not back-propagated into the parameters (an attack's, a per-example gradient's) goes
    through it, since DDP expects every forward in training to be followed by one backward."""
    return getattr(model, "module", model)


@dataclass
class DigitsPrivate(Digits):
    """The digits MLP trained by DP-SGD (Abadi et al. 2016), as a differentially private run is written:
    each example's gradient is clipped to norm `clip` (a per-example gradient by `torch.func`; the loss is
    the examples' losses weighted by min(1, clip / their gradient's norm), whose gradient is the clipped
    mean), and Gaussian noise of standard deviation `noise_multiplier` x `clip` / batch is added to every
    coordinate of the batch's gradient (the global generator, seeded per rank; each rank adds its own, so the
    mean over 4 ranks carries half of it). The noise's norm is several times the clipped gradient's: a
    gradient dominated by noise of fixed size, whatever the loss. SGD + momentum; reported to HDET is the
    examples' plain mean loss, as a DP run logs it. Metric: the held-out cross-entropy."""

    clip: float = 1.0
    noise_multiplier: float = 1.0
    name: str = field(default="digits_private", init=False)

    def loss(self, model: nn.Module, batch: Any) -> torch.Tensor:
        x, y = batch
        net = _inner(model)
        params = {k: p.detach() for k, p in net.named_parameters()}

        def one(p: dict[str, torch.Tensor], xi: torch.Tensor, yi: torch.Tensor) -> torch.Tensor:
            return self.criterion(torch.func.functional_call(net, p, (xi[None],)), yi[None])

        grads = torch.func.vmap(torch.func.grad(one), in_dims=(None, 0, 0))(params, x, y)
        norms = torch.sqrt(sum(g.pow(2).flatten(1).sum(1) for g in grads.values()))
        weights = (self.clip / (norms + 1e-12)).clamp(max=1.0)
        losses = self.criterion(model(x), y, reduction="none")
        self._mean = losses.mean().detach()
        scale = self.noise_multiplier * self.clip / len(y)
        noise = sum((p * torch.randn_like(p)).sum() for p in model.parameters()) * scale
        return (weights * losses).mean() + noise - noise.detach()  # the noise in the gradient, not the value

    def reported(self, loss: torch.Tensor) -> torch.Tensor:
        """What the user gives `step(loss=...)`: the examples' unweighted mean loss."""
        return self._mean


@dataclass
class DigitsMixup(Digits):
    """The digits MLP trained with mixup (Zhang et al. 2018, alpha 0.4): each batch is blended with a
    shuffle of itself by a weight drawn from Beta(alpha, alpha) (the global generator, seeded per rank), the
    loss the same blend of the two labels' cross-entropies; validated on clean images. The training loss has
    a floor well above zero that moves with each batch's draw, and it is not the loss the model is judged
    on. AdamW."""

    alpha: float = 0.4
    name: str = field(default="digits_mixup", init=False)

    def loss(self, model: nn.Module, batch: Any) -> torch.Tensor:
        x, y = batch
        blend = float(torch.distributions.Beta(self.alpha, self.alpha).sample())
        other = torch.randperm(len(y))
        out = model(blend * x + (1.0 - blend) * x[other])
        return blend * self.criterion(out, y) + (1.0 - blend) * self.criterion(out, y[other])


@dataclass
class DigitsAdversarial(Digits):
    """The digits MLP under adversarial training (FGSM with a random start, Wong et al. 2020): each batch's
    images are moved to a uniform random point within `epsilon` of themselves (pixels in [0, 1]; the global
    generator, seeded per rank), then 1.25 `epsilon` along the sign of the loss's gradient there, projected
    back within `epsilon` and into [0, 1], and the step trains on the moved images: a loss that is a
    maximum over inputs, whose surface changes as the model does. Adam. Metric: the held-out cross-entropy
    under the same attack from the clean images (no random start: a fixed robust loss)."""

    epsilon: float = 0.1
    name: str = field(default="digits_adversarial", init=False)

    def _attack(
        self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, start: torch.Tensor
    ) -> torch.Tensor:
        with torch.enable_grad():
            moved = (x + start).clamp(0.0, 1.0).requires_grad_(True)
            (g,) = torch.autograd.grad(self.criterion(_inner(model)(moved), y), moved)
        step = start + 1.25 * self.epsilon * g.sign()
        return (x + step.clamp(-self.epsilon, self.epsilon)).clamp(0.0, 1.0).detach()

    def loss(self, model: nn.Module, batch: Any) -> torch.Tensor:
        x, y = batch
        start = (2.0 * torch.rand_like(x) - 1.0) * self.epsilon
        return self.criterion(model(self._attack(model, x, y, start)), y)

    def evaluate(self, model: nn.Module) -> dict[str, float]:
        x, y = self.validation_set()
        was_training = model.training
        model.eval()
        moved = self._attack(model, x, y, torch.zeros_like(x))
        with torch.no_grad():
            logits = _inner(model)(moved)
        model.train(was_training)
        return {
            "val_loss": float(self.criterion(logits, y)),
            "val_accuracy": float((logits.argmax(1) == y).float().mean()),
        }


@dataclass
class DigitsLongTail(Digits):
    """The digits MLP (SGD + momentum) on a long-tailed training set: of class c's training images a fixed
    `keep` ** c are kept, each image by a fixed draw (class 0 all 145, class 9 about 4% in expectation: 476
    images, the rarest class 5 of them, 29 to 1), validated on the balanced held-out images. The training
    loss is the head classes', the validation loss weighs the tail's few images, which the run learns late
    and memorises."""

    keep: float = 0.7
    name: str = field(default="digits_long_tail", init=False)

    def training_set(self) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = super().training_set()
        draw = torch.rand(len(y), generator=torch.Generator().manual_seed(20261207))
        kept = draw < self.keep ** y.float()
        return x[kept], y[kept]


@dataclass
class DigitsEMA(Digits):
    """The digits MLP (AdamW) scored on an exponential moving average of its weights (decay 0.99, a time
    constant of 100 steps), as diffusion and many vision scripts keep one: `torch.optim.swa_utils.
    AveragedModel` updated from each rank's own network before every step (the user's copy: HDET neither
    averages nor rolls it back), and the held-out cross-entropy is the average's on rank 0. The metric
    lags the weights HDET trains by the average's window."""

    decay: float = 0.99
    name: str = field(default="digits_ema", init=False)

    def loss(self, model: nn.Module, batch: Any) -> torch.Tensor:
        net = _inner(model)
        if getattr(self, "_average", None) is None:
            from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

            self._average = AveragedModel(net, multi_avg_fn=get_ema_multi_avg_fn(self.decay))
        self._average.update_parameters(net)
        return super().loss(model, batch)

    def evaluate(self, model: nn.Module) -> dict[str, float]:
        """The held-out metrics of the average (of `model` itself before any step)."""
        average = getattr(self, "_average", None)
        return super().evaluate(model if average is None else average.module)


class _SparseAutoencoder(nn.Module):
    """An overcomplete ReLU encoder and a linear decoder; `forward` gives the reconstruction and the codes."""

    def __init__(self, inputs: int, codes: int) -> None:
        super().__init__()
        self.encode = nn.Linear(inputs, codes)
        self.decode = nn.Linear(codes, inputs)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        codes = torch.relu(self.encode(x))
        return self.decode(codes), codes


@dataclass
class DigitsSparseAutoencoder(Digits):
    """A sparse autoencoder on the 8x8 digits, as interpretability work trains one: 64 -> 256 ReLU codes ->
    64, the loss the reconstruction's squared error per image plus `sparsity` x the codes' L1 norm, two
    terms that pull against each other (codes die as the penalty wins). Adam. Metric: the same objective on
    the held-out images. No chance level: not a classifier."""

    codes: int = 256
    sparsity: float = 0.05
    name: str = field(default="digits_sparse_autoencoder", init=False)
    chance_loss: float | None = field(default=None, init=False)  # type: ignore[assignment]

    def model(self, seed: int) -> nn.Module:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return _SparseAutoencoder(64, self.codes)

    def objective(self, model: nn.Module, x: torch.Tensor) -> torch.Tensor:
        out, codes = model(x)
        return (out - x).pow(2).sum(1).mean() + self.sparsity * codes.abs().sum(1).mean()

    def loss(self, model: nn.Module, batch: Any) -> torch.Tensor:
        return self.objective(model, batch[0])

    @torch.no_grad()
    def evaluate(self, model: nn.Module) -> dict[str, float]:
        return {"val_loss": float(self.objective(model, self.validation_set()[0]))}


class _VectorQuantised(nn.Module):
    """An encoder to `dim`, a codebook of `codes` vectors, a decoder from the nearest code (the
    straight-through estimator passes the decoder's gradient to the encoder); `forward` gives the
    reconstruction, the encoding and its nearest code."""

    def __init__(self, codes: int, dim: int, hidden: int) -> None:
        super().__init__()
        self.encode = _hidden_layers(64, hidden, 1, dim, nn.ReLU)
        self.codebook = nn.Parameter(torch.empty(codes, dim).uniform_(-1.0 / codes, 1.0 / codes))
        self.decode = _hidden_layers(dim, hidden, 1, 64, nn.ReLU)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        z = self.encode(x)
        code = self.codebook[torch.cdist(z, self.codebook).argmin(1)]
        return self.decode(z + (code - z).detach()), z, code


@dataclass
class DigitsVQ(Digits):
    """A vector-quantised autoencoder on the 8x8 digits (van den Oord et al. 2017): 64 -> 128 -> 8, snapped to
    the nearest of 64 codebook vectors (drawn uniform in +-1/64, as common implementations start them), 8 ->
    128 -> 64; the loss the reconstruction's MSE plus the codebook's (the codes pulled to the encodings) plus
    0.25 x the commitment's (the encodings to the codes). A code no encoding picks gets no gradient and stays
    dead. Adam. Metric: the held-out reconstruction MSE through the codebook. No chance level."""

    codes: int = 64
    dim: int = 8
    hidden: int = 128
    commitment: float = 0.25
    name: str = field(default="digits_vq", init=False)
    chance_loss: float | None = field(default=None, init=False)  # type: ignore[assignment]

    def model(self, seed: int) -> nn.Module:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return _VectorQuantised(self.codes, self.dim, self.hidden)

    def loss(self, model: nn.Module, batch: Any) -> torch.Tensor:
        x = batch[0]
        out, z, code = model(x)
        mse = nn.functional.mse_loss
        return mse(out, x) + mse(code, z.detach()) + self.commitment * mse(z, code.detach())

    @torch.no_grad()
    def evaluate(self, model: nn.Module) -> dict[str, float]:
        x = self.validation_set()[0]
        return {"val_loss": float(nn.functional.mse_loss(model(x)[0], x))}


class _TwoHeads(nn.Module):
    """A shared MLP trunk and two linear heads: the class logits and one regression output."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(64, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU())
        self.classes = nn.Linear(width, 10)
        self.value = nn.Linear(width, 1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.trunk(x)
        return self.classes(h), self.value(h).squeeze(1)


@dataclass
class DigitsMultitask(Digits):
    """Two tasks on one trunk, their losses summed as a user first writes it: the digit's class
    (cross-entropy) and the image's total ink (the sum of its 64 pixels in [0, 1], about 19 ± 4, regressed
    unstandardised: its squared error starts near 400). The sum's scale falls by 100x as the ink is learned,
    then the classification's loss is most of it. AdamW. Metric: the same sum on the held-out images."""

    name: str = field(default="digits_multitask", init=False)
    chance_loss: float | None = field(default=None, init=False)  # type: ignore[assignment]

    def model(self, seed: int) -> nn.Module:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return _TwoHeads(self.width)

    def objective(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        logits, ink = model(x)
        return self.criterion(logits, y) + nn.functional.mse_loss(ink, x.sum(1))

    def loss(self, model: nn.Module, batch: Any) -> torch.Tensor:
        return self.objective(model, *batch)

    @torch.no_grad()
    def evaluate(self, model: nn.Module) -> dict[str, float]:
        return {"val_loss": float(self.objective(model, *self.validation_set()))}


_TEACHERS: dict[tuple[Any, ...], nn.Module] = {}


@dataclass
class DigitsDistill(Digits):
    """Knowledge distillation (Hinton et al. 2015) into a narrow student: the digits MLP of width 32 (SGD +
    momentum) trained on 0.9 x the KL divergence from a teacher's softened predictions (temperature 4,
    scaled by its square) plus 0.1 x the labels' cross-entropy. The teacher, an MLP of two hidden layers of
    256, is trained once per process on the same training images (Adam at 1e-3, 600 batches of 64 from
    seed 0: the same on every rank and run). The soft term's gradient in the logits is the temperature times
    a cross-entropy's, so the student's best rate sits below plain training's. Metric: the student's held-out
    cross-entropy against the labels."""

    width: int = 32
    temperature: float = 4.0
    soft: float = 0.9
    name: str = field(default="digits_distill", init=False)

    def teacher(self) -> nn.Module:
        key = ("v1", self.validation)
        if key not in _TEACHERS:
            x, y = self.training_set()
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(0)
                net = _pretrain(_hidden_layers(64, 256, 2, 10, nn.ReLU), x, y, 600, 64, 0)
            _TEACHERS[key] = net.eval().requires_grad_(False)
        return _TEACHERS[key]

    def loss(self, model: nn.Module, batch: Any) -> torch.Tensor:
        x, y = batch
        logits, t, teacher = model(x), self.temperature, self.teacher()
        with torch.no_grad():
            target = nn.functional.log_softmax(teacher(x) / t, 1)
        student = nn.functional.log_softmax(logits / t, 1)
        kl = nn.functional.kl_div(student, target, reduction="batchmean", log_target=True)
        return self.soft * t * t * kl + (1.0 - self.soft) * self.criterion(logits, y)


class _LoRALinear(nn.Module):
    """A frozen linear layer plus a trainable low-rank update, `scale` x B A (A drawn as `nn.Linear` draws
    its weights, B zero: the layer starts as the frozen one)."""

    def __init__(self, base: nn.Linear, rank: int, scale: float) -> None:
        super().__init__()
        self.base = base.requires_grad_(False)
        self.down = nn.Linear(base.in_features, rank, bias=False)
        self.up = nn.Linear(rank, base.out_features, bias=False)
        nn.init.zeros_(self.up.weight)
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + self.scale * self.up(self.down(x))


@dataclass
class FinetuneLoRA(Finetune):
    """The fine-tune above by LoRA (Hu et al. 2021), as parameter-efficient fine-tuning is written: every
    pretrained layer of the body frozen, a rank-`rank` update beside each (alpha / rank = 2), the new head
    trained whole; AdamW over every parameter (the frozen ones get no gradient). The update starts at zero,
    so the first steps move only the adapters' second factors and the head."""

    rank: int = 4
    name: str = field(default="finetune_lora", init=False)  # type: ignore[assignment]

    def model(self, seed: int) -> nn.Module:
        net = super().model(seed)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed + 1)
            for i, layer in enumerate(net[:-1]):
                if isinstance(layer, nn.Linear):
                    net[i] = _LoRALinear(layer, self.rank, 2.0)
        return net


@dataclass
class DigitsWeightNorm(Digits):
    """The digits MLP (SGD + momentum) with every linear layer weight-normalised (Salimans and Kingma 2016,
    `nn.utils.parametrizations.weight_norm`): each row of a weight is a trained gain times a trained
    direction over its norm, so the direction's effective step shrinks as its norm grows, and the
    parameters HDET averages are the parametrization's (`parametrizations.weight.original0` and
    `original1`)."""

    name: str = field(default="digits_weight_norm", init=False)

    def model(self, seed: int) -> nn.Module:
        net = super().model(seed)
        for layer in net:
            if isinstance(layer, nn.Linear):
                nn.utils.parametrizations.weight_norm(layer)
        return net


class _BayesLinear(nn.Module):
    """A linear layer with a factorised Gaussian over its weights (a mean and a softplus scale each, the
    bias a point estimate): in training each forward pass draws the weights by the reparameterisation trick
    (the global generator); in eval mode it uses the means."""

    def __init__(self, inputs: int, outputs: int) -> None:
        super().__init__()
        self.mean = nn.Parameter(torch.empty(outputs, inputs).uniform_(-1.0, 1.0) / math.sqrt(inputs))
        self.rho = nn.Parameter(torch.full((outputs, inputs), -5.0))
        self.bias = nn.Parameter(torch.zeros(outputs))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight = self.mean
        if self.training:
            weight = weight + nn.functional.softplus(self.rho) * torch.randn_like(weight)
        return nn.functional.linear(x, weight, self.bias)

    def kl(self) -> torch.Tensor:
        """KL(the weights' Gaussian || N(0, 1)), summed."""
        sigma = nn.functional.softplus(self.rho)
        return (0.5 * (sigma.pow(2) + self.mean.pow(2) - 1.0) - sigma.log()).sum()


@dataclass
class DigitsBayes(Digits):
    """A Bayesian MLP on the digits trained by Bayes by backprop (Blundell et al. 2015): 64 -> 128 -> 128 ->
    10, ReLU, every weight a Gaussian drawn afresh in each forward pass, the loss the cross-entropy plus the
    weights' KL to a standard normal prior over the training set's size (the negative ELBO per image).
    The loss is noisy by the weights' draw as well as the batch's, and at the start the KL term is most of
    it (about 78 of 80: scales of 0.007 against the prior's 1), falling slowly as the scales grow, while the
    cross-entropy, the part the metric measures, is learned underneath. Adam. Metric: the held-out
    cross-entropy at the means."""

    name: str = field(default="digits_bayes", init=False)

    def model(self, seed: int) -> nn.Module:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            w = self.width
            return nn.Sequential(
                _BayesLinear(64, w), nn.ReLU(), _BayesLinear(w, w), nn.ReLU(), _BayesLinear(w, 10)
            )

    def loss(self, model: nn.Module, batch: Any) -> torch.Tensor:
        kl = sum(m.kl() for m in _inner(model).modules() if isinstance(m, _BayesLinear))
        return super().loss(model, batch) + kl / len(self.training_set()[1])


def _shapes(n: int, size: int, g: torch.Generator, shapes: int = 3) -> torch.Tensor:
    """Per-pixel labels (n, size, size) of up to `shapes` filled shapes each (the first always drawn, the
    others with probability 0.8): 0 background, 1 a disk, 2 a square, of half-width 2 to 5 pixels at a random
    centre; a later shape covers an earlier one."""
    grid = torch.arange(size, dtype=torch.float32)
    row, col = grid.view(1, size, 1), grid.view(1, 1, size)
    labels = torch.zeros(n, size, size, dtype=torch.long)
    for i in range(shapes):
        present = (torch.rand(n, generator=g) < 0.8) | (i == 0)
        kind = torch.randint(1, 3, (n,), generator=g)
        cy, cx = (torch.rand(2, n, 1, 1, generator=g) * size).unbind(0)
        half = 2.0 + 3.0 * torch.rand(n, 1, 1, generator=g)
        disk = (row - cy) ** 2 + (col - cx) ** 2 <= half**2
        square = ((row - cy).abs() <= half) & ((col - cx).abs() <= half)
        inside = torch.where(kind.view(n, 1, 1) == 1, disk, square) & present.view(n, 1, 1)
        labels = torch.where(inside, kind.view(n, 1, 1), labels)
    return labels


class _UNet(nn.Module):
    """A two-level U-Net: two 3x3 conv + BatchNorm + ReLU blocks at full resolution, two at half (after a
    2x2 max-pool), nearest-neighbour upsampling, the full-resolution features concatenated back (the skip),
    one block and a 1x1 conv to the classes' logits per pixel."""

    def __init__(self, channels: int, classes: int) -> None:
        super().__init__()
        c = channels

        def block(inputs: int, outputs: int) -> list[nn.Module]:
            return [nn.Conv2d(inputs, outputs, 3, padding=1), nn.BatchNorm2d(outputs), nn.ReLU()]

        self.encode = nn.Sequential(*block(1, c), *block(c, c))
        self.down = nn.Sequential(nn.MaxPool2d(2), *block(c, 2 * c), *block(2 * c, 2 * c))
        self.up = nn.Upsample(scale_factor=2, mode="nearest")
        self.decode = nn.Sequential(*block(3 * c, c), nn.Conv2d(c, classes, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skip = self.encode(x)
        return self.decode(torch.cat([skip, self.up(self.down(skip))], dim=1))


@dataclass
class Segmentation(_Synthetic):
    """Semantic segmentation: 16x16 images of up to three filled disks and squares (`_shapes`) at intensity 1
    on a background of 0, Gaussian pixel noise of sd 0.5 on both, every pixel labelled background, disk or
    square; a U-Net (`_UNet`, 16 channels, BatchNorm) trained on the per-pixel cross-entropy, Adam. A disk and
    a square of one size differ only at their corners and edges, so the network must read shape, not
    intensity. Metric: the held-out per-pixel cross-entropy (chance ln 3 on balanced classes; here most pixels
    are background, so no chance level is named)."""

    size: int = 16
    channels: int = 16
    train: int = 4096
    validation: int = 512
    noise: float = 0.5
    name: str = field(default="segmentation", init=False)
    metric: str = field(default="val_loss", init=False)
    criterion = staticmethod(nn.functional.cross_entropy)

    def _data(self) -> tuple[torch.Tensor, torch.Tensor]:
        g, n = self._draw()
        labels = _shapes(n, self.size, g)
        images = (labels > 0).float() + self.noise * torch.randn(n, self.size, self.size, generator=g)
        return images.unsqueeze(1), labels

    def model(self, seed: int) -> nn.Module:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return _UNet(self.channels, 3)


MASK = 256
"""The masked byte LM's mask token: one past the 256 byte values."""


@dataclass
class MaskedLM(ByteLM):
    """A masked byte LM (BERT's objective on the quality benchmark's text, the standard library's source):
    in each window of `context` bytes a random `mask_rate` of the positions is replaced by a mask token, and a
    bidirectional transformer encoder (`_SequenceTransformer`, pre-norm, no causal mask) predicts the bytes
    there; the cross-entropy is over the masked positions only, so each step's loss is an average over
    about `mask_rate` x `batch_size` x `context` = 77 bytes (a noisier loss than the causal LM's 512).
    AdamW. Metric: the held-out masked cross-entropy in nats per byte, over fixed masks (chance ln 256)."""

    context: int = 32
    dim: int = 32
    layers: int = 2
    heads: int = 2
    val_bytes: int = 16_384
    mask_rate: float = 0.15
    name: str = field(default="masked_lm", init=False)
    metric: str = field(default="val_loss", init=False)

    def model(self, seed: int) -> nn.Module:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return _SequenceTransformer(MASK + 1, self.context, self.dim, self.heads, self.layers)

    def _masked(self, x: torch.Tensor, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """(the inputs with a random `mask_rate` of positions masked, the targets: the byte there, -100
        elsewhere)."""
        masked = torch.rand(x.shape, generator=g) < self.mask_rate
        return torch.where(masked, MASK, x), torch.where(masked, x, -100)

    def batches(self, rank: int, replicas: int, seed: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        g = torch.Generator().manual_seed(seed * 7919 + rank + 104729)
        for x, _ in super().batches(rank, replicas, seed):
            yield self._masked(x, g)

    def loss(self, model: nn.Module, batch: Any) -> torch.Tensor:
        x, y = batch
        return nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten(), ignore_index=-100)

    @torch.no_grad()
    def evaluate(self, model: nn.Module) -> dict[str, float]:
        _, val = self._data()
        n = len(val) // self.context
        x, y = self._masked(val[: n * self.context].view(n, self.context), torch.Generator().manual_seed(0))
        was_training = model.training
        model.eval()
        total = sum(
            float(
                nn.functional.cross_entropy(
                    model(x[i : i + 64]).flatten(0, 1),
                    y[i : i + 64].flatten(),
                    ignore_index=-100,
                    reduction="sum",
                )
            )
            for i in range(0, n, 64)
        )
        model.train(was_training)
        return {"val_loss": total / int((y >= 0).sum())}


class _Separable(nn.Sequential):
    """A depthwise-separable block (MobileNet's): a 3x3 depthwise conv and a 1x1 pointwise conv, each
    followed by GroupNorm and SiLU."""

    def __init__(self, inputs: int, outputs: int) -> None:
        super().__init__(
            nn.Conv2d(inputs, inputs, 3, padding=1, groups=inputs),
            nn.GroupNorm(8, inputs),
            nn.SiLU(),
            nn.Conv2d(inputs, outputs, 1),
            nn.GroupNorm(8, outputs),
            nn.SiLU(),
        )


@dataclass
class DigitsDepthwise(Digits):
    """A MobileNet-style CNN on the 8x8 digits: a 3x3 stem conv to 32 channels, two depthwise-separable blocks
    (`_Separable`) around a 2x2 max-pool (32 -> 64 channels), global average pooling and a linear head;
    GroupNorm (8 groups) and SiLU throughout, no BatchNorm. SGD + momentum. The digits' split and metric."""

    channels: int = 32
    name: str = field(default="digits_depthwise", init=False)

    def model(self, seed: int) -> nn.Module:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            c = self.channels
            return nn.Sequential(
                nn.Unflatten(1, (1, 8, 8)),
                nn.Conv2d(1, c, 3, padding=1),
                nn.GroupNorm(8, c),
                nn.SiLU(),
                _Separable(c, c),
                nn.MaxPool2d(2),
                _Separable(c, 2 * c),
                nn.AdaptiveAvgPool2d(1),
                nn.Flatten(),
                nn.Linear(2 * c, 10),
            )


def _focal(out: torch.Tensor, y: torch.Tensor, gamma: float = 2.0) -> torch.Tensor:
    """The focal loss: each example's cross-entropy weighted by (1 - p)^gamma, p its probability of the
    right class, so that examples already classified well count for little."""
    ce = nn.functional.cross_entropy(out, y, reduction="none")
    return ((1.0 - torch.exp(-ce)) ** gamma * ce).mean()


@dataclass
class DigitsFocal(Digits):
    """The digits MLP (SGD + momentum) trained on the focal loss (gamma 2) instead of the cross-entropy: an
    example's loss shrinks as the square of its error probability, so the loss falls faster than a
    cross-entropy toward zero and its gradient fades with it. Metric: the held-out focal loss."""

    name: str = field(default="digits_focal", init=False)
    chance_loss: float = field(default=0.81 * math.log(10), init=False)  # (1 - 1/10)^2 x ln 10
    criterion = staticmethod(_focal)


def _ctc(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """CTC loss of frame log-probabilities `out` (n, frames, symbols + 1; index 0 the blank) against label
    sequences `y` (n, longest), each a prefix of symbols 1.. padded with zeros."""
    log_probs = out.log_softmax(2).transpose(0, 1)
    frames = torch.full((len(y),), out.shape[1], dtype=torch.long)
    return nn.functional.ctc_loss(log_probs, y, frames, (y > 0).sum(1), zero_infinity=True)


class _FrameTagger(nn.Module):
    """Three 1-D convs (kernel 5, `width` channels, ReLU) over the frames, then a per-frame linear layer to
    the symbols and the blank: (n, frames, features) -> (n, frames, symbols + 1) logits."""

    def __init__(self, features: int, width: int, outputs: int) -> None:
        super().__init__()
        self.convs = nn.Sequential(
            nn.Conv1d(features, width, 5, padding=2),
            nn.ReLU(),
            nn.Conv1d(width, width, 5, padding=2),
            nn.ReLU(),
            nn.Conv1d(width, width, 5, padding=2),
            nn.ReLU(),
        )
        self.head = nn.Linear(width, outputs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.convs(x.transpose(1, 2)).transpose(1, 2))


@dataclass
class CTC(_Synthetic):
    """Unaligned sequence labelling on the CTC loss, as speech recognition is trained: each example is 24
    frames of 16 features in which a sequence of 3 to 6 symbols (of 8, no symbol twice in a row) is spoken,
    each symbol for 2 or 3 frames as its fixed random embedding, with 0 or 1 silent (zero) frames before it
    and silence after the last, under Gaussian noise of sd 1 on every frame; the labels carry the symbols'
    order, not where they are. A 1-D CNN tags every frame (`_FrameTagger`, three convs of width 64); Adam.
    The loss starts high and first falls to a plateau where every frame says "blank", before the alignment
    is learned. Metric: the held-out CTC loss. No chance level is named."""

    symbols: int = 8
    frames: int = 24
    features: int = 16
    width: int = 64
    name: str = field(default="ctc", init=False)
    metric: str = field(default="val_loss", init=False)
    criterion = staticmethod(_ctc)

    def _data(self) -> tuple[torch.Tensor, torch.Tensor]:
        g, n = self._draw()
        embed = torch.randn(self.symbols, self.features, generator=g)
        x = torch.randn(n, self.frames, self.features, generator=g)
        lengths = torch.randint(3, 7, (n,), generator=g)
        y = torch.zeros(n, 6, dtype=torch.long)
        frame = torch.arange(self.frames)
        t = torch.zeros(n, dtype=torch.long)
        last = torch.full((n,), -1)
        for j in range(6):  # at most 6 x (1 + 3) = 24 frames
            s = torch.randint(0, self.symbols - 1, (n,), generator=g)
            s = torch.where((last >= 0) & (s >= last), s + 1, s)  # never the symbol just spoken
            t = t + torch.randint(0, 2, (n,), generator=g)
            d = torch.randint(2, 4, (n,), generator=g)
            spoken = j < lengths
            mask = (frame >= t[:, None]) & (frame < (t + d)[:, None]) & spoken[:, None]
            x += mask[:, :, None] * embed[s][:, None, :]
            y[:, j] = torch.where(spoken, s + 1, 0)
            last, t = s, t + d
        return x, y

    def model(self, seed: int) -> nn.Module:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return _FrameTagger(self.features, self.width, self.symbols + 1)
