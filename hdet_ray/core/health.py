"""Which replicas are fit to be averaged: a pure verdict from each replica's window statistics.

A replica is unhealthy when
- its window loss or its parameters are non-finite;
- its loss blew up while staying finite. Three conditions, all needed:
  * relative: its window mean or the mean over the window's second half is above `blowup_factor` x the
    reference (judged on the distance from zero, `above`, so a loss below zero reads right), the larger of
    the window's starting loss (the converged parameters' loss on the window's first batches: the mean of
    the replicas' first-step losses) and the previous window's converged median; where the starting loss
    itself blew up against the lower of that median and the run's best (`regressed_start`), that lower
    level alone;
  * absolute: the rise above the reference gives back at least `blowup_progress` of what the run has learned
    so far (the run's initial loss minus the reference). Near zero loss a window that doubles 0.0007 to 0.0019
    is noise, not a blow-up: it gave back 0.05% of the progress from 2.3;
  * beyond the draw: the rise is over `blowup_noise` standard errors, from one batch's noise as the spread of
    the replicas' first losses shows it (`first_noise`; against a level the start regressed from, the
    smaller of that and the previous window's spread, the noise before the damage). A loss that hovers
    around zero whatever the model's quality (a REINFORCE surrogate) has no progress to give back, and its
    doublings are its batches' draw.
- it fell back to chance: it had learned (the window's starting loss, the previous window's median, the run's
  best median or, with `chance_loss` given, its own lowest batch loss was below chance by more than
  `chance_margin`) and the window's
  second half sits at chance (within `chance_tolerance`) or above it. Chance is `chance_loss` when given, else
  the run's initial loss (the first window's starting loss: an untrained network's level), so a network that
  learned and came back to where it started is dead without the user naming chance. A too-high rate leaves a
  ten-class network at ln(10) = 2.303: no NaN check sees it.
- every replica is stuck (`stuck_spread`): a window judged healthy by the rules above whose replicas' window
  losses agree within `stuck_spread_learned` of their median (4%: a dead network's replicas still differ by
  their shards' data), whatever their rates, while each has given back more than half of what the run had
  learned (`gave_back`: from the initial loss to the lowest of the window's start, the previous median, the
  best median and, with `replica_learned`, the lowest window loss of any healthy replica in a kept window,
  where that is more than 5% below the initial loss). A dead network predicts the same thing whatever rate it
  is stepped at; it rests at the constant predictor's loss, which can sit below the untrained network's (ln 8
  = 2.08 against a first loss of 2.18 on `benchmarks.unseen`'s tabular task), so the fell-back-to-chance rule
  above, with chance inferred, misses it. Every replica fails together, and the run rolls back to its last
  fully healthy sync; a sync whose median had given back over half the progress, or sits above the run's
  initial loss, is not kept as that target (a network can die over two or three windows that each look
  healthy, before it has learned 5%). In a run where a replica has blown up, replicas that agree within
  `stuck_spread` (2%) at chance or above are stuck too, learned or not (`stuck_after_blowup`): a rate too high
  can kill a network before it learns. Before the run has learned, a replica whose window loss rose above the
  initial loss by `chance_margin` counts as blown up for this (`rose_above_start`): a rate merely too low
  stays flat on the plateau. And replicas that agree well above the run's best window median
  (`stuck_above_best`) are stuck too: a constant predictor's loss can also sit far below the untrained
  network's (an autoencoder that outputs the mean image), and such a window is no rollback target either.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True, slots=True)
class HealthConfig:
    blowup_factor: float = 2.0
    """Unhealthy when the window's tail loss exceeds this multiple of the window's starting loss (judged on
    the distance from zero, so for a reference at or below zero, a log-density's, the loss must rise above
    it by (blowup_factor - 1) x its size: `above`)."""
    chance_loss: float | None = None
    """The loss of a dead model (ln(classes) for cross-entropy); None disables the check."""
    chance_tolerance: float = 0.03
    """'At chance' means within this fraction of `chance_loss`."""
    chance_margin: float = 0.1
    """'Had learned' means at least this fraction below `chance_loss`."""
    blowup_progress: float = 0.25
    """A blow-up must also give back at least this fraction of the run's progress (initial loss minus the
    reference); 0 turns the absolute condition off."""
    blowup_noise: float = 3.0
    """A blow-up must also rise above its reference by more than this many standard errors of that rise,
    from the noise of one batch's loss: the spread of the replicas' first losses in the window (the same
    converged weights on different batches, so the draw alone, whatever the replicas' rates do later:
    `first_noise`), over the replica's tail (half its window's batches) and, where the reference is the
    window's start (the mean of the replicas' first losses), over that mean too; a level the run had got
    to (a window median) counts as exact. Where a batch's loss varies by far less than its level, as a
    classifier's cross-entropy does, `blowup_factor`'s doubling is the larger bar and nothing changes
    (every run of `benchmarks.quality`, 78, the same verdicts window by window); the floor is for a loss
    whose draw is as large as its level, such as one that hovers around zero whatever the model's quality,
    where a doubling and the progress floor are nothing: `benchmarks.unseen`'s REINFORCE surrogate
    (centred rewards times log-probabilities) rose from -0.0011 to +0.0005 in windows whose batches
    differed by 0.004, 40 "blew up" verdicts and 10 rollbacks in one run from 10x too low (the rate cut to
    0.001x, the policy dead). A `regressed_start` must beat the start's own standard error the same way,
    on the noise at the level it is tested against: the smaller of this window's spread and the previous
    window's, since a start that blew up spreads its first losses too (the bag-of-words classifier from
    10x too high: first losses of 0, 0.53, 0 and 1.90 against a level of 0.0067, after a window whose first
    losses all sat within 3e-6 of 0), and the replicas are then judged against that level on the same
    noise. 0 turns it off."""
    stuck_spread: float = 0.02
    """A window is dead when its replicas' losses agree within this fraction of their median while each has
    given back over half the run's progress (see the module docstring); 0 turns the rule off. Replayed on
    every stored HDET and no-auto-LR run of the benchmarks (345), it holds in one window of one run, the
    tabular classifier from 10x too high on seed 3, which sat at ln 8 for 16 windows (a 5% spread finds no
    other); run on ten more seeds of that cell, it trains the three that stayed dead (1.251x -> 1.117x of
    the oracle, docs/benchmarks.md). With 0 the rollback snapshot is also refreshed from a sync that gave
    back over half the run's progress, or whose median is above the run's initial loss (on 2 processes the
    digits MLP from 10x too high died over a window that passed before it had learned 5%, and a rollback
    to it left the run at ln 10; the start is kept first and is the better target)."""
    stuck_spread_learned: float | None = 0.04
    """The agreement `stuck_spread` asks of a window that is dead because it had learned and given it back
    (over half the run's progress, or above `stuck_above_best` x its best median), in place of
    `stuck_spread`; a window judged dead at chance after a blow-up without having learned still needs
    `stuck_spread`. A dead network's replicas differ by their shards' data, not by their rates, and a
    shard's data can move the loss by more than 2%: `benchmarks.unseen`'s distilled student from 10x too
    high (seeds 0 to 4) learned from 19.1 to 16.1 in its first window and then sat at 17.5 to 18.6 for the
    rest of the run, each rank at its own level (rank 0 lowest, ranks 1 and 2 highest, whatever rate the
    rotation gave them), 3% to 5% apart: with 2% nothing saw it die on four seeds of five. Chosen before that
    family was written: a scan of the stored runs had found the collapsed post-norm ViT at 3.1% and live
    runs of a matrix factorization at 7.2% to 8.4%, which met the rule through a loss above its first level
    (the condition that keeps `stuck_spread`), so a wider agreement for the two "had learned" conditions
    alone was the lead, at 4%. Replayed on every stored run, the first live run it reaches is the curriculum
    of ever noisier images (a level that rises with the data) at 8%; at 4% it changes 16 of 1,954 runs, all
    from 10x too high and dead at the window it acts, and side by side (docs/benchmarks.md) the distilled
    student from 10x too high ends at 10.5x of the oracle instead of 16.4x (fixed OneCycle 19.5x), two of
    four dead seeds trained; on a fresh seed of all 77 unseen workloads, at the oracle's rate and from 10x too
    high, it changes no verdict. None: `stuck_spread` for every condition."""
    regressed_start: bool = True
    """When the window's starting loss (the converged model's) itself blew up against where the run had got
    to, the lower of the previous window's median and the run's best median (by `blowup_factor` and
    `blowup_progress`), judge the replicas against that level, not against the regressed start: the damage
    came in with the average of windows that excluded replicas, and is not a new level to measure them
    from. Measured: the AdamW MLP from 10x too high (`benchmarks.issue_setting`) lost 3 seeds of 10 that
    way, its loss back up from 0.2 to 1.6-2.0 (chance 2.3) for the rest of the run, with no rollback since
    each window kept a healthy replica; with the rule every replica of such a window fails and the run rolls
    back to the last fully healthy sync (the cell, 10 seeds, 2.98x -> 1.35x of the oracle). Right after a
    rollback the run is where the restored snapshot was, so that level (the median of the window the
    snapshot was kept from) is where it had got to: `benchmarks.unseen`'s ViT from 10x too high on seed 2
    drifted from 0.68 to 1.5 over windows that each passed, the rule rolled it back to the last of them,
    and judged against 0.68 every window from there failed too, three rollbacks in a row and the run
    diverged. False: the reference is the larger of the start and the previous median, whatever the
    start."""
    best_after_exclusion: bool = True
    """`regressed_start` reads the run's best median only while some window since that best left a replica
    out or rolled back (`HealthMemory.unsteady`); where every window since was fully healthy, the start is
    judged against the previous window's median alone. The rule is for damage averaged in from windows that
    excluded replicas; a loss whose level rises over windows in which every replica passed is the data's:
    `benchmarks.unseen`'s digits MLP on a curriculum of ever noisier images (the noise growing over the first
    400 of 500 steps) rose from a best of 0.41 to 0.9 by window 14 with every window fully healthy, each
    window starting where the last had ended, and against that best window 14's replicas "blew up" at 0.96:
    three rollbacks in the anneal's last six windows (seed 3, 10x too high, 2.83x of the oracle; 1.16x with
    the rule), and one or two replicas left out at windows 14 to 17 in five other runs of that family, at
    every start. False: the lower of the previous median and the best, always."""
    restored_measured: bool = True
    """Right after a rollback, the window's starting loss is the restored snapshot's own loss (the first
    step's, on the restored weights). Where it blew up against the level the snapshot was credited with (the
    median of the window it was kept from: `regressed`) and that level fails every replica, the window is
    judged against the snapshot's own loss instead, which is its level from then on: another rollback would
    restore the same state, and so would every one after it. The snapshot is the converged model of a
    healthy window, and averaging replicas that trained apart can land far above every one of them:
    `benchmarks.unseen`'s digits MLP on full batches from 10x too high (seed 2) had replicas at 0.47 to
    1.16 at window 1's end and their average at 13.5; every window from that state fell from 13.5 toward
    0.6 and failed against 0.81, nine rollbacks to the same state with the rate cut each time, and the run
    diverged at 13.4 (0.114 with the rule). Where some replica passes against the credited level, the
    verdict stands (those that fail are left out). False: the credited level stands whatever the restored
    state's loss."""
    stuck_windows: int = 2
    """The stuck rule fails every replica only in the `stuck_windows`-th window in a row that meets it. A dead
    network stays dead (the tabular classifier sat at ln 8 for 16 windows, the 2-process MLP at ln 10 for
    14), while a live one can meet the rule for a window: `benchmarks.unseen`'s residual CNN at its oracle's
    rate spiked from 2.0 back to 2.25 (its first loss 2.4) at the rise's middle, every replica alike, and
    one window later was falling again; acting at once rolled it back and halved its rate (1.76x of the
    oracle on seed 1 with no spread and no controller, fixed OneCycle 1.08x). 1: act at once."""
    replica_learned: bool = True
    """'Had learned' for `stuck_spread` also reads the lowest window loss any healthy replica has had in a
    kept window, not only the converged model's start and the windows' medians. On 2 replicas a window's
    median is its worse replica: the digits MLP from 10x too high on seed 3 (`benchmarks.issue_setting
    --replicas 2`) had one replica at 1.93 (its first loss 2.31) while the other sat at 2.64, then both
    replicas at ln 10 whatever their rates for the rest of the run, and with the medians alone the run never
    counted as having learned, so no check saw it die. Only the stuck rule reads it: one replica's progress
    says the network could learn, and replicas that agree whatever their rates say it no longer answers to
    the rate; the fell-back-to-chance rule, which judges each replica alone, would exclude a slow replica
    that has not yet left its first level beside a faster one. Replayed on the recorded windows of the 354
    stored HDET runs (`python -m benchmarks.replay --stuck '{"replica_learned": false}'`), it changes that
    run alone. False: the medians and the start only."""

    stuck_after_blowup: bool = True
    """A run in which a replica has blown up (its loss, or a non-finite loss or parameter), with no rollback
    restoring an earlier state since, is also stuck when every replica sits at chance or above
    (`chance_loss`, else the run's initial loss, within `chance_tolerance`) whatever its rate, whether or
    not it had learned first. A rate too high can kill a
    network before it learns 5%: under `fanout='local'` the digits MLP from 10x too high (quality benchmark,
    20 windows, seed 1) had one replica blow up in each of windows 1 and 2, each left out, the survivors
    averaged, and from window 3 every replica at ln 10 whatever its rate for the rest of the run, with no
    window that failed every replica and nothing rolled back. A rate merely too low is flat at its first
    loss too, but nothing of it blew up; and after a restore (the state from before the blow-up, the rate
    cut) a slow restart is too, so a restore clears the blow-up. False: only a run that had learned can be
    stuck."""

    rose_above_start: bool = True
    """For `stuck_after_blowup`, a replica also counts as having blown up when, before the run has learned
    (no window median, nor any replica's window loss, `chance_margin` below the run's initial loss), its
    window loss rises above that initial loss by more than `chance_margin`: the untrained network's level
    plus the margin "had learned" uses below it. A rate that leaves a network worse than untrained before
    it has learned anything overshoots; a rate merely too low, flat on the same plateau, does not rise
    above it. `benchmarks.unseen`'s waveforms CNN from 10x too high (seeds 5 and 9) had one or two replicas
    15% to 25% above the first loss in a window of the rise, no replica past 2x, and then every replica at
    the constant guess's ln 6 whatever its rate for the rest of the run, with no rollback. Over every
    recorded run of the benchmarks' results files the stuck verdict it adds holds in those two runs alone
    (docs/benchmarks.md). False: only the blow-ups above count."""
    start_needs_progress: bool = True
    """With the chance level taken from the run itself (`chance_loss=None`), the window's starting loss counts
    as evidence that the run had learned (for the fell-back-to-chance rule, and for the stuck rule's
    `gave_back`, `learned_level`) only once a window median has
    been below the run's initial loss or a replica has blown up (`blown`). The start is one step's loss,
    the mean of the replicas' first batches, and the initial loss is another: on a run that has not moved,
    the two differ by the batches' draw alone. `benchmarks.unseen`'s physics-informed network from 10x too
    low (seed 1; random collocation points, a step's loss 15% either way) started window 1 at 1468 against
    an initial 1732, every window median at or above 1732, and all four replicas were "back at chance": a
    rollback that cut a rate already 10x too low to 0.14x (1.36 against 0.02 to 0.72 on the other seeds);
    the median regression from 10x too low (seed 1; heavy-tailed noise) rolled back the same way at window
    2, and at its oracle's rate (seed 6) left a replica out at window 1. Over every recorded run of the
    benchmarks' results files those are the only windows it changes (docs/benchmarks.md), and the stuck
    rule's replay (`python -m benchmarks.replay --stuck '{}'`) repeats every recorded stuck verdict of the
    991 stored runs. False: the start always counts."""
    progress_all_replicas: bool = True
    """With `start_needs_progress`, a kept window counts as the run having moved only where every healthy
    replica's window loss in it is below the run's initial loss (`HealthMemory.best_clear`), not merely its
    median. On a flat run with a noisy loss the replicas' window means scatter around the plateau, and a
    median dips a few percent below the first step's loss by the draw: `benchmarks.unseen`'s deep linear
    network from 10x too low (seed 3) had window 1's median 2% below its initial 1.38 with one replica 3%
    above it, window 2 started 11% below by the draw, and every replica was "back at chance" in three
    windows of four: three rollbacks cut a rate already 10x too low to 0.025x, and the run never left its
    first plateau (1.35 against fixed OneCycle's 0.031). The digits MLP from 10x too high, the rescue the
    start is kept for, had all four replicas of window 0 below its initial loss. With two replicas the
    median is the higher one, so nothing changes there. False: any median below. The window's start and a
    blow-up count as before."""
    stuck_above_best: float | None = 1.25
    """A window is also dead when its replicas' losses agree within `stuck_spread` whatever their rates while
    their median is above this multiple of the run's best window median (judged on the difference, so a
    negative loss reads right; the rise must also give back over 5% of the run's progress from its initial
    loss, so a doubling near zero loss is not it), and such a window is no rollback target. The network
    has left where it had got to and no rate of the spread moves it: `benchmarks.unseen`'s autoencoder
    from 10x too high (seeds 0 and 4) had its loss rise in the rise, then every replica sat at the loss of
    the training images' mean (0.073, the run's best 0.050, its first loss 0.25) for the rest of the run,
    below the first loss that the other stuck rules read as chance; a rollback to the last kept state
    restored the plateau, so a window this far above the best is not kept as the target either. Over the
    1,390 recorded HDET runs the stuck condition (two windows in a row) holds in those runs alone; side by
    side from 10x too high on 11 cells x 5 seeds (`benchmarks/results/full/stuck_above_best_runs.jsonl`)
    the rule changed 5 runs of 55, each for the better (the autoencoder's two dead seeds 4.29x -> 1.60x
    and 1.92x of the oracle, the rest through an earlier rollback target). The factor was not tuned. None:
    off."""

    def __post_init__(self) -> None:
        if self.stuck_above_best is not None and not self.stuck_above_best > 1.0:
            raise ValueError(
                f"HealthConfig.stuck_above_best must be > 1 or None, got {self.stuck_above_best}"
            )
        if not self.blowup_factor > 1.0:
            raise ValueError(f"HealthConfig.blowup_factor must be > 1, got {self.blowup_factor}")
        if self.chance_loss is not None and not self.chance_loss > 0:
            raise ValueError(f"HealthConfig.chance_loss must be > 0, got {self.chance_loss}")
        if not 0.0 <= self.chance_tolerance < 1.0:
            raise ValueError(f"HealthConfig.chance_tolerance must be in [0, 1), got {self.chance_tolerance}")
        if not 0.0 <= self.chance_margin < 1.0:
            raise ValueError(f"HealthConfig.chance_margin must be in [0, 1), got {self.chance_margin}")
        if self.stuck_windows < 1:
            raise ValueError(f"HealthConfig.stuck_windows must be >= 1, got {self.stuck_windows}")
        if not 0.0 <= self.stuck_spread < 1.0:
            raise ValueError(f"HealthConfig.stuck_spread must be in [0, 1), got {self.stuck_spread}")
        learned = self.stuck_spread_learned
        if learned is not None and not 0.0 <= learned < 1.0:
            raise ValueError(f"HealthConfig.stuck_spread_learned must be in [0, 1) or None, got {learned}")
        if not (self.blowup_noise >= 0.0 and math.isfinite(self.blowup_noise)):
            raise ValueError(f"HealthConfig.blowup_noise must be finite and >= 0, got {self.blowup_noise}")
        if not 0.0 <= self.blowup_progress <= 1.0:
            raise ValueError(f"HealthConfig.blowup_progress must be in [0, 1], got {self.blowup_progress}")


@dataclass(frozen=True, slots=True)
class ReplicaStats:
    """What one rank accumulated over a window (read once, at the sync)."""

    mean_loss: float
    first_loss: float
    tail_loss: float
    min_loss: float
    params_finite: bool
    count: int
    slope: float = math.nan
    """-cos(gradient at the window's last step, the window's step so far): > 0, a higher rate would have
    gone further (NaN where not measured)."""


def start_loss(stats: Sequence[ReplicaStats]) -> float:
    firsts = [s.first_loss for s in stats if math.isfinite(s.first_loss)]
    return sum(firsts) / len(firsts) if firsts else math.nan


def first_noise(stats: Sequence[ReplicaStats]) -> float:
    """The standard deviation of the replicas' first losses in the window (0 with fewer than two): every
    replica starts the window from the same converged weights, so their first losses differ by their
    batches alone, one step before any replica's rate has acted. A replica that blows up later in the
    window does not inflate it, which a spread of its own window's losses would."""
    firsts = [s.first_loss for s in stats if math.isfinite(s.first_loss)]
    return statistics.stdev(firsts) if len(firsts) > 1 else 0.0


def assess(
    stats: Sequence[ReplicaStats],
    config: HealthConfig,
    previous: float = math.nan,
    best: float = math.nan,
    initial: float = math.nan,
    best_replica: float = math.nan,
    restored: float = math.nan,
    stuck_before: int = 0,
    blown: bool = False,
    clear: float = math.nan,
    unsteady: bool = True,
    level_noise: float = math.nan,
) -> tuple[list[bool], dict[int, str]]:
    """(healthy flag per replica, reason per unhealthy replica).

    `previous`: the last converged window's median loss; `best`: the lowest such median of the run;
    `initial`: the run's first window's starting loss (NaN: this is the first window, use its own start);
    `best_replica`: the lowest window loss of any healthy replica in the run's earlier windows;
    `restored`: after a rollback, the level of the state it restored (NaN: the last sync did not roll back);
    `stuck_before`: how many windows in a row before this one met the stuck rule (`stuck_windows`);
    `blown`: a replica blew up in an earlier window of the run (`stuck_after_blowup`);
    `clear`: the lowest, over kept windows, of the highest healthy replica loss (`progress_all_replicas`;
    NaN: not known, the medians alone say whether the run has moved);
    `unsteady`: a window since the run's best left a replica out or rolled back (`best_after_exclusion`);
    `level_noise`: the previous window's `first_noise` (NaN: not known). Whether the start regressed from
    the level the run had got to is judged on the noise there, the smaller of this and the window's own: a
    start that blew up spreads its first losses too (one batch lands on the damage, another not), and a
    spread taken from the damaged weights would excuse the damage itself.
    """
    first = start_loss(stats)
    noise = first_noise(stats)
    level_noise = min(noise, level_noise) if math.isfinite(level_noise) else noise
    starts = sum(1 for s in stats if math.isfinite(s.first_loss))  # the start is their mean
    start_error = level_noise / math.sqrt(starts) if starts else 0.0
    reference = first
    if not math.isfinite(initial):
        initial = first
    if math.isfinite(previous):
        reference = max(first, previous) if math.isfinite(first) else previous
        reads_best = math.isfinite(best) and (unsteady or not config.best_after_exclusion)
        level = min(previous, best) if reads_best else previous  # where the run had got to
        if math.isfinite(restored):
            level = restored  # a rollback put it back there
        if config.regressed_start and regressed(first, level, initial, config, start_error):
            reference = level
            noise = level_noise  # the replicas are judged against that level, on its noise
    chance = config.chance_loss if config.chance_loss is not None else initial
    # with chance taken from the run itself, "had learned" is judged on window means only: one batch's loss
    # (a replica's window minimum) can dip 10% below the first window's level by noise alone
    trust_minimum = config.chance_loss is not None
    lowest = learned_level(first, previous, best, initial, blown, config, trust_minimum, clear)
    floor = 0.0
    if math.isfinite(initial) and math.isfinite(reference):
        floor = config.blowup_progress * max(initial - reference, 0.0)
    # a rise within the batches' draw is no blow-up: the start is a mean of one batch per replica, a level
    # the run had got to (a median of window means) counts as exact
    start_var = 1.0 / starts if reference == first and starts else 0.0
    healthy: list[bool] = []
    reasons: dict[int, str] = {}
    for r, s in enumerate(stats):
        own = config.blowup_noise * noise * math.sqrt(1.0 / max(s.count // 2, 1) + start_var)
        reason = _reason(s, reference, lowest, max(floor, own), chance, trust_minimum, config)
        healthy.append(reason is None)
        if reason is not None:
            reasons[r] = reason
    if all(healthy):
        reason = stuck(stats, config, previous, best, initial, best_replica, blown, clear)
        if reason is not None and stuck_before + 1 >= config.stuck_windows:
            return [False] * len(stats), dict.fromkeys(range(len(stats)), reason)
    return healthy, reasons


def stuck(
    stats: Sequence[ReplicaStats],
    config: HealthConfig,
    previous: float = math.nan,
    best: float = math.nan,
    initial: float = math.nan,
    best_replica: float = math.nan,
    blown: bool = False,
    clear: float = math.nan,
) -> str | None:
    """The reason every replica fails when the window is dead (`stuck_spread`), else None; `assess` asks it
    once every replica has passed the other rules. It reads the replicas' window means only."""
    first = start_loss(stats)
    if not math.isfinite(initial):
        initial = first
    lowest = learned_level(
        first, previous, best, initial, blown, config, config.chance_loss is not None, clear
    )
    if config.replica_learned and best_replica < lowest:
        lowest = best_replica
    chance = math.nan
    if blown and config.stuck_after_blowup:
        chance = config.chance_loss if config.chance_loss is not None else initial
    run_best = min((x for x in (previous, best) if math.isfinite(x)), default=math.nan)
    return _stuck(stats, lowest, initial, config, chance, run_best)


def learned_level(
    first: float,
    previous: float,
    best: float,
    initial: float,
    blown: bool,
    config: HealthConfig,
    trust_start: bool = False,
    clear: float = math.nan,
) -> float:
    """The lowest loss the run is known to have reached, for "had learned": the previous and best window
    medians, and the window's starting loss `first` once the run has moved below `initial` (a kept window
    with every healthy replica below it, `clear`, with `progress_all_replicas`; else a median) or a replica
    has blown up (`start_needs_progress`; `trust_start`: always, as with a chance level the user named). The
    start is one step's loss: on a run that has not moved it differs from the initial loss by a draw."""
    medians = [x for x in (previous, best) if math.isfinite(x)]
    below = [clear] if config.progress_all_replicas and not math.isnan(clear) else medians
    moved = blown or (math.isfinite(initial) and any(x < initial for x in below))
    start = first if trust_start or moved or not config.start_needs_progress else math.nan
    return min((x for x in (start, *medians) if math.isfinite(x)), default=math.inf)


def left_best(loss: float, best: float, config: HealthConfig, initial: float = math.nan) -> bool:
    """Whether `loss` is above the run's best window median by more than `stuck_above_best` allows (judged
    on the difference: (factor - 1) x |best|) and, given the run's `initial` loss, by more than
    `_LEFT_BEST_PROGRESS` of the progress from it to `best`; False when the rule is off or nothing is known
    yet. The stuck rule, which acts, passes `initial`: near zero loss a rise from 1e-4 to 2e-4 doubles the
    loss and gives back 0.005% of the progress from 2.3, noise rather than a network that left its best.
    The rollback target's choice does not: refusing such a window only keeps an earlier state as the
    target (over the recorded runs the floor would move one rollback's target, of 266)."""
    factor = config.stuck_above_best
    if factor is None or not (math.isfinite(loss) and math.isfinite(best)):
        return False
    rise = loss - best
    progress = max(initial - best, 0.0) if math.isfinite(initial) else 0.0
    return rise > (factor - 1.0) * abs(best) and rise > _LEFT_BEST_PROGRESS * progress


_LEFT_BEST_PROGRESS = 0.05
"""`left_best`'s floor: the share of the run's progress a rise must give back (the autoencoder's plateau gave
back 12%: 0.050 -> 0.074 of 0.25 -> 0.050)."""


BLEW_UP = "loss blew up"
NON_FINITE = "non-finite"
"""How `_reason` begins the reasons that are blow-ups (`blew_up` reads them back: one place for both)."""


def regressed(first: float, level: float, initial: float, config: HealthConfig, error: float = 0.0) -> bool:
    """Whether a window's starting loss `first` blew up against `level`, where the run had got to: above it
    by `blowup_factor`, giving back at least `blowup_progress` of the progress from `initial` to it, and
    rising more than `blowup_noise` x `error`, the start's standard error (`first_noise` over the root of
    the replicas; 0: not judged)."""
    floor = max(config.blowup_progress * max(initial - level, 0.0), config.blowup_noise * error)
    return math.isfinite(first) and above(first, level, config.blowup_factor) and first - level > floor


def above(loss: float, reference: float, factor: float) -> bool:
    """Whether `loss` is above `factor` x `reference`, judged on the distance from zero: it rose above the
    reference by more than (factor - 1) x |reference|. For a positive reference the same as loss > factor x
    reference; for one at or below zero (a log-density, which a Gaussian negative log-likelihood reaches) a
    rise to 2 x -0.5 = -1.0 would be no rise at all, and is judged by its size instead."""
    return loss - reference > (factor - 1.0) * abs(reference)


def blew_up(reason: str) -> bool:
    """Whether an unhealthy replica's reason (as `assess` gives it) is a blow-up: its loss, or a non-finite
    loss or parameter; not a fall back to chance nor the stuck rule."""
    return reason.startswith((BLEW_UP, NON_FINITE))


def gave_back(loss: float, lowest: float, initial: float) -> bool:
    """True when the run had learned (`lowest` below `initial` by over 5% of its size) and `loss` has given
    back over half of that progress. Such a state is no rollback target either: the snapshot is not
    refreshed from it."""
    if not (math.isfinite(loss) and math.isfinite(lowest) and math.isfinite(initial)):
        return False
    progress = initial - lowest  # judged on the difference, so a loss below zero (a log-density) reads right
    return progress > _LEARNED * abs(initial) and loss - lowest > 0.5 * progress


_LEARNED = 0.05
"""'Had learned' for `gave_back`: below the initial loss by this fraction. With no margin a slow start at a
too-low rate (flat, and a hair above its first window by noise) counts as stuck: the held-out MLP from 10x
too low at 150 windows, window 2."""


def _stuck(
    stats: Sequence[ReplicaStats],
    lowest: float,
    initial: float,
    config: HealthConfig,
    chance: float = math.nan,
    run_best: float = math.nan,
) -> str | None:
    """The reason every replica fails when the window is dead (`stuck_spread`), else None. `chance`: where
    a run in which a replica blew up counts as dead (`stuck_after_blowup`; NaN: not judged that way);
    `run_best`: the run's best window median (`stuck_above_best`; NaN: not judged that way)."""
    losses = [s.mean_loss for s in stats if s.count and math.isfinite(s.mean_loss)]
    if config.stuck_spread <= 0 or len(losses) < 2 or len(losses) < len(stats):
        return None
    median = statistics.median_high(losses)
    spread = max(losses) - min(losses)
    learned = config.stuck_spread if config.stuck_spread_learned is None else config.stuck_spread_learned
    agree = spread < config.stuck_spread * abs(median)  # for a run that never learned
    agree_learned = spread < learned * abs(median)  # for one that had learned and gave it back
    if agree_learned and gave_back(min(losses), lowest, initial):
        return (
            f"stuck: every replica at {median:.4g} whatever its rate, above the run's best {lowest:.4g} "
            f"by over half its progress from {initial:.4g}"
        )
    if agree and math.isfinite(chance) and min(losses) >= chance - config.chance_tolerance * abs(chance):
        return (
            f"stuck: every replica at {median:.4g} whatever its rate, at chance {chance:.4g} or above "
            "after a replica blew up"
        )
    if agree_learned and left_best(min(losses), run_best, config, initial):
        return (
            f"stuck: every replica at {median:.4g} whatever its rate, above {config.stuck_above_best:g} x "
            f"the run's best {run_best:.4g}"
        )
    return None


def _reason(
    s: ReplicaStats,
    reference: float,
    lowest: float,
    floor: float,
    chance: float | None,
    trust_minimum: bool,
    config: HealthConfig,
) -> str | None:
    if not s.params_finite:
        return f"{NON_FINITE} parameters"
    if s.count == 0:
        return None  # no loss reported: judged on parameters alone
    if not (math.isfinite(s.mean_loss) and math.isfinite(s.tail_loss)):
        return f"{NON_FINITE} loss"
    # the more telling reason first: a learned network back at chance has usually blown up as well
    if chance is not None and math.isfinite(chance) and chance > 0:
        own_minimum = s.min_loss if trust_minimum else math.inf
        learned = min(own_minimum, lowest) < chance * (1 - config.chance_margin)
        at_chance = s.tail_loss >= chance * (1 - config.chance_tolerance)  # at chance, or worse
        if learned and at_chance:
            return f"fell back to chance (loss {s.tail_loss:.4g} ~ {chance:.4g})"
    worst = max(s.tail_loss, s.mean_loss)
    if (
        math.isfinite(reference)
        and above(worst, reference, config.blowup_factor)
        and worst - reference > floor
    ):
        if reference > 0:
            return f"{BLEW_UP} ({worst:.4g} > {config.blowup_factor:g} x reference {reference:.4g})"
        return f"{BLEW_UP} ({worst:.4g}, {worst - reference:.4g} above reference {reference:.4g})"
    return None
