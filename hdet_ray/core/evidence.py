"""The evidence controller, the default: it moves the rate only on evidence that beats the window-to-window
noise, against the schedule's short-horizon bias, and holds otherwise (`EvidenceController`'s docstring has
the test; each `EvidenceConfig` field says what its rule is for and what it was measured against).

One window's decision, per hyperparameter, reads in four steps (`EvidenceController._move`):
1. the window's loss as the run sees it (`read_trend`, a pure function: its level, the stall tests, the fit
   floor), shared by every hyperparameter;
2. the schedule's phase (`_Books.track`) and this window's evidence, pooled over recent windows into z
   (`_pool`);
3. the gates that hold a move the evidence asks for, each with the reason it gives (`_gate`);
4. the move itself, its step doubling over a run of moves (`_step`), or the hold.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace

from hdet_ray.core.frame import (
    Controller,
    ControllerConfig,
    ControllerState,
    ParamWindow,
    Window,
    clamp,
    rank_correlation,
    sign,
)

SIGNALS = ("hypergradient", "rank")


@dataclass(frozen=True, kw_only=True, slots=True)
class EvidenceConfig(ControllerConfig):
    """Move on evidence that beats the noise, against the schedule's bias, with a sign-adaptive step."""

    z_threshold: float = 2.0
    """Move when |z| of the pooled rank correlations reaches this (one-sided ~2% false moves per window)."""
    evidence_windows: int = 4
    """Pool at most this many recent windows (since the last change of direction, phase or rollback)."""
    step_size: float = 0.25
    """The first move's size (log units for log-scale hyperparameters: 0.25 is x1.28)."""
    max_step: float = 0.75
    """Moves up double while they keep one direction, up to this (0.25, 0.5, 0.75, 0.75: 9.5x in 4 moves). A
    run of moves up ends at the first window that disagrees, so it overshoots by one step at most."""
    max_step_down: float = 0.5
    """The same for moves down, which start afresh (see `continue_up`) and so cannot end themselves: at and
    above its best rate the hypergradient of some workloads (the benchmark's byte LM) keeps saying "lower"
    (at 60 windows, 0.75 down cost the LM 0.006 at its oracle's rate and 0.011 from 10x too high, 3 seeds;
    1.0 overshot by 2x after a rollback on the benchmark's MLP)."""
    bias_aware: bool = True
    """Never move the way the schedule's short-horizon bias pushes on healthy windows (see the class)."""
    stall_ratio: float | None = 0.5
    """A move down on healthy windows needs the run to have stalled: the median loss at least this fraction
    of its value `evidence_windows` windows earlier (so no such move in the first evidence_windows + 1
    windows). While the loss still falls fast (it halved), the replicas below the edge of stability look
    better than those at it, and the final result still prefers the edge. A window with a healthy loss at
    or below zero (a log-density's) has no such ratio: the run counts as not stalled there, and its stall
    test starts afresh once the loss is positive again. None: no stall test."""
    down_stall_ratio: float | None = None
    """A stricter stall test for moves down only (None: `stall_ratio`): a move down on healthy windows also
    needs the median loss at least this fraction of its value `evidence_windows` windows earlier. Climbs
    keep their own tests (`stall_ratio` in the first windows, then `climb_stall_ratio`). Measured at 0.75 and
    not adopted: it holds the move down that cost the benchmark's LM at its best rate on 8 processes (1.030x
    -> 1.017x) and the CNN's moves down from 10x too high (at 60 windows 0.947x -> 1.676x on the two seeds it
    changes; docs/benchmarks.md). With `stall_ratio` 0.25 and this 0.5 the climb alone gets a looser test,
    measured and not adopted: from 10x too low it reaches further on 13 of the 16 cells it changes, and at
    their best rates two fine-tunes climb while their new heads learn and end 1.6% and 3.1% behind
    (docs/benchmarks.md)."""
    climb_stall_ratio: float | None = 0.25
    """The climb's own stall test once the run has `evidence_windows` + 1 windows (None: `stall_ratio`):
    a move up in the rise needs the median loss at least this fraction of its value `evidence_windows`
    windows earlier. The scaled test of the first windows (`earliest_climb`) keeps `stall_ratio`, so a
    fine-tune's new head, which learns fast in those windows, is read as before (a looser test there cost
    two fine-tunes 1.6% and 3.1% at their best rate). Of the 14 stored runs 0.25 changes in the benchmarks'
    tables, 13 end better (the BatchNorm CNN at 60 windows from 10x too low 1.061x -> 0.975x of the oracle)
    and one worse at its best rate (an unseen deep MLP, seed 0, 0.820x -> 1.040x); on fresh seeds it changes
    6 runs of 40, 4 for the better (docs/benchmarks.md). None: `stall_ratio` throughout."""
    climb_when_stalled: bool = True
    """While the schedule rises, a move up on healthy windows is allowed once the run has stalled (the stall
    test above, on windows after the first, whose loss is the initialisation's transient). A rate that is
    right or high learns fast in the rise, and there the higher replicas' lead is the horizon's bias; a run
    whose loss barely falls while the higher replicas keep winning is too low. Needs `stall_ratio`."""
    earliest_climb: int = 3
    """The first window (0-based) at which the climb may act. Before `evidence_windows` + 1 windows its stall
    test reads the windows after the first (whose loss is the initialisation's transient), with
    `stall_ratio` scaled to their number: at window 3, two windows' fall must stay above 0.5**(2/4) = 0.71.
    A 20-window run has 6 windows in its rise, so at `evidence_windows` + 1 (5, the old rule) it could not
    climb in the rise at all; 3 is the first window at which a pool of 4 signs is full."""
    climb_from: float | None = 0.5
    """The climb above waits until the schedule's base is at least this fraction of its peak
    (`ParamWindow.peak`; where the peak is not known it does not wait). Before that the base is low by the
    warm-up's design, so a lead for higher rates says the warm-up rate is low, not the peak: at 150 windows
    the benchmark's LM, started at its oracle's rate, climbed to 4.5x in windows 5 to 7 (base 8% to 11% of its
    peak) and ended 15% worse. None: no wait."""
    signal: str = "hypergradient"
    """The rate's evidence (`rollback_param`'s): 'hypergradient', the sign of -cos(g, step), the gradient at
    the window's last step against the window's step so far (> 0: the step fell short of where the loss
    along it stops falling), measured by the engine on the gradient every replica applies; pooled as a sign
    test, z = sum(signs) / sqrt(k), so a move needs `evidence_windows` agreeing windows. 'rank': Spearman's
    rho of the replicas' window losses. A window without a measured hypergradient uses rank, and other
    hyperparameters always do."""
    continue_up: bool = True
    """After a move up on the hypergradient its pooled signs are kept, so the next window that agrees moves
    again, the step doubling to `max_step` (a sign-adaptive step, as in Rprop): a rate too low says so in
    every window, and crosses 10x in 5 windows instead of 20. A move up that overshoots turns the sign (or
    fails its top replica, `canary_ends_climb`) and the run of moves ends there. Moves down start afresh:
    at and above its best rate the hypergradient of some workloads (the benchmark's byte LM) keeps saying
    "lower", and a kept pool walks such a rate down one window at a time. Once the rate has come down (a
    move down or a rollback), an edge was found above it, and moves up start afresh too (the benchmark's
    BatchNorm CNN from 10x too high came down in the rise, then a kept pool took it to 33x its start in the
    anneal)."""
    run_through_bias: bool = True
    """A run of moves up that `continue_up` keeps going is not held by the schedule's bias or the stall test:
    those gate the run's first move, and once a rate too low has moved, its loss falling fast is the move's
    own effect, not the horizon's pull (on the benchmark's MLP from 10x too low, the run stopped at 4.5x as
    the loss fell from 2.0 to 0.6 in one window, while the hypergradient still said "higher")."""
    carry_into_anneal: bool = True
    """At the rise's end, a pool of hypergradient signs that points up is kept instead of started afresh. In
    the rise such evidence cannot be told from the schedule's bias, but in the anneal the bias points down,
    so an anneal window that also says "higher" beats it, and a rate too low moves at the anneal's first
    window rather than its fourth (20 windows have 6 in the rise: a rate 10x too low waited 3 of them)."""
    low_start_holds_down: bool = True
    """A rate whose first full pool of hypergradient signs said "higher" in every window started at or below
    its best: a later "lower" on healthy windows is then the horizon's greedy bias (at and near its best
    rate the benchmark's byte LM says "lower" in most anneal windows), and holds. Moves down on windows that
    excluded a replica, after a rate has come down (a move down or a rollback), and for a rate whose first
    pool did not say "higher" throughout (from 10x too high it says "lower" from the first windows on every
    benchmark workload) are kept."""
    mixed_start_holds_down: bool = False
    """With `low_start_holds_down`, a first pool that was mixed (neither "higher" nor "lower" throughout)
    holds later moves down on healthy windows too: only a first pool of "lower" throughout keeps them.
    Measured, not adopted: at the oracle's rate a first pool is often mixed by one sign near zero (the
    clipped byte LM, `++--`), and so is one from 10x too high (the BatchNorm CNN `+---`, first sign +0.01),
    where the move down it holds is the rescue: at 500 steps the LM with a clip at its best rate 1.006x ->
    0.998x of the oracle, but from 10x too high the LM at 60 windows 1.028x -> 1.350x and the BatchNorm CNN
    2.019x -> 2.427x, 5 seeds (docs/benchmarks.md, `low_start_holds_down`'s entry)."""
    mixed_start_holds_falling: bool = True
    """With `low_start_holds_down`, a first pool that was mixed (neither "higher" nor "lower" throughout)
    holds a later move down on healthy windows while the median healthy loss has fallen in every window of
    the stall test's span since the first: a rate at or near its best turns from "higher" to "lower" as the
    warm-up raises it (the horizon's greedy bias) while its loss still falls window after window; a rate
    past the edge shows a window that rose (a spike, a plateau), and its move down is kept. At the best
    rates of a denoiser, a VAE, an LSTM, a contrastive encoder and the byte LMs (with and without a clip)
    the first pool is `++--` or `-+--` and the one move down, x0.78 at window 5, cost 0.2% to 2%; from 10x
    too high the BatchNorm CNN, the fine-tunes and a deep MLP say the same but their loss rose in the rise.
    Side by side on the 50 runs it changes, 44 at an oracle's rate: better on 38, within 0.1% on 4, worse
    on 2 (a spiral MLP's seed 15%, a contrastive encoder's 0.7%); from 10x too high a classifier on noisy
    labels 0.8% to 2.6% worse on 3 seeds (docs/benchmarks.md). False: such moves are kept."""
    late_anneal: float | None = 0.5
    """Late in the anneal, once the schedule's base is below this fraction of its peak so far, the
    hypergradient is no evidence (held): the schedule shrinks every step there by design, so steps fall short
    of where the loss along them stops falling whatever the rate. None: it is read to the end."""
    late_anneal_steps: float | None = 0.5
    """With `late_anneal`: late also needs this fraction of the anneal's steps (from the window that set the
    peak to the run's end) to have passed. Under OneCycle's default two phases, cosine or linear, the base is
    at half its peak half way through the anneal, so at 0.5 the two agree (no stored run of the default
    shape changes: `python -m benchmarks.replay '{"late_anneal_steps": null}'`); a three-phase schedule
    (`three_phase=True`) is below half its peak a quarter of the way through its anneal (window 9 of 20 in
    the issue's setting), where the BatchNorm CNN from 10x too low was still climbing on every seed: held
    there, it ended at 1.80x to 1.90x of the oracle; read on, at 1.34x to 1.38x, better on all 10 seeds, and
    no other cell of that shape changed (docs/benchmarks.md, "Other OneCycle shapes"). None: the base alone
    decides."""
    high_start_runs_down: bool = True
    """A rate whose first full pool of hypergradient signs said "lower" in every window is read as too high
    (with `run_down_on_plateau`, only where its loss has stopped falling): it moves down at once, without the
    stall test, and while the schedule rises it keeps its pool as long as the pool still holds a window of
    that first one, so each window that agrees moves again, the step doubling to `max_step_down` (at most 4
    moves, x0.17, by window 2 * (`evidence_windows` - 1); the first window that says "higher" ends the run).
    The first pool is gathered in the warm-up, where the rate is a small fraction of its peak: a rate 10x too
    high can already say "lower" there (the benchmark's byte LM), does its damage by the schedule's peak, and
    a fresh pool at a time moves at most twice in a 20-window run's 6-window rise. Later pools are not read
    this way: at its best rate the LM says "lower" through most of its rise."""
    run_down_on_plateau: bool = True
    """With `high_start_runs_down`: the run down starts only at the window that completes the first pool,
    and each of its moves needs that window's median healthy loss at or above the previous window's. The
    signs alone cannot tell a rate too high from a good one: at the best rate of a regression under Adam, a
    classifier with dropout, an LSTM and an MLP on spiral data the first pool said "lower" throughout too,
    and running down on the signs alone (False, the rule until 2026-12-05) cost up to 14% there. What tells
    them apart is the loss in the warm-up, where the rate rises every window: at a good rate it still falls,
    past the edge of stability it has stopped (the byte LM from 10x too high: 2.55 -> 2.80 at window 3).
    Replayed on the 555 stored benchmark runs it changes none at the oracle's rate or from 10x too low (on
    the twenty-seed files, one: a classifier with dropout, 0.5%); of the 31 from 10x too high it changes, 26
    end better than with no run down (the byte LM 0.81x-0.89x of it on 2, 4 and 8 processes; on five fresh
    seeds 0.879x of fixed OneCycle against 0.974x; docs/benchmarks.md)."""
    first_pool_skips_first_higher: bool = True
    """A first pool of hypergradient signs that is mixed only because its first window said "higher" waits
    one window and is judged on the windows after the first, so a rate too high whose later windows all say
    "lower" can still run down (`high_start_runs_down`, with `run_down_on_plateau` from the window that
    completes that later pool). The run's first window is the initialisation's transient, where a longer step
    lowers the loss at almost any rate (the climb's stall test skips it for the same reason): from 10x too
    high a BatchNorm CNN, a ViT, a GCN and a fine-tune's new head all say "higher" there and "lower" after.
    Replayed on the stored benchmark runs it changes 16 of 570 (none from 10x too low), and 47 runs of the
    side-by-side files; all re-made (2026-12-05): from 10x too high the issue-setting CNN 2.170x -> 1.848x
    of the oracle, the quality CNN at 20 windows 1.379x -> 1.275x, a GCN 1.066x -> 1.043x (ahead on 9 of 9
    seeds), a deep MLP 2.555x -> 2.290x, a ViT 5.636x -> 5.472x, a GRU 1.173x -> 1.164x; at the oracle's
    rate the AdamW MLP with a user's clip moves down once on 8 of 40 seeds (the loss rose at window 4), its
    forty seeds 1.106x -> 1.055x of fixed OneCycle, and the issue's AdamW MLP 1.240x -> 1.158x
    (docs/benchmarks.md). False: the first pool is judged on the run's first windows, as they are."""
    run_down_starts_late: bool = False
    """With `run_down_on_plateau`: the run down may start at any window of the rise up to window
    2 * (`evidence_windows` - 1) whose loss did not fall, not only at the one that completes the first pool.
    Measured, not adopted (2026-12-05): the 17 stored runs and 30 side-file runs it changes re-made (42
    runs, `benchmarks/results/full/late_start_runs.jsonl` and `late_start_clip_runs.jsonl`), geometric mean
    0.900x of the default's, with the rescues from 10x too high better (the BatchNorm CNN at 60 windows
    0.63x on 5 of 20 seeds, the LMs about 0.975x, an autoencoder 0.71x) but at the oracle's rate the
    regression worse on 4 seeds of 4 (1.028x) and the AdamW MLP with a clip better on only 4 of 9
    (docs/benchmarks.md). False: only from the window that completes the first pool."""
    run_down_on_new_high: bool = True
    """With `run_down_on_plateau`: the run down may also start at a later window of the rise, up to window
    2 * (`evidence_windows` - 1), whose median healthy loss is the highest since the run's first window (the
    initialisation's transient, not compared where every window so far was healthy): the run has given back
    what it learned since then while its
    rate rose. A good rate's loss can wobble up once in the warm-up too (which is why `run_down_starts_late`,
    any window that did not fall, ran a regression down at its best rate), but not back above every window
    since the first: of the 34 stored runs at an oracle's rate whose first pool said "lower" throughout, none
    did at windows 4 to 6 (at most 0.98x of the highest), while 44 of 93 such runs from 10x too high did
    (the byte LM at 20 windows 1.07x: its first pool ends at window 3 with the loss still falling 3%, and
    window 4 jumps 11% as the schedule nears its peak). Replayed on the 1,523 stored runs it changes 7, all
    from 10x too high; side by side on this machine (2026-12-07) every run it changes ends better: the LM at
    20 windows 0.97x and 0.99x, in the issue's setting 0.96x (0.98x on 8 processes), the SGD CNN 0.90x; on
    155 fresh runs it changes none of the 75 at the oracle's rate of fifteen workloads (those whose first
    pool says "lower", and those harmed there) and 7 of the 80 from 10x too high, 6 better (the LM at 20
    windows 0.95x-0.96x on 3 seeds of 10; one worse, 1.11x, where a blow-up's rollback it averted would
    have cut the rate further; docs/benchmarks.md). False: only from the window that completes the first
    pool."""
    rise_rollback: float | None = 1.1
    """Roll back a window of the rise (the schedule's base went up) in which every replica stayed healthy but
    the median loss rose to at least this multiple of the lowest since the run's first window, giving back at
    least `rise_giveback` of what the run had learned since that first window: the rate the schedule raised
    undid the run's progress, so the window is undone and the rate cut as for a failed window (`rollback_cut`
    x the lowest replica's, ahead of the rise). It acts before any rollback or restart only (what the run had
    learned is not known after one). A rate 10x too high for an Adam-family network climbs into such a window
    in the warm-up before its first pool of evidence is full, and the damage stays (its loss sat at the risen
    level for the rest of the run while the rate came down): side by side on the 55 stored table runs it
    changes (53 from 10x too high, 2 at an oracle's rate, none from 10x too low), the issue setting's LM from
    10x too high 1.60x -> 1.09x of the oracle (on 2 and 8 processes 1.42x -> 1.09x, 1.63x -> 1.07x), a
    post-norm ViT 10.5x -> 2.3x; 40 better, 9 level, 6 worse (docs/benchmarks.md, "Adopted 2026-12-07: a
    window of the rise that undid what the run had learned rolls back"). Left out: a window that excluded a
    replica (health has judged it; at their best rates the mixture of experts and the surface fit blow up one
    replica in the rise and recover at the full rate: 1.13x and 1.17x when it rolled back too). None: no such
    rollback."""
    rise_giveback: float = 0.2
    """With `rise_rollback`: the fraction of the run's progress (its first window's median loss less the
    lowest since) the window must give back, so a wiggle on a loss near its floor never counts. 0.2 since
    2026-12-07 (0.3 before): of the stored runs it changes none at an oracle's rate or from 10x too low, and
    side by side the 12 table runs it changes (all from 10x too high) end at 0.72x of the loss with 0.3
    (geometric mean; 9 better, 1 level, 2 worse: the quality LM at 20 windows 0.89x, seed 0, which gave back
    25%), and of 90 fresh runs at an oracle's rate and from 10x too high it changes 6, 4 better (one at an
    oracle's rate, a network trained on two images a step that had climbed to 7.4x its rate in the rise:
    0.69x); on a fresh seed of the 53 unseen families it fires at none of their best rates and on 7 from
    10x too high (5 better, 2 within 1%); docs/benchmarks.md, "Adopted 2026-12-07: the rise rollback at a
    fifth given back"."""
    canary_ends_climb: bool = True
    """No move up of the rate on a window that excluded its top replica (the highest rate) as unhealthy:
    the run of moves up ends there and its pool starts afresh. The spread's top replica is the canary that
    fails first as the rate nears the edge, and a move up would put the centre where it failed, while the
    hypergradient, measured on the gradient every healthy replica applies, can still say "higher" (near
    zero: +0.0003). `benchmarks.unseen`'s waveforms CNN at its oracle's rate (seed 0) climbed in the rise
    from the plateau of its first windows, its top replica fell back to the first loss at 1.65x, and two
    more moves took it to 7.4x before every replica failed: 1.21x of the oracle, 1.08x with the rule. Of
    the 465 stored benchmark runs and the 205 runs of the twenty- and forty-seed files it changes that run
    alone (docs/benchmarks.md). False: a failed top replica does not end a run of moves up."""
    fit_floor: float | None = 1e-3
    """No move up of the rate once the window's median healthy loss is below this fraction of the run's
    starting loss (`Window.initial_loss`): the network fits its training set there, a longer step always
    lowers the training loss further, and the training-loss signal says nothing about the rate that
    generalises (on 8 processes the benchmark's CNN at its best rate fitted its training set in the rise, and
    the hypergradient took the rate to 90x: 1.305x of the oracle, 1.008x with the floor, 3 seeds). Moves
    down are not held (a rate too high can fit the training set too). None: no floor."""
    shard_correction: bool = True
    """Score each replica's log-loss minus its rank's running mean offset from the median (the shard's own
    difficulty, estimated from earlier windows), so a shard that is simply easier stops adding noise."""
    held_up_counts: bool = True
    """Windows whose pool said "higher" and were held only by the schedule's bias (`bias_aware`, in the rise
    before the climb may act) count toward the run of moves up, so the first move after such a hold starts at
    the step the run would have reached (0.75 after two held windows, not 0.25), where the run stalled across
    the hold (`held_up_when_stalled`). From 10x too low the byte LM's pool says "higher" from window 3 of the
    issue's 500 steps and is held to the peak; the run of moves then reached 2.1x in two windows and stopped
    there when the anneal turned the sign. Counted, it is at 2.1x in one window and on four seeds of five goes
    on to 4.5x: 1.197x -> 1.116x of the oracle (on 2 and 8 processes 1.161x -> 1.119x and 1.178x -> 1.122x),
    and the MLP at 60 windows 1.073x -> 1.004x (docs/benchmarks.md, "The issue's own setting"). False: the
    run of moves starts at `step_size` whatever was held."""
    first_pool_counts: int = 1
    """A climb (`climb_when_stalled`) that acts on the run's first full pool of hypergradient signs, every one
    "higher", counts this many of that pool's earlier windows toward the run of moves up, as held windows
    count (`held_up_counts`), so its steps go 0.5, 0.75 instead of 0.25, 0.5, 0.75. That pool is every window
    the run has had, the loss stalled across them, and the run would have moved earlier had the pool been
    full. Later climbs (after a mixed first pool, or a hold `held_up_when_stalled` did not count) start at
    `step_size`. From 10x too low, side by side: the issue's MLP 1.073x -> 1.024x of the oracle (fresh seeds
    0.953x -> 0.885x), an unseen deep MLP 1.47x -> 1.02x, the byte LM at 20 windows 1.054x -> 1.038x; but
    the quality MLP at 20 windows 1.115x -> 1.194x over fifteen seeds (its climb now stops at 7.4x, not
    9.5x, of a start 10x too low) and an unseen 1-D CNN 1.16x -> 1.31x over ten (its climb overshoots from
    the plateau of its first windows). Counting all three earlier windows lost on
    three workloads; counting at every climb lost on the BatchNorm CNN at 60 windows (docs/benchmarks.md,
    "How the defaults were chosen"). 0: every climb starts at `step_size`."""
    held_up_max: int | None = None
    """With `held_up_counts`: at most this many held windows count (1: the first move is twice `step_size`).
    None: all of them."""
    held_up_when_stalled: bool = True
    """With `held_up_counts`: the held windows count only if the run stalled across them, that is from the
    first held window to the move its median loss fell by less than a factor `stall_ratio` (0.5), however
    long the hold. A rate that learns while held is pulled up by the horizon, and its held "higher" was that
    pull: the benchmark's BatchNorm CNN from 10x too low, its loss down 4x to 6x in three held windows at
    500 steps, 20x in fourteen at 60 windows and 9x in eighteen at 150, where counting them cost 0.88x ->
    1.14x, 1.06x -> 1.14x and 1.28x of the loss on six seeds of six. A run whose loss barely falls while held
    is too low (the MLP and the byte LM from 10x too low: 3% to 38% in one to five windows). Read over the
    last windows before the move, the CNN at 60 windows passed (its loss had slowed by then); scaled to the
    hold's length (`stall_ratio` per `evidence_windows` windows, the climb's own test), the CNN at 150
    windows did. False: every held window counts."""
    settled_width: float | None = None
    """The rate's spread width (a fraction of its size, in log units; 0: no spread) once the run has shown
    its rate is not too high: the first full pool of hypergradient signs said "higher" in every window
    (`ControllerState.first_verdict`) and the centre has never moved. Any move of the centre (up, down, a
    rollback) brings the full spread back for the rest of the run. None (the default): the full spread
    throughout. Read with `signal='hypergradient'` only.
    Measured, not adopted: the spread's top replica is the canary that fails first at a rate too high, and
    a first pool gathered in the warm-up says little about the peak. On the benchmark's MLP at its oracle's
    rate (60 windows, 5 seeds) 0 moved 1.090x of the oracle to 1.071x, inside the seeds' spread; the 8 other
    cells where it fires moved by 0.012 or less (docs/benchmarks.md, "How the defaults were chosen")."""

    def __post_init__(self) -> None:
        ControllerConfig.__post_init__(self)
        if not self.z_threshold > 0:
            raise ValueError(f"z_threshold must be > 0, got {self.z_threshold}")
        if self.evidence_windows < 1:
            raise ValueError(f"evidence_windows must be >= 1, got {self.evidence_windows}")
        if not self.step_size > 0:
            raise ValueError(f"step_size must be > 0, got {self.step_size}")
        if not self.max_step >= self.step_size:
            raise ValueError(f"max_step must be >= step_size ({self.step_size}), got {self.max_step}")
        if not self.max_step_down >= self.step_size:
            raise ValueError(
                f"max_step_down must be >= step_size ({self.step_size}), got {self.max_step_down}"
            )
        if self.stall_ratio is not None and not 0.0 < self.stall_ratio <= 1.0:
            raise ValueError(f"stall_ratio must be in (0, 1] or None, got {self.stall_ratio}")
        if self.climb_stall_ratio is not None and not 0.0 < self.climb_stall_ratio <= 1.0:
            raise ValueError(f"climb_stall_ratio must be in (0, 1] or None, got {self.climb_stall_ratio}")
        if self.down_stall_ratio is not None and not 0.0 < self.down_stall_ratio <= 1.0:
            raise ValueError(f"down_stall_ratio must be in (0, 1] or None, got {self.down_stall_ratio}")
        if self.earliest_climb < 0:
            raise ValueError(f"earliest_climb must be >= 0, got {self.earliest_climb}")
        if self.climb_from is not None and not 0.0 < self.climb_from <= 1.0:
            raise ValueError(f"climb_from must be in (0, 1] or None, got {self.climb_from}")
        if self.late_anneal is not None and not 0.0 < self.late_anneal <= 1.0:
            raise ValueError(f"late_anneal must be in (0, 1] or None, got {self.late_anneal}")
        if self.late_anneal_steps is not None and not 0.0 <= self.late_anneal_steps <= 1.0:
            raise ValueError(f"late_anneal_steps must be in [0, 1] or None, got {self.late_anneal_steps}")
        if self.signal not in SIGNALS:
            raise ValueError(f"signal must be one of {SIGNALS}, got {self.signal!r}")
        if self.fit_floor is not None and not 0.0 < self.fit_floor < 1.0:
            raise ValueError(f"fit_floor must be in (0, 1) or None, got {self.fit_floor}")
        if self.rise_rollback is not None and not self.rise_rollback > 1.0:
            raise ValueError(f"rise_rollback must be > 1 or None, got {self.rise_rollback}")
        if not self.rise_giveback >= 0.0:
            raise ValueError(f"rise_giveback must be >= 0, got {self.rise_giveback}")
        if self.first_pool_counts < 0:
            raise ValueError(f"first_pool_counts must be >= 0, got {self.first_pool_counts}")
        if self.held_up_max is not None and self.held_up_max < 0:
            raise ValueError(f"held_up_max must be >= 0 or None, got {self.held_up_max}")
        if self.settled_width is not None and not 0.0 <= self.settled_width <= 1.0:
            raise ValueError(f"settled_width must be in [0, 1] or None, got {self.settled_width}")


SHARD_PRIOR_WINDOWS = 4
SIGN_POOL = "#hypergradient"
"""Suffix of the key the pooled hypergradient signs have in `ControllerState.evidence` (rank: the name)."""
HELD_UP = "#held_up"
"""Suffix of the key in `ControllerState.evidence` that keeps (windows held by the bias, the first one's
median log-loss) (`held_up_counts`, `held_up_when_stalled`)."""


def _without_shard_bias(
    losses: Sequence[float], bias: Sequence[float], seen: Sequence[int]
) -> tuple[list[float], tuple[float, ...], tuple[int, ...]]:
    """(log-losses less each replica's running offset, the updated offsets, the updated counts).

    A replica's offset is the mean, over the windows seen before this one, of its log-loss minus the window's
    median log-loss. Losses that are not all positive and finite are returned as they are (no logs to take).
    """
    n = len(losses)
    bias = tuple(bias) if len(bias) == n else (0.0,) * n
    seen = tuple(seen) if len(seen) == n else (0,) * n
    finite = [x for x in losses if math.isfinite(x)]
    if len(finite) < 2 or min(finite) <= 0.0:
        return list(losses), bias, seen
    logs = [math.log(x) if math.isfinite(x) else math.nan for x in losses]
    median = statistics.median(v for v in logs if math.isfinite(v))
    # shrunk toward 0 while few windows are seen: one window's offsets are mostly its multipliers' effect
    scored = [
        v - b * k / (k + SHARD_PRIOR_WINDOWS) if math.isfinite(v) else math.nan
        for v, b, k in zip(logs, bias, seen, strict=True)
    ]
    new_bias, new_seen = list(bias), list(seen)
    for r, v in enumerate(logs):
        if math.isfinite(v):
            new_seen[r] += 1
            new_bias[r] += (v - median - new_bias[r]) / new_seen[r]
    return scored, tuple(new_bias), tuple(new_seen)


def _stalled(losses: Sequence[float], stall_ratio: float, windows: int) -> bool:
    """Whether the median log-losses `losses` (oldest first) fell by less than `stall_ratio` per `windows`
    windows: their last is at least log(stall_ratio) * (len - 1) / windows above their first."""
    return losses[-1] - losses[0] >= math.log(stall_ratio) * (len(losses) - 1) / windows


class EvidenceController(Controller):
    """Moves only on evidence across windows and permutations; holds otherwise.

        rho_w = Spearman(coordinate, -loss) in window w          (exclusions rank worst)
        z = sum(rho over the last k windows) * sqrt((N - 1) / k)  (rho has variance 1/(N-1) under no effect)
        move d = sign(z) when |z| >= z_threshold and the latest rho agrees, by
        step_size * 2**(moves in a row in direction d - 1), at most max_step up and max_step_down down (a
        run of moves ends with a move the other way, or a full pool of evidence_windows windows with no
        verdict);
        after a move the pooled windows start afresh (evidence is about the centre it was gathered at),
        except after a move up on the hypergradient (`continue_up`: the next agreeing window moves again)

    Each window re-permutes the multipliers, so a shard that is simply easier cannot fake evidence, and the
    test's false-move rate does not depend on the loss's scale or noise.

    The short-horizon bias: a window's loss favours the higher rate while the schedule rises (loss falls fast)
    and the lower rate while it anneals (less noise now, less progress later). Evidence that points the way
    the schedule's bias does cannot be told from the bias, so with `bias_aware` it moves nothing; evidence
    against the bias is evidence that beats it. So a good rate holds, a too-high one comes down during the
    rise, a too-low one goes up during the anneal. One exception (`climb_when_stalled`): in the rise, a run
    whose loss has stalled is not being pulled by the horizon (that bias comes from fast progress), so there
    the higher replicas' lead is evidence that the rate is too low. Windows that excluded a replica as
    unhealthy are evidence of instability, not of the horizon: there the bias does not block a move (the z
    test still applies).

    The edge of stability: near the best rate, while the loss still falls fast, the replicas just below the
    edge score better than those at it, yet the run's final loss prefers the edge. So a move down on healthy
    windows also needs the run to have stalled (`stall_ratio`); a rate too high to learn has.
    """

    name = "evidence"
    Config = EvidenceConfig

    @property
    def wants_hypergradient(self) -> bool:
        return self.config.signal == "hypergradient"  # type: ignore[attr-defined]

    def _restart(self, state: ControllerState) -> ControllerState:
        """The pools of evidence, the runs of moves, the first pool's verdict and the stall test's losses
        start afresh: a rate that was too low for a head trained alone is not too low for the whole network
        (the staged fine-tune of `benchmarks.unseen` climbed on the head's evidence and ended 3% behind).
        The offset stays, and so does what the run has seen of the edge (`came_down`, `top_offset`)."""
        return replace(state, evidence={}, streak={}, first_verdict={}, recent_loss=(), learned=())

    def _rose(self, state: ControllerState, window: Window) -> str:
        cfg: EvidenceConfig = self.config  # type: ignore[assignment]
        name = cfg.rollback_param
        if cfg.rise_rollback is None or len(state.learned) != 2 or name not in window.params:
            return ""
        previous = state.last_base.get(name, math.nan)
        if not (all(window.healthy) and math.isfinite(previous) and window.params[name].base > previous):
            return ""  # a window that left a replica out is health's to judge; outside the rise, no rule
        level = _level(window)[0]
        first, lowest = state.learned
        if not (math.isfinite(level) and math.isfinite(lowest) and first > lowest):
            return ""
        gave = (math.exp(level) - math.exp(lowest)) / (math.exp(first) - math.exp(lowest))
        if level - lowest < math.log(cfg.rise_rollback) or gave < cfg.rise_giveback:
            return ""
        return (
            f"{name}: while the rate rose the loss rose to {math.exp(level - lowest):.3g}x its lowest, giving"
            f" back {gave:.2f} of what the run had learned"
        )

    def _move(self, state, window):
        cfg: EvidenceConfig = self.config  # type: ignore[assignment]
        trend, replica_bias, replica_seen = read_trend(cfg, state, window)
        books = _Books.of(state)
        notes = [
            "what trains changed (parameters frozen or unfrozen): the evidence starts afresh"
        ] * window.restart
        for name, p in window.params.items():
            bias, previous = books.track(name, p, window.step)
            reading = _pool(cfg, books, name, p, window, trend, bias, previous)
            verdict = _gate(cfg, books, state, name, p, window, trend, bias, reading)
            notes += verdict.notes
            if verdict.d:
                notes.append(_step(cfg, books, state, name, p, trend, reading, verdict))
            else:
                _hold(cfg, books, name, p, trend, reading, verdict)
        state = replace(
            state,
            widths=_widths(cfg, books, state, window),
            evidence=books.evidence,
            streak=books.streak,
            last_base=books.last_base,
            bias=books.bias,
            velocity=books.velocity,
            replica_bias=replica_bias,
            replica_seen=replica_seen,
            recent_loss=trend.recent,
            peak_base=books.peak_base,
            peak_step=books.peak_step,
            top_offset=books.top_offset,
            came_down=books.came_down,
            first_verdict=books.first_verdict,
        )
        if cfg.rise_rollback is not None and math.isfinite(trend.level):  # what the run has learned
            if trend.index == 0:
                state = replace(state, learned=(trend.level, math.inf))
            elif len(state.learned) == 2:
                state = replace(state, learned=(state.learned[0], min(state.learned[1], trend.level)))
        note = "; ".join(notes) or "no evidence beats the noise; holding"
        return state, books.offsets, books.signal, note


@dataclass(frozen=True, slots=True)
class Trend:
    """The window's loss as the run sees it, read once for every hyperparameter."""

    losses: tuple[float, ...]
    """Per replica, what the rank test reads: the loss (with `shard_correction` its log less the shard's
    running offset), NaN where the replica was left out."""
    excluded: bool
    """A replica was left out as unhealthy: evidence of instability, not of the horizon."""
    level: float
    """The median healthy log-loss (NaN where none is healthy or a loss is at or below zero)."""
    fitted: bool
    """The level is below `fit_floor` x the run's starting loss: the network fits its training set."""
    recent: tuple[float, ...]
    """The stall tests' span: `ControllerState.recent_loss` with this window's level, oldest first."""
    index: int
    """The window's place in the run, 0-based."""
    falling: str
    """Why a move down on healthy windows waits (`stall_ratio`): "" once the run has stalled."""
    falling_down: str
    """`falling`, or the stricter reason of `down_stall_ratio`."""
    stalled_after_first: bool
    """The climb's stall test (`climb_stall_ratio`, before it the scaled test of `earliest_climb`)."""
    since_first: tuple[float, ...]
    """The span's windows since the first; where a window was left out (unhealthy), `recent` cannot say
    whether it still holds the first, which is then compared too (a stricter test)."""
    steady: bool
    """The level fell in every window of `since_first` (`mixed_start_holds_falling`)."""
    plateau: bool
    """The level did not fall since the last window (`run_down_on_plateau`)."""
    new_high: bool
    """The level is the highest of `since_first` (`run_down_on_new_high`)."""


def _level(window: Window) -> tuple[float, bool]:
    """(the median healthy log-loss, NaN where no loss is healthy or one is at or below zero; whether one is:
    a log-density's loss has no ratio to judge a stall or a rise by, so its level is unknown)."""
    finite = [x for x, ok in zip(window.losses, window.healthy, strict=True) if ok and math.isfinite(x)]
    unscaled = bool(finite) and min(finite) <= 0.0
    healthy = [] if unscaled else [math.log(x) for x in finite]
    return (statistics.median(healthy) if healthy else math.nan), unscaled


def read_trend(
    cfg: EvidenceConfig, state: ControllerState, window: Window
) -> tuple[Trend, tuple[float, ...], tuple[int, ...]]:
    """(the window's trend, the replicas' updated shard offsets, their updated window counts).

    `state` is the controller's state before the window, its `windows` already counting it (as
    `Controller.decide` passes it on); nothing else of `window` than its losses, health and the run's
    starting loss is read."""
    losses = [x if ok else math.nan for x, ok in zip(window.losses, window.healthy, strict=True)]
    scored, replica_bias, replica_seen = _without_shard_bias(losses, state.replica_bias, state.replica_seen)
    if cfg.shard_correction:
        losses = scored
    level, unscaled = _level(window)
    # the network fits its training set: the training loss cannot tell a rate that generalises
    fitted = (
        cfg.fit_floor is not None
        and 0.0 < window.initial_loss < math.inf
        and level < math.log(cfg.fit_floor * window.initial_loss)
    )
    recent = state.recent_loss
    if unscaled:
        recent = ()
    elif math.isfinite(level):
        recent = (*recent, level)[-(cfg.evidence_windows + 1) :]
    # not (yet) known to have stalled: too few windows, or the median loss now is below stall_ratio x its
    # value evidence_windows windows ago, or a loss at or below zero
    falling = ""
    if cfg.stall_ratio is not None and unscaled:
        falling = "while the loss is at or below zero (no ratio to judge a stall by)"
    elif cfg.stall_ratio is not None and len(recent) <= cfg.evidence_windows:
        falling = "before the run has shown whether it stalls"
    elif cfg.stall_ratio is not None and not _stalled(recent, cfg.stall_ratio, cfg.evidence_windows):
        falling = "while the loss still falls fast"
    # a stall test over its full span can be read (not at a loss at or below zero, nor too early)
    full_span = not unscaled and len(recent) > cfg.evidence_windows
    falling_down = falling
    if (
        not falling
        and cfg.down_stall_ratio is not None
        and full_span
        and not _stalled(recent, cfg.down_stall_ratio, cfg.evidence_windows)
    ):
        falling_down = "while the loss still falls fast"
    # the climb's stall test never reads the first window (the initialisation's transient): from
    # evidence_windows + 1 windows on it is `climb_stall_ratio`'s (else the test above); before that, the
    # windows after the first with stall_ratio scaled to their number (every window so far was healthy)
    index = state.windows - 1
    if index > cfg.evidence_windows and cfg.climb_stall_ratio is not None:
        stalled_after_first = full_span and _stalled(recent, cfg.climb_stall_ratio, cfg.evidence_windows)
    elif index > cfg.evidence_windows:
        stalled_after_first = not falling
    else:
        seen = recent[1:] if len(recent) == index + 1 else ()
        stalled_after_first = (
            cfg.stall_ratio is not None
            and len(seen) >= 3
            and _stalled(seen, cfg.stall_ratio, cfg.evidence_windows)
        )
    since_first = recent[1:] if len(recent) == index + 1 else recent
    trend = Trend(
        losses=tuple(losses),
        excluded=not all(window.healthy),
        level=level,
        fitted=fitted,
        recent=recent,
        index=index,
        falling=falling,
        falling_down=falling_down,
        stalled_after_first=stalled_after_first,
        since_first=since_first,
        steady=len(since_first) >= 2 and all(b < a for a, b in itertools.pairwise(since_first)),
        plateau=len(recent) >= 2 and recent[-1] >= recent[-2],
        new_high=len(since_first) >= 3 and since_first[-1] >= max(since_first[:-1]),
    )
    return trend, replica_bias, replica_seen


@dataclass(slots=True)
class _Books:
    """The state's per-hyperparameter records, copied for one window's decisions (the state stays frozen)."""

    offsets: dict[str, float]
    evidence: dict[str, tuple[float, ...]]
    streak: dict[str, int]
    last_base: dict[str, float]
    bias: dict[str, int]
    velocity: dict[str, float]
    peak_base: dict[str, float]
    peak_step: dict[str, int]
    top_offset: dict[str, float]
    came_down: dict[str, bool]
    first_verdict: dict[str, int]
    signal: dict[str, float]

    @classmethod
    def of(cls, state: ControllerState) -> _Books:
        return cls(
            offsets=dict(state.offsets),
            evidence=dict(state.evidence),
            streak=dict(state.streak),
            last_base=dict(state.last_base),
            bias=dict(state.bias),
            velocity=dict(state.velocity),
            peak_base=dict(state.peak_base),
            peak_step=dict(state.peak_step),
            top_offset=dict(state.top_offset),
            came_down=dict(state.came_down),
            first_verdict=dict(state.first_verdict),
            signal={},
        )

    def track(self, name: str, p: ParamWindow, step: int) -> tuple[int, float]:
        """Record the schedule's move, its peak, and the offset's highest point and fall; return (the
        direction the schedule moved in this window: +1 rising, -1 falling, 0 unknown or flat, the base at the
        previous window's end)."""
        previous = self.last_base.get(name, math.nan)
        bias = (
            sign(p.base - previous)
            if math.isfinite(previous) and abs(p.base - previous) > 1e-12 * abs(previous)
            else 0
        )
        self.last_base[name] = p.base
        if name not in self.peak_base or p.base > self.peak_base[name]:
            self.peak_step[name] = step
        self.peak_base[name] = max(self.peak_base.get(name, p.base), p.base)
        top = self.top_offset.get(name, p.offset)
        self.came_down[name] = self.came_down.get(name, False) or p.offset < top
        self.top_offset[name] = max(top, p.offset)
        return bias, previous


@dataclass(frozen=True, slots=True)
class _Reading:
    """One hyperparameter's evidence in this window, pooled."""

    sign_test: bool
    """The evidence is the rate's hypergradient sign (else the replicas' rank correlation)."""
    late: bool
    """Late in the anneal (`late_anneal`): the hypergradient is held, not read."""
    key: str
    """Where the pool lives in `ControllerState.evidence`."""
    history: tuple[float, ...]
    """The pool, this window's evidence last."""
    rho: float
    """This window's evidence: the sign, or the rank correlation."""
    z: float
    """The pool's z score."""
    d: int
    """The direction the evidence asks for: +1 up, -1 down, 0 none (below `z_threshold`, or this window
    disagrees)."""


def _pool(
    cfg: EvidenceConfig,
    books: _Books,
    name: str,
    p: ParamWindow,
    window: Window,
    trend: Trend,
    bias: int,
    previous: float,
) -> _Reading:
    """Add this window's evidence to the pool (a new phase starts it afresh), set the run's first verdict
    once its first pool is full, and test the pool."""
    # this window's evidence: the sign of the rate's hypergradient where it was measured (a sign test),
    # otherwise the replicas' rank correlation; the two are pooled apart
    h = window.hypergradient
    sign_test = cfg.signal == "hypergradient" and name == cfg.rollback_param and math.isfinite(h)
    late = (  # steps fall short by design there: the hypergradient is held, not read
        sign_test
        and not trend.excluded
        and cfg.late_anneal is not None
        and bias < 0
        and p.base < cfg.late_anneal * books.peak_base[name]
        and (
            cfg.late_anneal_steps is None
            or name not in books.peak_step  # a state saved before it was kept: the base alone decides
            or window.step - books.peak_step[name]
            >= cfg.late_anneal_steps * (window.total_steps - books.peak_step[name])
        )
    )
    key, other = (name + SIGN_POOL, name) if sign_test else (name, name + SIGN_POOL)
    books.evidence.pop(other, None)  # a change of signal starts the pool afresh
    rho = float(sign(h)) if sign_test else rank_correlation(p.coords, trend.losses)
    history = books.evidence.get(key, ())
    if name in books.bias and bias != books.bias[name]:
        # a new phase: the old evidence carried the old phase's bias, except a pool for "higher" at the
        # rise's end (`carry_into_anneal`), which the anneal's bias can only work against
        carry = cfg.carry_into_anneal and sign_test and bias < 0 < books.bias[name] and sum(history) > 0
        history = history if carry else ()
    if math.isfinite(previous):
        books.bias[name] = bias
    if not late:
        history = ((*history, rho))[-cfg.evidence_windows :]
    if sign_test and name not in books.first_verdict and len(history) >= cfg.evidence_windows:
        verdict = 1 if all(x > 0 for x in history) else -1 if all(x < 0 for x in history) else 0
        # `first_pool_skips_first_higher`: a mixed first pool whose first window said "higher" waits a
        # window and is read again without it
        wait = (
            cfg.first_pool_skips_first_higher
            and verdict == 0
            and trend.index == cfg.evidence_windows - 1
            and history[0] > 0
        )
        if not wait:
            books.first_verdict[name] = verdict
    n = window.replicas
    if not history:
        z = 0.0
    elif sign_test:  # under "the rate does not matter" each sign is +-1 with equal odds
        z = sum(history) / math.sqrt(len(history))
    else:
        z = sum(history) * math.sqrt((n - 1) / len(history)) if n > 1 else 0.0
    books.signal[name], books.velocity[name] = (h if sign_test else rho), z
    d = sign(z) if abs(z) >= cfg.z_threshold else 0
    if d and sign(rho) != d:
        d = 0  # the latest window disagrees: wait
    return _Reading(sign_test=sign_test, late=late, key=key, history=history, rho=rho, z=z, d=d)


@dataclass(frozen=True, slots=True)
class _Verdict:
    """What the gates leave of the move the evidence asks for."""

    d: int
    """The move's direction: +1 up, -1 down, 0 hold."""
    notes: tuple[str, ...]
    """Why a move was held."""
    climb: bool
    """A move up in the rise allowed by a stalled run (`climb_when_stalled`)."""
    runs_down: bool
    """A move down of the run down (`high_start_runs_down`)."""
    keeps_up: bool
    """A move up whose pool is kept (`continue_up`)."""
    held_up: bool
    """A "higher" held by the schedule's bias that counts toward the next move up (`held_up_counts`)."""
    canary: bool
    """The top replica failed: a run of moves up ends (`canary_ends_climb`)."""


def _last_run_down(cfg: EvidenceConfig) -> int:
    """The last window at which the run down may move (`high_start_runs_down`)."""
    return 2 * (cfg.evidence_windows - 1)


def _gate(
    cfg: EvidenceConfig,
    books: _Books,
    state: ControllerState,
    name: str,
    p: ParamWindow,
    window: Window,
    trend: Trend,
    bias: int,
    reading: _Reading,
) -> _Verdict:
    """The rules that hold a move, in order; each hold gives its reason."""
    d, notes, sign_test, z = reading.d, [], reading.sign_test, reading.z
    if reading.late:
        notes.append(f"{name}: late in the anneal every step falls short, whatever the rate; holding")
        d = 0
    first_said = books.first_verdict.get(name, -1)
    mixed_falling = cfg.mixed_start_holds_falling and first_said == 0 and trend.steady
    if (
        d < 0
        and cfg.low_start_holds_down
        and sign_test
        and not trend.excluded
        and not books.came_down[name]
        and (first_said >= (0 if cfg.mixed_start_holds_down else 1) or mixed_falling)
    ):
        began = "higher" if first_said > 0 else "neither way throughout"
        since = (
            " and its loss has fallen in every window since"
            if mixed_falling and not cfg.mixed_start_holds_down
            else ""
        )
        notes.append(f"{name}: z {z:+.2f} points down, but the run began by saying {began}{since}; holding")
        d = 0
    n = window.replicas
    top = max(range(n), key=lambda i: p.coords[i]) if n else 0
    canary = d > 0 and cfg.canary_ends_climb and name == cfg.rollback_param and not window.healthy[top]
    if canary:
        notes.append(f"{name}: z {z:+.2f} points up, but the top replica failed; the climb ends")
        d = 0
    if d > 0 and trend.fitted and name == cfg.rollback_param:
        notes.append(
            f"{name}: z {z:+.2f} points up, but the loss is below {cfg.fit_floor:g} x its start "
            "(the training set is fitted); holding"
        )
        d = 0
    # a rate whose first pool said "lower" throughout runs down in the rise, while its pool still holds a
    # window of that first pool, up to window `_last_run_down` (`high_start_runs_down`); with
    # `run_down_on_plateau` only from the window that completes that pool, and each move only on a window
    # whose median loss did not fall
    first_pool_ends = trend.index == cfg.evidence_windows - 1 or (
        cfg.first_pool_skips_first_higher
        and trend.index == cfg.evidence_windows
        and name in books.first_verdict
        and name not in state.first_verdict
    )
    runs_down = (
        cfg.high_start_runs_down
        and sign_test
        and d < 0
        and bias > 0
        and books.first_verdict.get(name, 0) < 0
        and trend.index <= _last_run_down(cfg)
        and sign(books.streak.get(name, 0)) <= 0
        and (
            not cfg.run_down_on_plateau
            or (
                trend.plateau
                and (
                    first_pool_ends
                    or books.streak.get(name, 0) < 0
                    or cfg.run_down_starts_late
                    or (cfg.run_down_on_new_high and trend.new_high)
                )
            )
        )
    )
    if d < 0 and trend.falling_down and not trend.excluded and not runs_down:
        notes.append(f"{name}: z {z:+.2f} points down {trend.falling_down}; holding")
        d = 0
    climb = (
        cfg.climb_when_stalled
        and cfg.stall_ratio is not None
        and d > 0
        and bias > 0
        and trend.index >= cfg.earliest_climb
        and trend.stalled_after_first
        and not (cfg.climb_from is not None and p.base < cfg.climb_from * p.peak)  # NaN peak: no wait
    )
    # a move up on the hypergradient keeps its pool (`continue_up`); once a run of them has begun it goes
    # through the bias gate (`run_through_bias`)
    keeps_up = sign_test and d > 0 and cfg.continue_up and not books.came_down[name]
    running = cfg.run_through_bias and keeps_up and books.streak.get(name, 0) > 0
    held_up = False
    if d and cfg.bias_aware and d == bias and not trend.excluded and not climb and not running:
        notes.append(f"{name}: z {z:+.2f} points the way the schedule's bias does; holding")
        held_up = cfg.held_up_counts and d > 0 and not books.came_down[name]
        d = 0
    return _Verdict(
        d=d,
        notes=tuple(notes),
        climb=climb,
        runs_down=runs_down,
        keeps_up=keeps_up,
        held_up=held_up,
        canary=canary,
    )


def _hold(
    cfg: EvidenceConfig,
    books: _Books,
    name: str,
    p: ParamWindow,
    trend: Trend,
    reading: _Reading,
    verdict: _Verdict,
) -> None:
    """Keep the offset; a verdict on a full pool (not one building up, nor a "higher" counted as held) ends
    a run of moves."""
    if verdict.held_up:  # counted toward the next run of moves up, with the first held window's level
        count, first_level = books.evidence.get(name + HELD_UP, (0.0, trend.level))
        count = count + 1 if cfg.held_up_max is None else min(count + 1, cfg.held_up_max)
        books.evidence[name + HELD_UP] = (count, first_level)
    if (len(reading.history) >= cfg.evidence_windows and not verdict.held_up) or verdict.canary:
        books.streak[name] = 0
        books.evidence.pop(name + HELD_UP, None)
    books.evidence[reading.key] = () if verdict.canary else reading.history
    books.offsets[name] = p.offset


def _step(
    cfg: EvidenceConfig,
    books: _Books,
    state: ControllerState,
    name: str,
    p: ParamWindow,
    trend: Trend,
    reading: _Reading,
    verdict: _Verdict,
) -> str:
    """Move the offset by a step that doubles over a run of moves one way; return the note."""
    d = verdict.d
    run = books.streak.get(name, 0)
    run = run + d if sign(run) == d else d
    # `held_up_counts`: the windows of "higher" the bias held, and the first one's median log-loss
    count, first_level = books.evidence.pop(name + HELD_UP, (0.0, math.nan))
    held = int(count)
    if held and cfg.held_up_when_stalled:
        # they count if the run stalled across the hold: from the first held window to this one its median
        # loss fell by less than a factor stall_ratio, however long the hold (no stall test: none counts)
        fell = first_level - trend.level  # log of the factor it fell by
        if cfg.stall_ratio is None or not fell <= -math.log(cfg.stall_ratio):
            held = 0
    # `first_pool_counts`: a climb on the run's first full pool (its verdict set this window)
    first_pool = books.first_verdict.get(name, 0) > 0 and name not in state.first_verdict
    if d > 0 and verdict.climb and run == 1 and not held and first_pool:
        held = min(cfg.first_pool_counts, len(reading.history) - 1)
    run += held if d > 0 else 0
    step = min(cfg.step_size * 2 ** (abs(run) - 1), cfg.max_step if d > 0 else cfg.max_step_down)
    books.streak[name] = run
    # the evidence was about the old centre: the new one must earn its own (at the best rate, the top replica
    # past the edge of stability says "lower"; one step down puts it back below the edge); a rate that has
    # come down once (a move down, a rollback) found an edge above: climb back a pool at a time; a run down
    # keeps its pool only while the next window may still run on
    keeps_down = verdict.runs_down and trend.index < _last_run_down(cfg)
    books.evidence[reading.key] = reading.history if verdict.keeps_up or keeps_down else ()
    books.came_down[name] = books.came_down[name] or d < 0
    books.offsets[name] = clamp(p.offset + d * step, *p.offset_bounds)
    why = ""
    if verdict.runs_down:
        why = " (the first pool it judged said lower throughout"
        why += ", and the loss stopped falling: a rate too high)" if cfg.run_down_on_plateau else ")"
    return f"{name}: z {reading.z:+.2f}, moved {d * step:+.2f}{why}"


def _widths(cfg: EvidenceConfig, books: _Books, state: ControllerState, window: Window) -> dict[str, float]:
    """The next window's spread widths: `settled_width` for the rate while the run has shown it is not too
    high (its first pool said "higher" throughout and the centre never moved), else the full spread."""
    widths = dict(state.widths)
    name = cfg.rollback_param
    if cfg.settled_width is not None and cfg.signal == "hypergradient" and name in window.params:
        settled = (
            books.first_verdict.get(name, 0) > 0
            and not books.came_down[name]
            and books.top_offset[name] <= 0.0
            and books.offsets[name] == 0.0
        )
        if settled:
            widths[name] = cfg.settled_width
        else:
            widths.pop(name, None)
    return widths
