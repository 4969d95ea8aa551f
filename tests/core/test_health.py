import math

import pytest

from hdet_ray.core.health import HealthConfig, ReplicaStats, assess


def stats(mean, first=2.0, tail=None, low=None, finite=True, count=10):
    return ReplicaStats(
        mean_loss=mean,
        first_loss=first,
        tail_loss=mean if tail is None else tail,
        min_loss=mean if low is None else low,
        params_finite=finite,
        count=count,
    )


def test_nan_loss_and_nan_parameters_are_unhealthy():
    healthy, reasons = assess(
        [stats(1.0), stats(math.nan), stats(1.0, finite=False), stats(1.1)], HealthConfig()
    )
    assert healthy == [True, False, False, True]
    assert "non-finite loss" in reasons[1] and "non-finite parameters" in reasons[2]


def test_finite_blow_up_is_caught_against_the_larger_of_start_and_previous():
    cfg = HealthConfig(blowup_factor=2.0)
    # start (mean of first losses) = 1.0; replica 2's tail 2.5 > 2 x 1.0
    healthy, reasons = assess(
        [stats(0.9, first=1.0), stats(1.0, first=1.0), stats(1.5, first=1.0, tail=2.5)], cfg
    )
    assert healthy == [True, True, False] and "blew up" in reasons[2]
    # with a previous window's median of 1.5 the reference is 1.5: 2.5 < 3.0 passes
    healthy, _ = assess(
        [stats(0.9, first=1.0), stats(1.0, first=1.0), stats(1.5, first=1.0, tail=2.5)], cfg, previous=1.5
    )
    assert healthy == [True, True, True]


def test_falling_back_to_chance_after_learning_is_death_not_health():
    cfg = HealthConfig(chance_loss=math.log(10))
    chance = math.log(10)
    dead = stats(chance, first=1.5, low=1.2)  # had learned (min 1.2), now at chance
    above = stats(2.6, first=1.5, low=1.2)  # worse than chance: also dead
    fine = stats(1.4, first=1.5, low=1.2)
    healthy, reasons = assess([dead, above, fine], cfg)
    assert healthy == [False, False, True]
    assert "chance" in reasons[0] and "chance" in reasons[1]


def test_a_fresh_network_at_chance_is_not_dead():
    cfg = HealthConfig(chance_loss=math.log(10))
    fresh = [stats(2.30, first=2.31, low=2.25) for _ in range(4)]
    assert assess(fresh, cfg)[0] == [True] * 4
    # ...but once the run has been well below chance (best median 1.0), sitting at chance is death
    assert assess(fresh, cfg, best=1.0)[0] == [False] * 4


def test_no_loss_reported_is_judged_on_parameters():
    assert assess([stats(math.nan, count=0), stats(math.nan, count=0, finite=False)], HealthConfig())[0] == [
        True,
        False,
    ]


def test_a_2x_wiggle_near_zero_loss_is_noise_not_a_blow_up():
    # the trace: 0.0007148 -> 0.001894 late in a run that started at ln(10)
    cfg = HealthConfig()
    wiggle = [
        stats(0.0012, first=0.0007, tail=0.001894),
        stats(0.0008, first=0.0007),
        stats(0.0007, first=0.0007),
    ]
    healthy, reasons = assess(wiggle, cfg, previous=0.0007148, best=0.0007, initial=2.31)
    assert healthy == [True, True, True], reasons
    # the same relative jump with nothing learned yet (first window: initial = the window's own start) is
    # caught
    fresh = [stats(1.0, first=1.0, tail=2.5), stats(1.0, first=1.0)]
    assert assess(fresh, cfg)[0] == [False, True]
    # ...and a jump that gives back a real share of the progress still is, late in the run
    late = [stats(0.9, first=0.3, tail=1.2), stats(0.3, first=0.3)]
    healthy, reasons = assess(late, cfg, previous=0.3, best=0.3, initial=2.31)
    assert healthy == [False, True] and "blew up" in reasons[0]


def test_a_rise_within_the_batches_draw_is_no_blow_up_and_a_blown_replica_does_not_widen_the_draw():
    # `benchmarks.unseen`'s REINFORCE surrogate, window 0 of seed 0 from 10x too low: it hovers around zero
    # whatever the policy's quality, the replicas' first losses (the same weights, four batches) spread
    # by 0.003 to 0.004, and tails of +0.0005 against a start of -0.0011 were three "blow-ups" (10
    # rollbacks by the run's end, the policy dead)
    firsts = (-0.0052, 0.0003, 0.0018, -0.0014)
    window = [
        stats(-0.00067, first=firsts[0], tail=-0.00076),
        stats(0.00039, first=firsts[1], tail=0.00055),
        stats(0.00009, first=firsts[2], tail=-0.00044),
        stats(0.00022, first=firsts[3], tail=0.00030),
    ]
    assert assess(window, HealthConfig())[0] == [True] * 4
    healthy, reasons = assess(window, HealthConfig(blowup_noise=0.0))
    assert healthy == [True, False, False, False] and "blew up" in reasons[1]
    # a real blow-up on the same draw is still one: 0.05 is far beyond three standard errors (0.006)
    blown = [stats(0.02, first=firsts[0], tail=0.05), *window[1:]]
    healthy, reasons = assess(blown, HealthConfig())
    assert healthy == [False, True, True, True] and "blew up" in reasons[0]
    # the draw is read from the first losses only: a replica that blows up by 1e3 within the window leaves
    # it as it was, so a neighbour's rise of 0.05 still fails
    wild = [stats(500.0, first=firsts[0], tail=1000.0, low=0.0), *blown[:1], *window[2:]]
    assert assess(wild, HealthConfig())[0] == [False, False, True, True]
    # a classifier's batches vary by far less than its level: the doubling is the bar, as before
    digits = [stats(0.3, first=f, tail=t) for f, t in ((0.30, 0.29), (0.34, 0.9), (0.27, 0.31), (0.33, 0.3))]
    assert assess(digits, HealthConfig(), previous=0.31, best=0.31, initial=2.3)[0] == [
        True,
        False,
        True,
        True,
    ]


def test_against_a_level_the_run_had_got_to_only_the_replica_s_own_draw_counts():
    # `benchmarks.unseen`'s heteroscedastic regression from 10x too high (seed 0, window 7): first losses
    # spread by 0.14, the previous median -0.133 (above the start, so the reference), and the x1.23 replica
    # at +0.084 while the others sat at -0.13 to -0.23. Against a median the rise is judged on the tail's
    # standard error alone (0.14 / sqrt(12)): 0.22 is over five of them, a blow-up as before
    firsts = (-0.40, -0.22, -0.10, -0.17)
    window = [
        stats(m, first=f, count=25) for m, f in zip((-0.231, 0.084, -0.21, -0.128), firsts, strict=True)
    ]
    memory = dict(previous=-0.1333, best=-0.25, initial=0.6)
    healthy, reasons = assess(window, HealthConfig(), **memory)
    assert healthy == [True, False, True, True] and "blew up" in reasons[1]
    # where the start is the reference its own draw counts too: first losses spread by 0.29 put the floor
    # at 3 x 0.29 x sqrt(1/12 + 1/4) = 0.5, over the same replica's rise of 0.31 above the start
    wide = (-0.6, -0.22, 0.1, -0.17)
    at_start = [
        stats(m, first=f, count=25) for m, f in zip((-0.231, 0.084, -0.21, -0.128), wide, strict=True)
    ]
    memory = dict(previous=-0.3, best=-0.3, initial=0.6)
    assert assess(at_start, HealthConfig(), **memory)[0] == [True] * 4
    assert assess(at_start, HealthConfig(blowup_noise=0.0), **memory)[0] == [True, False, True, True]


def test_a_start_within_its_own_draw_of_the_level_has_not_regressed():
    # `regressed_start` judges the window's start, a mean of one batch per replica, against the level the
    # run had got to: the digits at 2 images a batch (`benchmarks.unseen`'s tiny batch) started a window at
    # 1.82 against a median of 0.41 with first losses spread by 2.1, a standard error of 1.06 on the start
    firsts = (0.05, 4.6, 0.4, 2.23)
    window = [stats(m, first=f, count=25) for m, f in zip((0.768, 0.483, 0.966, 0.427), firsts, strict=True)]
    memory = dict(previous=0.41, best=0.41, initial=2.3)
    assert assess(window, HealthConfig(), **memory)[0] == [True] * 4
    # judged without the draw the start regressed, and the x1.23 replica "blew up" against 0.41
    healthy, reasons = assess(window, HealthConfig(blowup_noise=0.0), **memory)
    assert healthy == [True, True, False, True] and "0.41" in reasons[2]


def test_a_start_that_blew_up_is_judged_on_the_noise_before_the_damage():
    # `benchmarks.unseen`'s bag-of-words classifier from 10x too high (seed 2, window 4): the window before
    # started with every first loss within 3e-6 of 0, one replica blew up in it and was left out, and this
    # window's start, the converged weights' loss on one batch per replica, came in at 0, 0.53, 0 and 1.90:
    # some batches land on the damage, some not. Their spread (0.89) is the damage's, not the batches' draw
    # at the level the run had got to (a median of 0.0067); judged on it the start "had not regressed" and
    # three replicas climbing to 0.83-1.58, back near the untrained loss of 1.8, were all kept
    firsts = (0.0, 0.5312, 2.0e-7, 1.8962)
    means = (0.9022, 1.5566, 0.3404, 0.8309)
    tails = (1.0762, 1.5805, 0.3627, 0.5697)
    window = [stats(m, first=f, tail=t, count=25) for m, f, t in zip(means, firsts, tails, strict=True)]
    memory = dict(previous=0.1191, best=0.006697, initial=1.8)
    assert assess(window, HealthConfig(), **memory)[0] == [True] * 4  # its own spread alone: the fault
    healthy, reasons = assess(window, HealthConfig(), **memory, level_noise=1.4e-6)
    assert healthy == [False, False, True, False], reasons
    assert "reference 0.006697" in reasons[1]
    # the smaller of the two counts: a level measured on wider batches does not widen this window's draw
    wide = assess(window, HealthConfig(), **memory, level_noise=5.0)
    assert wide == assess(window, HealthConfig(), **memory)


def test_health_memory_hands_the_last_windows_first_loss_spread_to_the_next():
    from hdet_ray.engine.state import HealthMemory

    memory = HealthMemory()
    calm = [stats(x, first=f, count=25) for x, f in ((0.12, 1e-6), (0.3, 0.0), (0.2, 2e-6), (0.06, 0.0))]
    memory.initial_loss, memory.best_loss = 1.8, 0.006697
    healthy, _ = memory.assess(calm, HealthConfig())
    memory.remember([s.mean_loss for s in calm], healthy, rolled_back=False)
    assert memory.first_noise < 1e-5
    firsts = (0.0, 0.5312, 2.0e-7, 1.8962)
    means = (0.9022, 1.5566, 0.3404, 0.8309)
    tails = (1.0762, 1.5805, 0.3627, 0.5697)
    damaged = [stats(m, first=f, tail=t, count=25) for m, f, t in zip(means, firsts, tails, strict=True)]
    healthy, _ = memory.assess(damaged, HealthConfig())
    assert healthy == [False, False, True, False]
    restored = HealthMemory()
    restored.load_state_dict(memory.state_dict())
    assert restored.first_noise == memory.first_noise > 0.5  # this window's, for the next
    older = memory.state_dict()
    del older["first_noise"]
    restored.load_state_dict(older)  # a checkpoint from before the field: not known
    assert math.isnan(restored.first_noise)


def test_blowup_noise_must_be_finite_and_non_negative():
    for bad in (-1.0, math.nan, math.inf):
        with pytest.raises(ValueError, match="blowup_noise"):
            HealthConfig(blowup_noise=bad)


def test_a_blow_up_from_a_negative_loss_is_caught_and_a_wiggle_there_is_not():
    # a Gaussian negative log-likelihood (`benchmarks.unseen`'s heteroscedastic regression) starts near 0.6
    # and ends near -0.6; "above 2 x -0.5" is judged on the distance from zero, not as a loss above -1.0
    cfg = HealthConfig()
    memory = dict(previous=-0.5, best=-0.5, initial=0.6)
    window = [
        stats(0.1, first=-0.5, tail=0.3),  # rose 0.8 above -0.5: over |-0.5| and over 1/4 of the progress
        stats(-0.45, first=-0.5, tail=-0.4),  # a wiggle of 0.1
        stats(-0.5, first=-0.5),
        stats(-0.52, first=-0.5),
    ]
    healthy, reasons = assess(window, cfg, **memory)
    assert healthy == [False, True, True, True] and "blew up" in reasons[0], reasons
    assert "0.8 above reference -0.5" in reasons[0]  # not "0.3 > 2 x reference -0.5"
    # a window that starts at a loss that rose from -0.5 to -0.3 did not regress past the reference
    # (`regressed_start`): a replica at -0.2 is judged against -0.3 and is healthy
    start = [stats(-0.25, first=-0.3, tail=-0.2), stats(-0.3, first=-0.3), stats(-0.35, first=-0.3)]
    assert assess(start, cfg, **memory)[0] == [True, True, True]


def test_a_network_back_at_its_first_window_loss_is_dead_without_chance_loss():
    cfg = HealthConfig()  # chance_loss=None: the user named no chance level
    assert cfg.chance_loss is None
    back = [stats(2.30, first=2.31, tail=2.30, low=0.9) for _ in range(4)]
    healthy, reasons = assess(back, cfg, previous=0.6, best=0.5, initial=2.31)
    assert healthy == [False] * 4 and all("chance" in r for r in reasons.values())
    # a run that is still learning from its first-window level is healthy
    learning = [stats(1.2, first=1.3, tail=1.1, low=1.0) for _ in range(4)]
    assert assess(learning, cfg, previous=1.3, best=1.3, initial=2.31)[0] == [True] * 4
    # the first window itself: nothing learned yet, not dead
    first = [stats(2.29, first=2.31, tail=2.28, low=2.2) for _ in range(4)]
    assert assess(first, cfg)[0] == [True] * 4


def test_a_start_below_the_first_loss_on_a_run_that_has_not_moved_is_a_draw_not_learning():
    # benchmarks.unseen's physics-informed network from 10x too low, seed 1: a step's loss varies 15% with
    # its collocation points; window 1 started at 1468 (the first window's start: 1732) while window 0's
    # median was 1787, and its replicas, still at 1763 to 1802, were all "back at chance" and rolled back
    cfg = HealthConfig()
    flat = [stats(m, first=1468.4, tail=m) for m in (1802.3, 1763.3, 1765.6, 1783.0)]
    memory = dict(previous=1787.2, best=1787.2, initial=1732.2)
    assert assess(flat, cfg, **memory) == ([True] * 4, {})
    healthy, reasons = assess(flat, HealthConfig(start_needs_progress=False), **memory)
    assert healthy == [False] * 4 and all("chance" in r for r in reasons.values())  # the old verdict
    # a run whose window median has moved below its first loss, or that has had a blow-up, keeps the start
    # as evidence: the digits MLP from 10x too high learned in window 0 (median 2.25, start of window 1
    # 1.98 against 2.30) and died in window 1, the rollback that rescues it
    died = [stats(m, first=1.98, tail=m) for m in (2.4, 2.35, 2.5, 2.6)]
    assert assess(died, cfg, previous=2.2475, best=2.2475, initial=2.30)[0] == [False] * 4
    assert assess(flat, cfg, **memory, blown=True)[0] == [False] * 4
    # a chance level the user named keeps the start as evidence, as it keeps a replica's lowest batch
    named = HealthConfig(chance_loss=1732.2)
    assert assess(flat, named, **memory)[0] == [False] * 4


def test_a_window_with_a_replica_above_the_first_loss_is_no_progress_even_with_its_median_below():
    # benchmarks.unseen's deep linear network from 10x too low, seed 3: window 1's median (1.3475) was 2%
    # below the initial 1.3796 with one replica at 1.4228, window 2 started at 1.2325 by the draw, and three
    # replicas still on the first plateau were "back at chance": three rollbacks from a rate already 10x
    # too low, and the run never left its plateau
    cfg = HealthConfig()
    window = [
        stats(m, first=1.2325, tail=t)
        for m, t in ((1.3874, 1.436), (1.3709, 1.386), (1.366, 1.354), (1.3309, 1.33))
    ]
    memory = dict(previous=1.3475, best=1.3475, initial=1.3796)
    clear = 1.4021  # the lowest of the kept windows' highest replica losses: above the initial
    assert assess(window, cfg, **memory, clear=clear) == ([True] * 4, {})
    assert assess(window, cfg, **memory)[0] == [False, False, False, True]  # clear unknown: the medians' rule
    old = HealthConfig(progress_all_replicas=False)
    assert assess(window, old, **memory, clear=clear)[0] == [False, False, False, True]
    # the digits MLP from 10x too high had every replica of window 0 below its initial loss (2.2312 to
    # 2.2592 against 2.30) and died in window 1: still the rollback that rescues it
    died = [stats(m, first=1.98, tail=m) for m in (2.4, 2.35, 2.5, 2.6)]
    assert assess(died, cfg, previous=2.2475, best=2.2475, initial=2.30, clear=2.2592)[0] == [False] * 4


def test_one_replica_that_learned_is_enough_to_call_a_stuck_window_dead():
    # the digits MLP from 10x too high on 2 processes, seed 3: one replica reached 1.93 (the start: 2.31)
    # while the other sat at 2.64, so every median of the run stayed above 2.08; then both replicas sat at
    # ln 10 whatever their rates. With the medians alone the run had never learned and nothing saw it die
    cfg = HealthConfig()
    dead = [stats(2.399, first=2.457), stats(2.354, first=2.457)]
    memory = dict(previous=2.472, best=2.388, initial=2.313, stuck_before=1)
    healthy, reasons = assess(dead, cfg, **memory, best_replica=1.932)
    assert healthy == [False, False] and all(r.startswith("stuck") for r in reasons.values())
    assert assess(dead, HealthConfig(replica_learned=False), **memory, best_replica=1.932)[0] == [True] * 2
    assert assess(dead, cfg, **memory)[0] == [True] * 2  # no replica has learned: as before
    # a replica that has not yet left its first level beside one that learned is slow, not dead: the
    # replicas still answer to their rates
    slow = [stats(2.05, first=2.2), stats(2.26, first=2.2)]
    assert assess(slow, cfg, previous=2.26, best=2.26, initial=2.31, best_replica=2.0)[0] == [True] * 2


def test_after_a_rollback_the_restored_state_is_where_the_run_had_got_to():
    # benchmarks.unseen's ViT from 10x too high, seed 2: the run drifted from its best median 0.68 to 1.5
    # over windows that each passed, was rolled back to the last of them (1.52), and the next window's
    # replicas (1.35 to 1.54, from a start of 1.66) failed against 0.68 again, three rollbacks in a row
    cfg = HealthConfig()
    window = [stats(x, first=1.656) for x in (1.539, 1.381, 1.35, 1.481)]
    memory = dict(previous=1.52, best=0.677, initial=2.46)
    healthy, reasons = assess(window, cfg, **memory)
    assert healthy == [False, False, True, False] and "blew up" in reasons[0]
    assert assess(window, cfg, **memory, restored=1.517)[0] == [True] * 4
    # a rollback to a good state is judged as before: a replica that doubles it blew up
    worse = [stats(x, first=0.7) for x in (0.7, 0.75, 0.72, 1.6)]
    good = dict(previous=0.7, best=0.677, initial=2.46)
    assert (
        assess(worse, cfg, **good, restored=0.68)[0] == assess(worse, cfg, **good)[0] == [True] * 3 + [False]
    )


def test_a_dead_network_below_its_first_loss_is_stuck_not_healthy():
    # benchmarks.unseen's tabular task from 10x too high, seed 3: the untrained network starts at 2.18, the
    # run learned to 1.95, then every replica sat at ln 8 = 2.08 whatever its rate: below the first loss, so
    # the fell-back-to-chance rule (chance inferred as 2.18) missed it
    dead = [stats(x, first=2.09) for x in (2.083, 2.093, 2.089, 2.091)]
    healthy, reasons = assess(dead, HealthConfig(), previous=2.1, best=1.95, initial=2.18, stuck_before=1)
    assert healthy == [False] * 4 and all(
        r.startswith("stuck: every replica at 2.09") for r in reasons.values()
    )
    # the first window that meets the rule passes (`stuck_windows`: a live network can meet it for a window)
    assert assess(dead, HealthConfig(), previous=2.1, best=1.95, initial=2.18)[0] == [True] * 4
    assert (
        assess(dead, HealthConfig(stuck_windows=1), previous=2.1, best=1.95, initial=2.18)[0] == [False] * 4
    )
    assert (
        assess(dead, HealthConfig(stuck_spread=0.0), previous=2.1, best=1.95, initial=2.18)[0] == [True] * 4
    )
    # replicas that differ by more than 2% are still answering to their rates
    alive = [stats(x, first=2.09) for x in (2.02, 2.05, 2.08, 2.11)]
    assert assess(alive, HealthConfig(), previous=2.1, best=1.95, initial=2.18)[0] == [True] * 4
    # a slow start at a low rate is flat too, but it never learned: not dead
    slow = [stats(x, first=2.29) for x in (2.300, 2.299, 2.294, 2.302)]
    assert assess(slow, HealthConfig(), previous=2.29, best=2.286, initial=2.301)[0] == [True] * 4
    # a loss below zero (a log-density) that has not moved from its start is not "learned and given back"
    level = [stats(x, first=-0.5) for x in (-0.500, -0.501, -0.499, -0.502)]
    assert assess(level, HealthConfig(), previous=-0.5, best=-0.51, initial=-0.5)[0] == [True] * 4
    # late in the anneal the replicas agree near the run's best: not dead
    late = [stats(x, first=0.31) for x in (0.301, 0.302, 0.300, 0.303)]
    assert assess(late, HealthConfig(), previous=0.30, best=0.29, initial=2.3)[0] == [True] * 4


def test_blowup_progress_is_validated():
    import pytest

    with pytest.raises(ValueError, match="blowup_progress"):
        HealthConfig(blowup_progress=1.5)


def test_a_start_that_itself_blew_up_is_not_the_reference():
    # the run learned from 2.3 to 0.2; a window that excluded replicas averaged the rest into a model whose
    # start is 1.35, and every replica ends between 1.7 and 4.1: against the start that is "healthy" for
    # three of them (below 2 x 1.35), against the last median (0.2) every one of them blew up, so the run
    # rolls back to the last fully healthy sync instead of training on from the damage
    damaged = [stats(x, first=1.35) for x in (1.98, 4.13, 2.2, 1.66)]
    healthy, reasons = assess(damaged, HealthConfig(), previous=0.2, best=0.2, initial=2.3)
    assert healthy == [False] * 4 and "reference 0.2)" in reasons[3]
    off = HealthConfig(regressed_start=False)
    assert assess(damaged, off, previous=0.2, best=0.2, initial=2.3)[0] == [True, False, True, True]
    # a start above the median by less than a blow-up is the reference, as before (2.5 < 2 x 1.5)
    healthy, _ = assess(
        [stats(0.9, first=1.0), stats(1.0, first=1.0), stats(1.5, first=1.0, tail=2.5)],
        HealthConfig(),
        previous=1.5,
    )
    assert healthy == [True, True, True]
    # damage that came in over several windows, each less than 2x the last: judged against the run's best
    slow = [stats(x, first=1.0) for x in (2.32, 3.42, 0.98, 1.52)]
    healthy, reasons = assess(slow, HealthConfig(), previous=0.5, best=0.22, initial=2.3)
    assert healthy == [False] * 4 and "reference 0.22)" in reasons[2]
    # near zero loss the start doubling is noise (the absolute floor): the start stays the reference
    quiet = [stats(x, first=0.0021) for x in (0.002, 0.0022, 0.0019, 0.0021)]
    assert assess(quiet, HealthConfig(), previous=0.0009, best=0.0009, initial=2.3)[0] == [True] * 4


def test_a_network_killed_before_it_learned_is_stuck_once_a_replica_has_blown_up():
    # the digits MLP from 10x too high under fanout='local', seed 1: a replica blew up in each of windows 1
    # and 2 and was left out; from there every replica sat at ln 10 (the start: 2.321) whatever its rate.
    # The run never got 5% below its first loss, so "learned and gave back" could not see it die
    dead = [stats(x, first=2.31) for x in (2.319, 2.331, 2.333, 2.326)]
    memory = dict(previous=2.33, best=2.279, initial=2.321, stuck_before=1)
    healthy, reasons = assess(dead, HealthConfig(), **memory, blown=True)
    assert healthy == [False] * 4
    assert all("at chance 2.321 or above after a replica blew up" in r for r in reasons.values())
    assert assess(dead, HealthConfig(stuck_after_blowup=False), **memory, blown=True)[0] == [True] * 4
    # a rate merely too low is as flat at its first loss, but nothing of it blew up
    assert assess(dead, HealthConfig(), **memory)[0] == [True] * 4
    # with chance named, it is judged against chance: replicas well below it are alive, however flat
    assert assess(dead, HealthConfig(chance_loss=2.303), **memory, blown=True)[0] == [False] * 4
    low = [stats(x, first=1.5) for x in (1.50, 1.51, 1.505, 1.502)]
    assert assess(low, HealthConfig(chance_loss=2.303), **memory, blown=True)[0] == [True] * 4
    # replicas that still answer to their rates are alive
    apart = [stats(x, first=2.31) for x in (2.27, 2.32, 2.36, 2.40)]
    assert assess(apart, HealthConfig(), **memory, blown=True)[0] == [True] * 4


def test_replicas_level_whatever_their_rate_well_above_the_run_s_best_are_stuck():
    # benchmarks.unseen's autoencoder from 10x too high, seed 0: its loss fell from 0.25 to 0.050, rose in
    # the rise, and from there every replica sat at the loss of the training images' mean whatever its rate,
    # far below the first loss that the other stuck rules read as chance
    dead = [stats(x, first=0.0737) for x in (0.0737, 0.0738, 0.0745, 0.0742)]
    memory = dict(previous=0.0741, best=0.0502, initial=0.2547, stuck_before=1)
    healthy, reasons = assess(dead, HealthConfig(), **memory)
    assert healthy == [False] * 4
    assert all("above 1.25 x the run's best 0.0502" in r for r in reasons.values())
    assert assess(dead, HealthConfig(stuck_above_best=None), **memory)[0] == [True] * 4
    assert assess(dead, HealthConfig(stuck_above_best=1.5), **memory)[0] == [True] * 4  # 0.074 < 1.5 x 0.050
    # one such window is not enough (stuck_windows)
    assert assess(dead, HealthConfig(), **{**memory, "stuck_before": 0})[0] == [True] * 4
    # level near its best is a run that has converged, not a dead one
    near = [stats(x, first=0.055) for x in (0.0550, 0.0552, 0.0556, 0.0553)]
    assert assess(near, HealthConfig(), **memory)[0] == [True] * 4
    # replicas that still answer to their rates are alive, however far above their best
    apart = [stats(x, first=0.08) for x in (0.070, 0.076, 0.082, 0.090)]
    assert assess(apart, HealthConfig(), **memory)[0] == [True] * 4
    # near zero loss a doubling is noise: 1e-4 to 2e-4 gives back 0.005% of the progress from 2.3
    tiny = [stats(x, first=2.0e-4) for x in (2.00e-4, 2.01e-4, 2.02e-4, 2.03e-4)]
    memory_tiny = dict(previous=2.0e-4, best=1.0e-4, initial=2.3, stuck_before=1)
    assert assess(tiny, HealthConfig(), **memory_tiny)[0] == [True] * 4
    # judged on the difference: a negative loss (a log-density) that rose from -2.0 to -1.0 has left its best
    negative = [stats(x, first=-1.0) for x in (-1.000, -1.001, -1.002, -1.003)]
    memory_negative = dict(previous=-1.0, best=-2.0, initial=3.0, stuck_before=1)
    assert assess(negative, HealthConfig(), **memory_negative)[0] == [False] * 4


def test_a_dead_network_whose_shards_set_its_replicas_apart_is_stuck_once_it_had_learned():
    # benchmarks.unseen's distilled student from 10x too high, seed 4: it learned from 17.7 to 16.1 in its
    # first window, then every replica sat at 17.5 to 18.6 for the rest of the run, each rank at its own
    # level whatever rate the rotation gave it (its shard's data): 3% to 4% apart, never within 2%
    dead = [stats(x, first=18.339) for x in (17.835, 18.502, 18.555, 17.819)]
    memory = dict(previous=18.19, best=16.12, initial=17.679, stuck_before=1)
    healthy, reasons = assess(dead, HealthConfig(), **memory)
    assert healthy == [False] * 4 and all("above the run's best 16.12" in r for r in reasons.values())
    assert assess(dead, HealthConfig(stuck_spread_learned=None), **memory)[0] == [True] * 4
    assert assess(dead, HealthConfig(stuck_spread_learned=0.03), **memory)[0] == [True] * 4
    # replicas 5% apart still answer to their rates
    apart = [stats(x, first=18.3) for x in (17.6, 18.0, 18.3, 18.5)]
    assert assess(apart, HealthConfig(), **memory)[0] == [True] * 4
    # a run that never learned needs the 2% agreement, blown up or not: a live loss above its first level
    # (a factorization whose factors grow) is as flat as a dead one, 3% apart
    flat = [stats(x, first=2.33) for x in (2.28, 2.33, 2.35, 2.30)]
    never = dict(previous=2.33, best=2.279, initial=2.321, stuck_before=1)
    assert assess(flat, HealthConfig(), **never, blown=True)[0] == [True] * 4
    assert assess(flat, HealthConfig(stuck_spread=0.04), **never, blown=True)[0] == [False] * 4


def test_stuck_spread_learned_is_validated():
    with pytest.raises(ValueError, match="stuck_spread_learned must be in"):
        HealthConfig(stuck_spread_learned=1.0)


def test_stuck_above_best_must_be_above_one():
    with pytest.raises(ValueError, match="stuck_above_best must be > 1 or None"):
        HealthConfig(stuck_above_best=1.0)
