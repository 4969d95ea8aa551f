"""Real workloads that need no download.

- `digits`: scikit-learn's bundled 8x8 digits (1,797 images, 10 classes), an MLP; metric: validation
  cross-entropy (`val_loss`) and accuracy. A dead network sits at ln(10) = 2.303.
- `bytelm`: a byte-level transformer language model on the Python standard library's own source text;
  metric: validation bits per byte (`val_bpb`). Chance is 8 bits per byte (ln 256 nats).

Each rank trains on its own shard (`rank::replicas`); the validation split is fixed and shared. A task
is a small object with `model()`, `batches(rank, replicas, seed)`, `loss(model, batch)` and
`evaluate(model)`. Installed packages register more tasks under the entry-point group `hdet_ray.tasks`
(name -> a factory taking the task's options as keywords; see examples/plugin_task). Users of
`ray job submit` can also point a job at their own `module:function` that returns one (the REST service
accepts registered names only).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import inspect
import math
import os
import sysconfig
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from hdet_ray.task_names import entry_points, registered_names


class Task:
    """The contract every workload follows."""

    name: str = "task"
    metric: str = "val_loss"
    """The validation metric's key in `evaluate()` (lower is better)."""
    chance_loss: float | None = None
    """The training loss of a dead model (for health checks), if there is one."""

    def model(self, seed: int) -> nn.Module:
        raise NotImplementedError

    def batches(self, rank: int, replicas: int, seed: int) -> Iterator[Any]:
        raise NotImplementedError

    def loss(self, model: nn.Module, batch: Any) -> torch.Tensor:
        raise NotImplementedError

    @torch.no_grad()
    def evaluate(self, model: nn.Module) -> dict[str, float]:
        raise NotImplementedError


def _generator(seed: int) -> torch.Generator:
    g = torch.Generator()
    g.manual_seed(seed)
    return g


def _digits_table() -> Any:
    """scikit-learn's digits as one (1797, 65) array: 64 pixels, then the label. Read from the CSV that
    scikit-learn ships, the file `load_digits()` reads, without importing scikit-learn: that import (SciPy
    and the rest) costs each training process about 3 s. `load_digits()` if the file is not where it was."""
    import gzip

    import numpy as np

    spec = importlib.util.find_spec("sklearn")
    for root in (spec.submodule_search_locations or []) if spec is not None else []:
        path = os.path.join(root, "datasets", "data", "digits.csv.gz")
        if os.path.exists(path):
            with gzip.open(path, "rt") as f:
                return np.loadtxt(f, delimiter=",")
    from sklearn.datasets import load_digits

    data = load_digits()
    return np.column_stack([data.data, data.target])


@lru_cache(maxsize=1)
def _digits() -> tuple[torch.Tensor, torch.Tensor]:
    table = _digits_table()
    x = torch.tensor(table[:, :-1], dtype=torch.float32) / 16.0
    y = torch.tensor(table[:, -1].astype(int), dtype=torch.long)
    order = torch.randperm(len(y), generator=_generator(0))  # one fixed split for every run
    return x[order], y[order]


@dataclass
class Digits(Task):
    """An MLP on scikit-learn's digits. 1,497 training images, 300 held out."""

    width: int = 128
    depth: int = 2
    batch_size: int = 32
    validation: int = 300
    name: str = field(default="digits", init=False)
    metric: str = field(default="val_loss", init=False)
    chance_loss: float = field(default=math.log(10), init=False)
    criterion = staticmethod(F.cross_entropy)
    """The loss trained on and scored on the held-out images (`val_loss`), of (logits, labels)."""

    def __post_init__(self) -> None:
        if self.width < 1 or self.depth < 1 or self.batch_size < 1:
            raise ValueError("digits: width, depth and batch_size must be >= 1")

    def model(self, seed: int) -> nn.Module:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            layers: list[nn.Module] = []
            dim = 64
            for _ in range(self.depth):
                layers += [nn.Linear(dim, self.width), nn.ReLU()]
                dim = self.width
            layers.append(nn.Linear(dim, 10))
            return nn.Sequential(*layers)

    def training_set(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The images and labels the batches are drawn from (every image the validation leaves out)."""
        x, y = _digits()
        return x[self.validation :], y[self.validation :]

    def batches(self, rank: int, replicas: int, seed: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        x, y = self.training_set()
        x, y = x[rank::replicas], y[rank::replicas]
        g = _generator(seed * 7919 + rank)
        while True:
            order = torch.randperm(len(y), generator=g)
            for i in range(0, len(y) - self.batch_size + 1, self.batch_size):
                idx = order[i : i + self.batch_size]
                yield x[idx], y[idx]

    def loss(self, model: nn.Module, batch: Any) -> torch.Tensor:
        x, y = batch
        return self.criterion(model(x), y)

    def validation_set(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The held-out images and labels `evaluate` scores (the first `validation` of the fixed split)."""
        x, y = _digits()
        return x[: self.validation], y[: self.validation]

    @torch.no_grad()
    def evaluate(self, model: nn.Module) -> dict[str, float]:
        x, y = self.validation_set()
        was_training = model.training
        model.eval()
        logits = model(x)
        model.train(was_training)
        return {
            "val_loss": float(self.criterion(logits, y)),
            "val_accuracy": float((logits.argmax(1) == y).float().mean()),
        }


@lru_cache(maxsize=4)
def stdlib_text(max_bytes: int = 2_000_000) -> bytes:
    """The first `max_bytes` of the standard library's .py sources, in a fixed (sorted) order (read once per
    process: validation runs every window)."""
    root = sysconfig.get_paths()["stdlib"]
    chunks, total = [], 0
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(
            d
            for d in dirnames
            if d not in ("site-packages", "test", "tests", "idlelib", "__pycache__", "dist-packages")
        )
        for name in sorted(filenames):
            if not name.endswith(".py"):
                continue
            with open(os.path.join(dirpath, name), "rb") as f:
                data = f.read()
            chunks.append(data)
            total += len(data)
            if total >= max_bytes:
                return b"".join(chunks)[:max_bytes]
    return b"".join(chunks)


class _TinyGPT(nn.Module):
    def __init__(self, context: int, dim: int, layers: int, heads: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(256, dim)
        self.pos = nn.Parameter(torch.zeros(context, dim))
        block = nn.TransformerEncoderLayer(
            dim, heads, 4 * dim, dropout=0.0, batch_first=True, norm_first=True, activation="gelu"
        )
        self.blocks = nn.TransformerEncoder(block, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, 256)
        # a bool mask (True = masked): a float one holds -inf, which HDET's finiteness check reads as a
        # dead replica
        causal = torch.triu(torch.ones(context, context, dtype=torch.bool), diagonal=1)
        self.register_buffer("mask", causal, persistent=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        t = idx.shape[1]
        h = self.embed(idx) + self.pos[:t]
        h = self.blocks(h, mask=self.mask[:t, :t], is_causal=True)
        return self.head(self.norm(h))


@dataclass
class ByteLM(Task):
    """A small causal transformer over bytes of the standard library's source; metric bits per byte."""

    context: int = 64
    dim: int = 64
    layers: int = 2
    heads: int = 4
    batch_size: int = 16
    train_bytes: int = 1_000_000
    val_bytes: int = 32_768
    name: str = field(default="bytelm", init=False)
    metric: str = field(default="val_bpb", init=False)
    chance_loss: float = field(default=math.log(256), init=False)

    def __post_init__(self) -> None:
        if self.dim % self.heads:
            raise ValueError(f"bytelm: dim ({self.dim}) must be divisible by heads ({self.heads})")

    def _data(self) -> tuple[torch.Tensor, torch.Tensor]:
        raw = stdlib_text(self.train_bytes + self.val_bytes)
        data = torch.frombuffer(bytearray(raw), dtype=torch.uint8).long()
        return data[: -self.val_bytes], data[-self.val_bytes :]

    def model(self, seed: int) -> nn.Module:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return _TinyGPT(self.context, self.dim, self.layers, self.heads)

    def batches(self, rank: int, replicas: int, seed: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        train, _ = self._data()
        shard = len(train) // replicas
        train = train[rank * shard : (rank + 1) * shard]
        g = _generator(seed * 7919 + rank)
        while True:
            starts = torch.randint(0, len(train) - self.context - 1, (self.batch_size,), generator=g)
            x = torch.stack([train[s : s + self.context] for s in starts])
            y = torch.stack([train[s + 1 : s + self.context + 1] for s in starts])
            yield x, y

    def loss(self, model: nn.Module, batch: Any) -> torch.Tensor:
        x, y = batch
        return F.cross_entropy(model(x).reshape(-1, 256), y.reshape(-1))

    @torch.no_grad()
    def evaluate(self, model: nn.Module) -> dict[str, float]:
        _, val = self._data()
        n = (len(val) - 1) // self.context
        x = val[: n * self.context].view(n, self.context)
        y = val[1 : n * self.context + 1].view(n, self.context)
        was_training = model.training
        model.eval()
        total = 0.0
        for i in range(0, n, 64):
            total += float(
                F.cross_entropy(
                    model(x[i : i + 64]).reshape(-1, 256), y[i : i + 64].reshape(-1), reduction="sum"
                )
            )
        model.train(was_training)
        nats = total / (n * self.context)
        return {"val_loss": nats, "val_bpb": nats / math.log(2)}


TASKS: dict[str, Callable[..., Task]] = {"digits": Digits, "bytelm": ByteLM}
"""The built-in tasks (their names are `hdet_ray.task_names.BUILTIN`, which tests/test_tasks.py holds
equal); `registered_names()` adds those installed packages declare (`hdet_ray.tasks`)."""


def _factory(name: str) -> Callable[..., Task] | None:
    if name in TASKS:
        return TASKS[name]
    ep = entry_points().get(name)
    if ep is None:
        return None
    try:
        return ep.load()
    except (ImportError, AttributeError) as e:
        raise ValueError(f"task {name!r}: its entry point {ep.value!r} does not load ({e})") from None


def _options_model(name: str, factory: Callable[..., Task]):
    """A pydantic model of the factory's keyword options (its signature: annotations and defaults)."""
    from pydantic import ConfigDict, create_model

    fields: dict[str, Any] = {}
    try:
        for p in inspect.signature(factory, eval_str=True).parameters.values():
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                continue
            annotation = Any if p.annotation is p.empty else p.annotation
            fields[p.name] = (annotation, ... if p.default is p.empty else p.default)
        return create_model(f"{name}_options", __config__=ConfigDict(extra="forbid"), **fields)
    except Exception as e:
        raise ValueError(
            f"task {name!r}: cannot read its options from the factory's signature ({e})"
        ) from None


def describe(name: str) -> dict[str, Any]:
    """A registered task's name, one-line description, source and JSON schema of its `task_options`."""
    factory = _factory(name)
    if factory is None:
        raise ValueError(f"unknown task {name!r}; registered tasks: {registered_names()}")
    doc = (inspect.getdoc(factory) or "").strip().splitlines()
    source = "built-in" if name in TASKS else f"entry point {entry_points()[name].value}"
    return {
        "name": name,
        "description": doc[0] if doc else "",
        "source": source,
        "options": _options_model(name, factory).model_json_schema(),
    }


def check_options(name: str, options: dict[str, Any]) -> None:
    """Raise ValueError naming each bad option of a registered task (its factory's signature is the
    schema)."""
    from pydantic import ValidationError

    factory = _factory(name)
    if factory is None:
        raise ValueError(f"unknown task {name!r}; registered tasks: {registered_names()}")
    try:
        _options_model(name, factory).model_validate(options)
    except ValidationError as e:
        bad = "; ".join(f"{'.'.join(map(str, err['loc']))}: {err['msg']}" for err in e.errors())
        raise ValueError(f"task {name!r}: bad task_options ({bad})") from None


def make_task(name: str, **options: Any) -> Task:
    """A registered task by name (built-in or from the `hdet_ray.tasks` entry points), or a user's
    `module:function` returning a `Task`."""
    factory = _factory(name)
    if factory is None and ":" in name:
        module, _, attr = name.partition(":")
        try:
            factory = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as e:
            raise ValueError(f"task {name!r}: cannot import {module}:{attr} ({e})") from None
    if factory is None:
        raise ValueError(
            f"unknown task {name!r}; registered tasks: {registered_names()} (or 'module:function')"
        )
    try:
        task = factory(**options)
    except TypeError as e:
        raise ValueError(f"task {name!r}: bad task_options {sorted(options)}: {e}") from None
    if not isinstance(task, Task):
        raise ValueError(f"task {name!r}: its factory returned {type(task).__name__}, not a Task")
    return task
