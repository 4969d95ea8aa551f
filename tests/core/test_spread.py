import math

import numpy as np
import pytest

from hdet_ray.core.spread import (
    balanced_permutations,
    coordinates,
    linear_spread,
    log_spread,
    permutation,
    replica_width,
    spread,
)


def test_linear_spread_matches_the_paper_formula():
    # N = 8, alpha = 1/9: the paper's rates 0.0008..0.001 around 0.0009.
    rho = linear_spread(8, 1 / 9)
    assert len(rho) == 8
    assert math.isclose(sum(rho), 8.0)
    assert math.isclose(rho[0] * 0.0009, 0.0008)
    assert math.isclose(rho[-1] * 0.0009, 0.001)
    # hand-computed for N = 4, alpha = 0.3: d = 1.5, offsets -1.5..1.5
    assert linear_spread(4, 0.3) == pytest.approx([0.7, 0.9, 1.1, 1.3])
    assert linear_spread(1, 0.5) == [1.0]
    assert linear_spread(2, 0.2) == pytest.approx([0.8, 1.2])  # d = max(0.5, 0.5)


def test_log_spread_is_geometric_and_log_symmetric():
    rho = log_spread(4, 2.0)
    assert rho == pytest.approx([0.5, 2 ** (-1 / 3), 2 ** (1 / 3), 2.0])
    assert math.isclose(sum(math.log(r) for r in rho), 0.0, abs_tol=1e-12)
    assert log_spread(1, 10.0) == [1.0]
    assert log_spread(3, 1.0) == [1.0, 1.0, 1.0]


def test_log_below_keeps_the_ratios_with_the_top_replica_at_the_base():
    rho = spread("log_below", 4, 1.25)
    assert rho[-1] == 1.0 and rho == sorted(rho)
    assert rho[0] == pytest.approx(1 / 1.25**2)
    # the same ratios as the log spread and the mean-1 one: only where the base sits differs
    for other in (log_spread(4, 1.25), spread("log_mean1", 4, 1.25)):
        assert [r / rho[0] for r in rho] == pytest.approx([r / other[0] for r in other])
    assert spread("log_below", 1, 3.0) == [1.0]
    assert spread("log_below", 3, 1.0) == [1.0, 1.0, 1.0]
    with pytest.raises(ValueError, match="factor"):
        spread("log_below", 4, 0.5)


def test_two_or_three_replicas_are_narrowed_to_the_variance_of_four():
    def log_variance(n):
        logs = [math.log(r) for r in log_spread(n, 1.25 ** replica_width(n))]
        return float(np.var(logs))

    assert log_variance(2) == pytest.approx(log_variance(4))
    assert log_variance(3) == pytest.approx(log_variance(4))
    assert replica_width(2) == pytest.approx(0.7454, abs=1e-4)  # factor 1.25 acts as 1.181
    # 4 and more keep the size: their variance is already at most 4's, and the top replica stays put
    assert [replica_width(n) for n in (1, 4, 5, 8, 64)] == [1.0] * 5
    assert log_variance(8) < log_variance(4)
    # the linear spread's alpha scales the same way (its positions are the same z)
    lin = linear_spread(2, 0.2 * replica_width(2))
    assert float(np.var(lin)) == pytest.approx(float(np.var(linear_spread(4, 0.2))))


@pytest.mark.parametrize(
    "kind,size", [("linear", 1.0), ("linear", -0.1), ("log", 0.5), ("log", math.inf), ("cubic", 2)]
)
def test_bad_spreads_name_the_problem(kind, size):
    with pytest.raises(ValueError, match="spread"):
        spread(kind, 4, size)


def test_coordinates():
    assert coordinates([0.5, 2.0], "log") == pytest.approx([-math.log(2), math.log(2)])
    assert coordinates([0.7, 1.3], "linear") == pytest.approx([-0.3, 0.3])


def test_permutations_are_deterministic_and_vary_by_window_and_name():
    a = permutation(8, seed=3, window=5, name="lr")
    assert a == permutation(8, seed=3, window=5, name="lr")
    assert sorted(a) == list(range(8))
    by_window = {tuple(permutation(8, 3, w, "lr")) for w in range(20)}
    by_name = {tuple(permutation(8, 3, 5, n)) for n in ("lr", "weight_decay", "dropout", "beta1")}
    assert len(by_window) > 10
    assert len(by_name) > 1


def test_permutation_leaves_the_global_rngs_alone():
    import random

    state_np, state_py = np.random.get_state()[1].copy(), random.getstate()
    permutation(8, 0, 0, "lr")
    balanced_permutations(8, ["lr", "wd"], 0, 0)
    assert (np.random.get_state()[1] == state_np).all()
    assert random.getstate() == state_py


def _corr(a, b):
    return float(np.corrcoef(a, b)[0, 1])


@pytest.mark.parametrize("n", [4, 5, 8])
def test_balanced_design_decorrelates_hyperparameters(n):
    for window in range(5):
        perms = balanced_permutations(n, ["lr", "wd", "dropout"], seed=1, window=window)
        assert all(sorted(p) == list(range(n)) for p in perms.values())
        worst = max(
            abs(_corr(perms[a], perms[b])) for a, b in [("lr", "wd"), ("lr", "dropout"), ("wd", "dropout")]
        )
        assert worst <= 0.4 + 1e-9  # three 4-vectors cannot all be orthogonal; 0.4 is the best pair
    perms = balanced_permutations(4, ["lr", "wd"], seed=1, window=0)
    assert abs(_corr(perms["lr"], perms["wd"])) < 1e-12  # exactly orthogonal for N = 4
