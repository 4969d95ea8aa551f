"""Spreads: the per-replica multipliers around a shared base, and their assignment to ranks.

Pure functions of (replicas, size, seed, window, name): every rank computes the same answer with no
communication, and nothing here touches the global RNG (each call builds its own NumPy generator).
"""

from __future__ import annotations

import itertools
import math
import zlib
from collections.abc import Sequence

import numpy as np

SPREAD_KINDS = ("linear", "log", "log_mean1", "log_below")


def linear_spread(replicas: int, alpha: float) -> list[float]:
    """The paper's linear, symmetric multipliers.

    rho_r = 1 + alpha * (r - (N-1)/2) / d,  d = max((N-1)/2, 0.5)

    so sum(rho) = N and rho lies in [1 - alpha, 1 + alpha]; alpha = 0 is plain data parallel.
    """
    _check_replicas(replicas)
    if not 0.0 <= alpha < 1.0:
        raise ValueError(f"linear spread alpha must be in [0, 1), got {alpha}")
    half = (replicas - 1) / 2
    d = max(half, 0.5)
    return [1.0 + alpha * (r - half) / d for r in range(replicas)]


def log_spread(replicas: int, factor: float) -> list[float]:
    """Log-symmetric multipliers: rho_r = factor ** z_r with z_r evenly spaced in [-1, 1].

    Explores factors rather than fractions (rho in [1/factor, factor], geometric mean 1); the natural
    choice when the base may be off by 10x. factor = 1 is plain data parallel.
    """
    _check_replicas(replicas)
    if not factor >= 1.0 or not math.isfinite(factor):
        raise ValueError(f"log spread factor must be a finite number >= 1, got {factor}")
    if replicas == 1:
        return [1.0]
    return [factor ** (-1.0 + 2.0 * r / (replicas - 1)) for r in range(replicas)]


def log_mean1_spread(replicas: int, factor: float) -> list[float]:
    """A log spread of `factor` divided by its arithmetic mean: rho_r = factor ** z_r / mean(factor ** z).

    Same ratios as `log_spread`, but sum(rho) = N. Under shared_grad (every replica steps along the same mean
    gradient) the averaged model then moves as plain data parallel at the base rate does, to first order:
    exploring costs nothing at a good rate. A plain log spread's mean is above 1 (1.14 for N=4, factor 2),
    which pushes a rate that sits just below the edge of stability over it.
    """
    levels = log_spread(replicas, factor)
    mean = sum(levels) / len(levels)
    return [x / mean for x in levels]


def log_below_spread(replicas: int, factor: float) -> list[float]:
    """A log spread of `factor` divided by its largest multiplier: rho_r = factor ** (z_r - 1), in
    [1 / factor**2, 1].

    Same ratios as `log_spread`, with the top replica at the base: no replica runs above the rate the user
    set. Where loss against rate is a cliff above the best rate (the edge of stability), replicas that
    share their gradients pay for their top replica's instability while they progress at their mean rate,
    and a spread that reaches above the base is what costs. Measured, not the default (docs/benchmarks.md):
    on single runs it gained on a residual CNN at its best rate and a ViT from 10x too high (both chaotic:
    re-drawn, the default itself is level with or ahead of fixed OneCycle there) and costs where the top
    replica is what finds the edge (the MLP's rescue from 10x too high, a ViT at its best rate).
    """
    levels = log_spread(replicas, factor)
    top = max(levels)
    return [x / top for x in levels]


FULL_WIDTH_REPLICAS = 4
"""From this many replicas up a spread's size is used as given; fewer are narrowed (`replica_width`)."""


def _z_variance(replicas: int) -> float:
    """The variance of z evenly spaced in [-1, 1] over `replicas` points (the spreads' positions)."""
    return (replicas + 1) / (3 * (replicas - 1))


def replica_width(replicas: int) -> float:
    """The fraction of a spread's size (in log units for the log spreads, of alpha for the linear one) that
    `replicas` use: 1 from `FULL_WIDTH_REPLICAS` up; with 2 or 3, whose replicas sit at or near the ends,
    the fraction that gives their multipliers the variance 4 replicas have (0.745 for 2, 0.913 for 3).

    Under `shared_grad` the averaged model differs from plain data parallel only through the gradients being
    taken at the replicas' points around the centre; with arithmetic mean 1 the first-order terms cancel and
    what is left grows with the spread's variance. At the same factor 2 replicas have 1.8x the variance of 4,
    and at its best rate the benchmark's MLP on 2 processes paid for it (1.18x of fixed OneCycle over ten
    seeds where 4 processes are level; narrowed, 1.04x at factor 1.181 and 1.11x at this rule's 1.18099,
    single seeds moving by up to 25% at the edge of stability; docs/benchmarks.md). More replicas keep the
    size: their variance is already below 4's, and their top replica, the one that fails first at a rate
    too high, stays where 4 replicas put it."""
    if replicas >= FULL_WIDTH_REPLICAS or replicas < 2:
        return 1.0
    return math.sqrt(_z_variance(FULL_WIDTH_REPLICAS) / _z_variance(replicas))


def spread(kind: str, replicas: int, size: float) -> list[float]:
    """Multipliers of `kind` ('linear': size is alpha; the log kinds: size is the factor), ascending."""
    if kind == "linear":
        return linear_spread(replicas, size)
    if kind == "log":
        return log_spread(replicas, size)
    if kind == "log_mean1":
        return log_mean1_spread(replicas, size)
    if kind == "log_below":
        return log_below_spread(replicas, size)
    raise ValueError(f"spread kind must be one of {SPREAD_KINDS}, got {kind!r}")


def coordinates(multipliers: Sequence[float], kind: str) -> list[float]:
    """Where each multiplier sits on the axis the controller fits against: log(rho) or rho - 1."""
    if kind == "log":
        return [math.log(m) for m in multipliers]
    return [m - 1.0 for m in multipliers]


def _check_replicas(replicas: int) -> None:
    if not isinstance(replicas, int) or replicas < 1:
        raise ValueError(f"replicas must be a positive integer, got {replicas!r}")


def _generator(seed: int, window: int, name: str) -> np.random.Generator:
    # crc32, not hash(): Python salts str hashes per process, and every rank must agree.
    return np.random.default_rng([seed & 0xFFFFFFFF, window, zlib.crc32(name.encode())])


def permutation(replicas: int, seed: int, window: int, name: str) -> list[int]:
    """perm[r] = which sorted multiplier rank r uses in `window` for hyperparameter `name`.

    Drawn afresh per window and independently per hyperparameter from a generator seeded by
    (seed, window, name), so the loss differences are not confounded across hyperparameters.
    """
    return [int(i) for i in _generator(seed, window, name).permutation(replicas)]


def _correlation(a: Sequence[float], b: Sequence[float]) -> float:
    x = np.asarray(a) - np.mean(a)
    y = np.asarray(b) - np.mean(b)
    denom = math.sqrt(float(x @ x) * float(y @ y))
    return 0.0 if denom == 0.0 else float(x @ y) / denom


def balanced_permutations(
    replicas: int, names: Sequence[str], seed: int, window: int, candidates: int = 256
) -> dict[str, list[int]]:
    """One permutation per hyperparameter, chosen so their assignments are as uncorrelated as possible.

    The first name gets a random permutation; each further name gets, among `candidates` seeded draws
    (all permutations when N <= 6), the one whose rank pattern has the smallest largest |correlation| with
    those already chosen. With N = 4 and two hyperparameters the correlation is exactly 0.
    """
    chosen: dict[str, list[int]] = {}
    pool: list[list[int]] | None = None
    if replicas <= 6:
        pool = [list(p) for p in itertools.permutations(range(replicas))]
    for i, name in enumerate(names):
        rng = _generator(seed, window, name)
        if i == 0:
            chosen[name] = [int(x) for x in rng.permutation(replicas)]
            continue
        if pool is not None:
            order = rng.permutation(len(pool))
            options = [pool[j] for j in order]
        else:
            options = [[int(x) for x in rng.permutation(replicas)] for _ in range(candidates)]
        best, best_score = options[0], math.inf
        for perm in options:
            score = max(abs(_correlation(perm, prev)) for prev in chosen.values())
            if score < best_score - 1e-12:
                best, best_score = perm, score
                if score < 1e-12:
                    break
        chosen[name] = best
    return chosen
