"""`HealthMemory`: what a window leaves for the next one's health check and the rollback target."""

import math

from hdet_ray.core.health import HealthConfig
from hdet_ray.engine.state import HealthMemory


def memory(previous: float, best: float, initial: float) -> HealthMemory:
    return HealthMemory(previous_loss=previous, best_loss=best, initial_loss=initial)


def test_a_window_that_gave_back_half_the_progress_is_no_rollback_target():
    # the tabular classifier from 10x too high: learned from 2.23 to 1.87, then a fully healthy window whose
    # replicas sat at 2.07 to 2.13 on the way to ln 8: rolling back to it would restore a dying network
    dying = [2.073, 2.09, 2.118, 2.132]
    assert not memory(1.87, 1.87, 2.23).worth_keeping(dying, HealthConfig())
    assert memory(1.87, 1.87, 2.23).worth_keeping(dying, HealthConfig(stuck_spread=0.0))
    assert memory(1.87, 1.87, 2.23).worth_keeping(dying, None)  # no health checks: as before
    # a noisy window a little above the best is kept
    assert memory(1.87, 1.80, 2.23).worth_keeping([1.9, 1.95, 1.84, 2.0], HealthConfig())
    # the first window (nothing learned yet) and a run that never got 5% below its start are kept while
    # they are no worse than the start
    assert memory(math.nan, math.inf, 2.23).worth_keeping([2.2, 2.25, 2.1, 2.22], HealthConfig())
    assert memory(2.2, 2.2, 2.23).worth_keeping([2.2, 2.25, 2.1, 2.22], HealthConfig())


def test_a_window_above_the_initial_loss_is_no_rollback_target():
    # the digits MLP from 10x too high on 2 processes: replicas at 2.37 and 2.47 (the start: 2.31) after a
    # window that blew one up, dying before the run had learned 5%; rolling back to it restored a dead
    # network, and the run sat at ln 10 to its end. The start (kept first) is the better target
    dying = [2.372, 2.47]
    assert not memory(2.445, 2.445, 2.313).worth_keeping(dying, HealthConfig())
    assert not memory(math.nan, math.inf, 2.313).worth_keeping([2.445, 2.025], HealthConfig())
    assert memory(2.445, 2.445, 2.313).worth_keeping(dying, HealthConfig(stuck_spread=0.0))
    # a loss below zero (a log-density) reads the same way
    assert not memory(-1.0, -1.2, -1.1).worth_keeping([-1.05, -1.0], HealthConfig())
    assert memory(-1.0, -1.2, -1.1).worth_keeping([-1.25, -1.2], HealthConfig())


def test_a_window_well_above_the_run_s_best_is_no_rollback_target():
    # the autoencoder from 10x too high: learned from 0.25 to 0.050, then fully healthy windows at 0.075 on
    # the way to the mean image's plateau; a rollback to one of them restored the plateau (stuck_above_best)
    regressed = [0.0747, 0.0758, 0.0782, 0.0745]
    assert not memory(0.0514, 0.0514, 0.2547).worth_keeping(regressed, HealthConfig())
    assert memory(0.0514, 0.0514, 0.2547).worth_keeping(regressed, HealthConfig(stuck_above_best=None))
    assert memory(0.0514, 0.0514, 0.2547).worth_keeping([0.060, 0.061, 0.062, 0.059], HealthConfig())


def test_the_run_start_is_recorded_once_with_health_checks_on_or_off():
    # the controller's `fit_floor` reads it (`Window.initial_loss`), so it is kept even with health off
    from hdet_ray.core.health import ReplicaStats

    def stats(first):
        return [
            ReplicaStats(
                mean_loss=1.0, first_loss=f, tail_loss=1.0, min_loss=1.0, params_finite=True, count=5
            )
            for f in first
        ]

    for config in (None, HealthConfig()):
        m = HealthMemory()
        m.assess(stats([2.0, 2.2]), config)
        assert m.initial_loss == 2.1
        m.assess(stats([0.5, 0.5]), config)  # a later window's first losses do not replace it
        assert m.initial_loss == 2.1


def test_the_lowest_healthy_replica_of_a_kept_window_is_remembered():
    # health's `replica_learned` reads it: on 2 replicas the median is the worse one
    m = HealthMemory()
    m.remember([2.64, 1.93], [True, True], rolled_back=False)
    assert m.previous_loss == 2.64 and m.best_replica == 1.93
    m.remember([0.5, 3.0], [False, True], rolled_back=False)  # an excluded replica does not count
    assert m.best_replica == 1.93
    m.remember([1.0, 1.1], [True, True], rolled_back=True)  # nor does a window that was rolled back
    assert m.best_replica == 1.93
    restored = HealthMemory()
    restored.load_state_dict(m.state_dict())
    assert restored.best_replica == 1.93
    old = {"previous_loss": 1.0, "best_loss": 1.0, "initial_loss": 2.0}  # a checkpoint from before it
    restored.load_state_dict(old)
    assert restored.best_replica == math.inf


def test_a_rollback_returns_the_health_checks_to_the_kept_level():
    m = HealthMemory(initial_loss=2.46)
    m.keep([1.5, 1.52, 1.31, 1.39])  # the snapshot is kept from this window
    assert m.kept_loss == 1.5  # its median (the upper one of an even count)
    m.remember([1.67, 1.61, 1.51, 1.63], [False] * 4, rolled_back=True, restored=True)
    assert m.restored
    m.remember([1.4, 1.4], [True, True], rolled_back=False)
    assert not m.restored
    restored = HealthMemory()
    restored.load_state_dict({**m.state_dict(), "restored": 1.0})
    assert restored.restored and restored.kept_loss == 1.5


def test_the_stuck_rule_acts_on_its_second_window_in_a_row():
    from hdet_ray.core.health import ReplicaStats

    def window(losses):
        return [
            ReplicaStats(mean_loss=x, first_loss=2.09, tail_loss=x, min_loss=x, params_finite=True, count=5)
            for x in losses
        ]

    dead = window([2.083, 2.093, 2.089, 2.091])
    m = HealthMemory(previous_loss=2.1, best_loss=1.95, initial_loss=2.18)
    assert m.assess(dead, HealthConfig()) == ([True] * 4, {})  # the first such window passes
    assert m.stuck_run == 1
    healthy, reasons = m.assess(dead, HealthConfig())
    assert healthy == [False] * 4 and reasons[0].startswith("stuck")
    assert m.stuck_run == 0  # acted on: the count starts afresh
    m.assess(dead, HealthConfig())
    m.assess(window([1.9, 2.0, 2.1, 2.2]), HealthConfig())  # replicas that answer to their rates
    assert m.stuck_run == 0


def test_a_blow_up_is_remembered_for_the_stuck_rule_and_survives_a_resume():
    from hdet_ray.core.health import ReplicaStats

    def window(losses, first=2.31):
        return [
            ReplicaStats(mean_loss=x, first_loss=first, tail_loss=x, min_loss=x, params_finite=True, count=5)
            for x in losses
        ]

    flat = window([2.319, 2.331, 2.333, 2.326])
    m = HealthMemory(initial_loss=2.321)
    m.assess(window([2.28, 2.27, 2.28, 2.27], first=2.32), HealthConfig())
    m.remember([2.28, 2.27, 2.28, 2.27], [True] * 4, False)
    m.assess(flat, HealthConfig())
    assert m.assess(flat, HealthConfig()) == ([True] * 4, {})  # flat at the start, no blow-up: a low rate
    assert not m.blown
    healthy, reasons = m.assess(window([2.5, 9.0, 2.6, 2.55]), HealthConfig())
    assert healthy == [True, False, True, True] and m.blown
    resumed = HealthMemory()
    resumed.load_state_dict(m.state_dict())
    assert resumed.blown
    resumed.assess(flat, HealthConfig())
    healthy, reasons = resumed.assess(flat, HealthConfig())
    assert healthy == [False] * 4 and "after a replica blew up" in reasons[0]
    assert not HealthMemory().blown and HealthMemory(initial_loss=1.0).state_dict()["blown"] == 0.0


def test_a_restore_clears_the_blow_up():
    # after a rollback to a state from before the blow-up the rate is cut, and a slow restart from there is
    # flat near the first loss too: not a network the blow-up killed
    from hdet_ray.core.health import ReplicaStats

    flat = [
        ReplicaStats(mean_loss=x, first_loss=2.31, tail_loss=x, min_loss=x, params_finite=True, count=5)
        for x in (2.319, 2.331, 2.333, 2.326)
    ]
    m = HealthMemory(initial_loss=2.321, blown=True)
    m.remember([10.0] * 4, [False] * 4, True, restored=True)
    assert not m.blown
    m.assess(flat, HealthConfig())
    assert m.assess(flat, HealthConfig()) == ([True] * 4, {})
    kept = HealthMemory(initial_loss=2.321, blown=True)
    kept.remember([2.3, 9.0, 2.3, 2.3], [True, False, True, True], False)  # survivors averaged: still blown
    assert kept.blown


def test_a_replica_above_the_first_loss_before_the_run_learned_counts_as_a_blow_up():
    # `benchmarks.unseen`'s waveforms CNN from 10x too high, seed 9: in window 1 two replicas rose 13% and
    # 17% above the first loss (1.800, ln 6 = 1.792 is the constant guess), none past 2x; from window 2
    # every replica sat at the first loss whatever its rate, and no rule saw the network die
    from hdet_ray.core.health import ReplicaStats

    windows = [
        (1.800, [1.790, 1.789, 1.787, 1.787]),
        (1.775, [1.831, 1.848, 2.107, 2.035]),
        (1.808, [1.800, 1.805, 1.803, 1.800]),
        (1.818, [1.791, 1.789, 1.793, 1.809]),
    ]

    def verdicts(config, windows=windows):
        m, out = HealthMemory(), []
        for first, losses in windows:
            stats = [
                ReplicaStats(
                    mean_loss=x, first_loss=first, tail_loss=x, min_loss=x, params_finite=True, count=25
                )
                for x in losses
            ]
            healthy, reasons = m.assess(stats, config)
            m.remember(losses, healthy, rolled_back=not any(healthy), restored=not any(healthy))
            out.append((healthy, reasons))
        return out, m

    out, _ = verdicts(HealthConfig())
    assert [all(h) for h, _ in out] == [True, True, True, False]  # stuck two windows in a row: acts at 3
    assert all("after a replica blew up" in r for r in out[3][1].values())
    off, m = verdicts(HealthConfig(rose_above_start=False))
    assert all(all(h) for h, _ in off) and not m.blown
    # a rate too low sits flat on the same plateau without rising above it: never stuck
    flat = [(first, [min(x, 1.80) for x in losses]) for first, losses in windows]
    assert all(all(h) for h, _ in verdicts(HealthConfig(), flat)[0])
    # once the run has learned (a window 10% below its first loss), a rise is judged by the other rules
    learned = [windows[0], (1.6, [1.55, 1.5, 1.52, 1.53]), windows[1]]
    _, m = verdicts(HealthConfig(), learned)
    assert not m.blown


def test_the_health_memory_keeps_the_lowest_of_each_kept_windows_highest_healthy_loss():
    kept = HealthMemory(initial_loss=1.3796)
    kept.remember([1.4021, 1.2943, 1.3495, 1.363], [True] * 4, rolled_back=False)
    kept.remember([1.3323, 1.4228, 1.3475, 1.3004], [True] * 4, rolled_back=False)
    assert kept.best_clear == 1.4021
    kept.remember([9.0, 0.1, 0.2, 0.3], [False, True, True, True], rolled_back=False)  # the healthy only
    assert kept.best_clear == 0.3
    kept.remember([0.01, 0.02], [True, True], rolled_back=True)  # a rolled-back window is not kept
    assert kept.best_clear == 0.3
    restored = HealthMemory()
    restored.load_state_dict({k: v for k, v in kept.state_dict().items() if k != "best_clear"})
    assert restored.best_clear == kept.best_loss  # an older checkpoint: the medians' rule


def test_a_restored_snapshot_far_above_its_credited_level_is_judged_at_its_own_loss():
    # the digits MLP on full batches from 10x too high (seed 2): window 1's replicas ended at 0.47 to 1.16,
    # their average at 13.5; window 2 fell from 13.5 to 0.8 (window means 2.0 to 2.8), failed against 0.81
    # and rolled back to that same average. From there each window fell from 13.5 to 0.6 again
    from hdet_ray.core.health import ReplicaStats

    def stats(first, means, tails):
        return [
            ReplicaStats(mean_loss=m, first_loss=first, tail_loss=t, min_loss=t, params_finite=True, count=25)
            for m, t in zip(means, tails, strict=True)
        ]

    def after_the_rollback(config):
        m = HealthMemory(previous_loss=0.813, best_loss=0.813, initial_loss=2.31, best_replica=0.674)
        m.keep([0.709, 0.674, 0.813, 0.987])  # window 1: kept, its average the 13.5 state
        m.remember([2.27, 2.44, 2.01, 2.77], [False] * 4, rolled_back=True, restored=True)  # window 2
        return m, m.assess(stats(13.45, [1.85, 2.21, 1.92, 1.7], [0.64, 0.72, 0.6, 0.58]), config)

    m, (healthy, reasons) = after_the_rollback(HealthConfig())
    assert healthy == [True] * 4 and m.kept_loss == 13.45  # the snapshot's level from now on
    m, (healthy, reasons) = after_the_rollback(HealthConfig(restored_measured=False))
    assert healthy == [False] * 4 and "blew up" in reasons[0] and m.kept_loss == 0.813
    # where a replica passes against the credited level the verdict stands: those that fail are left out
    m = HealthMemory(previous_loss=1.59, best_loss=1.5, initial_loss=2.31)
    m.keep([1.59, 2.28, 1.59, 1.5])
    m.remember([2.77, 2.3, 3.07, 3.81], [False] * 4, rolled_back=True, restored=True)
    healthy, reasons = m.assess(stats(7.95, [2.5, 2.63, 2.95, 3.4], [1.8, 1.9, 2.0, 3.4]), HealthConfig())
    assert healthy == [True, True, True, False] and m.kept_loss == 1.59
    # a restored state that starts near its credited level keeps that level, and a rise from it still fails
    m = HealthMemory(previous_loss=0.813, best_loss=0.813, initial_loss=2.31)
    m.keep([0.709, 0.674, 0.813, 0.987])
    m.remember([2.27, 2.44, 2.01, 2.77], [False] * 4, rolled_back=True, restored=True)
    healthy, _ = m.assess(stats(0.9, [2.1, 2.2, 2.0, 2.3], [2.1, 2.2, 2.0, 2.3]), HealthConfig())
    assert healthy == [False] * 4 and m.kept_loss == 0.813


def test_a_level_that_rose_over_fully_healthy_windows_is_not_judged_against_the_best():
    # the digits MLP on a curriculum of ever noisier images (10x too high, seed 3): best median 0.41, every
    # window since fully healthy, window 13 at 0.89; window 14 started at 0.913 and its replicas ended the
    # window near 0.82-0.96, where the data had got harder, not where an average had broken the model
    from hdet_ray.core.health import ReplicaStats

    window = [
        ReplicaStats(mean_loss=x, first_loss=0.913, tail_loss=x, min_loss=x, params_finite=True, count=25)
        for x in (0.947, 0.956, 0.825, 0.818)
    ]

    def memory_after(windows):
        m = HealthMemory(initial_loss=2.31)
        for losses, healthy, rolled_back in windows:
            m.remember(losses, healthy, rolled_back, rolled_back)
        return m

    steady = [([0.42, 0.4, 0.41, 0.43], [True] * 4, False), ([0.9, 0.88, 0.89, 0.91], [True] * 4, False)]
    m = memory_after(steady)
    assert not m.unsteady and m.assess(window, HealthConfig())[0] == [True] * 4
    assert m.assess(window, HealthConfig(best_after_exclusion=False))[0] == [False, False, True, True]
    # a window since the best that left a replica out: the best counts again (damage may have come in)
    left_out = [*steady[:1], ([0.9, 0.88, 0.89, 3.0], [True, True, True, False], False), steady[1]]
    assert memory_after(left_out).unsteady
    assert memory_after(left_out).assess(window, HealthConfig())[0] == [False, False, True, True]
    rolled_back = [*steady[:1], ([0.9, 0.88, 0.89, 0.91], [False] * 4, True)]
    assert memory_after(rolled_back).unsteady
    # a fully healthy window that sets a new best clears it; a checkpoint from before the flag reads True
    assert not memory_after([*left_out, ([0.3, 0.31, 0.29, 0.3], [True] * 4, False)]).unsteady
    old = {k: v for k, v in m.state_dict().items() if k != "unsteady"}
    resumed = HealthMemory()
    resumed.load_state_dict(old)
    assert resumed.unsteady
    resumed.load_state_dict(m.state_dict())
    assert not resumed.unsteady
