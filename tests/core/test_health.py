import math

from hdet_ray.core.health import HealthConfig, ReplicaStats, assess


def stats(mean, first=2.0, tail=None, low=None, finite=True, count=10):
    return ReplicaStats(mean_loss=mean, first_loss=first, tail_loss=mean if tail is None else tail,
                        min_loss=mean if low is None else low, params_finite=finite, count=count)


def test_nan_loss_and_nan_parameters_are_unhealthy():
    healthy, reasons = assess([stats(1.0), stats(math.nan), stats(1.0, finite=False), stats(1.1)], HealthConfig())
    assert healthy == [True, False, False, True]
    assert "non-finite loss" in reasons[1] and "non-finite parameters" in reasons[2]


def test_finite_blow_up_is_caught_against_the_larger_of_start_and_previous():
    cfg = HealthConfig(blowup_factor=2.0)
    # start (mean of first losses) = 1.0; replica 2's tail 2.5 > 2 x 1.0
    healthy, reasons = assess([stats(0.9, first=1.0), stats(1.0, first=1.0), stats(1.5, first=1.0, tail=2.5)], cfg)
    assert healthy == [True, True, False] and "blew up" in reasons[2]
    # with a previous window's median of 1.5 the reference is 1.5: 2.5 < 3.0 passes
    healthy, _ = assess([stats(0.9, first=1.0), stats(1.0, first=1.0), stats(1.5, first=1.0, tail=2.5)], cfg, previous=1.5)
    assert healthy == [True, True, True]


def test_falling_back_to_chance_after_learning_is_death_not_health():
    cfg = HealthConfig(chance_loss=math.log(10))
    chance = math.log(10)
    dead = stats(chance, first=1.5, low=1.2)          # had learned (min 1.2), now at chance
    above = stats(2.6, first=1.5, low=1.2)            # worse than chance: also dead
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
    assert assess([stats(math.nan, count=0), stats(math.nan, count=0, finite=False)], HealthConfig())[0] == [True, False]
