"""The chance model of ``benchmarks/coverage_noise.py`` against the closed forms."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture()
def noise(monkeypatch):
    """``benchmarks/coverage_noise.py``, importable for this test only."""
    monkeypatch.syspath_prepend(str(BENCH))
    import coverage_noise

    return coverage_noise


@pytest.mark.parametrize(("n", "m"), [(64, 64), (113, 40), (574, 574)])
def test_one_seed_matches_beta_binomial_moments(noise, n, m):
    k = math.ceil((n + 1) * 0.9)
    a, b = k, n + 1 - k
    mean = a / (a + b)
    var_c = a * b / ((a + b) ** 2 * (a + b + 1))  # Beta variance
    # Var(hits / m) = E[c (1 - c)] / m + Var(c)
    var = (mean - (var_c + mean**2)) / m + var_c
    draws = noise.simulate([(n, m)], 200_000, np.random.default_rng(1))
    assert draws.mean() == pytest.approx(mean, abs=4 * math.sqrt(var / 200_000))
    assert draws.std() == pytest.approx(math.sqrt(var), rel=0.02)
    assert noise.expected_coverage([(n, m)]) == pytest.approx(mean)


def test_averaging_seeds_shrinks_the_spread(noise):
    rng = np.random.default_rng(2)
    one = noise.simulate([(64, 64)], 100_000, rng).std()
    five = noise.simulate([(64, 64)] * 5, 100_000, rng).std()
    assert five == pytest.approx(one / math.sqrt(5), rel=0.03)


@pytest.mark.parametrize("n", [31, 64, 113])
def test_interpolated_rule_aims_at_the_level(noise, n):
    draws = noise.calibrated(n, False, 200_000, np.random.default_rng(3))
    assert noise.expected_coverage([(n, 10)], guarantee=False) == pytest.approx(0.9)
    assert draws.mean() == pytest.approx(0.9, abs=0.001)
    # it never covers more than the guaranteed rank, which is one score further or equal
    assert draws.mean() <= noise.calibrated(n, True, 200_000, np.random.default_rng(3)).mean()


def test_too_few_scores_cover_everything(noise):
    assert (noise.calibrated(8, False, 10, np.random.default_rng(0)) == 1.0).all()


def test_more_calibration_scores_narrow_the_spread_to_the_test_draw(noise):
    sizes = [(64, 64)] * 5
    spreads = [noise.simulate(sizes, 100_000, np.random.default_rng(4), scale=s).std()
               for s in (1.0, 3.0, math.inf)]
    assert spreads[0] > spreads[1] > spreads[2]
    # infinitely many scores: only the test draw, Binomial(64, 0.9) / 64 averaged over 5
    assert spreads[2] == pytest.approx(math.sqrt(0.9 * 0.1 / 64 / 5), rel=0.02)
    assert noise.expected_coverage(sizes, scale=math.inf) == 0.9
    # three times the scores: the guaranteed rank among 192, not 64
    assert noise.expected_coverage(sizes, scale=3.0) == pytest.approx(
        math.ceil(193 * 0.9) / 193)


def test_the_default_scale_draws_as_before(noise):
    # one Beta draw of the guaranteed rank, then the binomial test draw, per seed: the
    # stream behind the README's printed chances
    n, m = 64, 64
    k = math.ceil((n + 1) * 0.9)
    rng = np.random.default_rng(5)
    expected = rng.binomial(m, rng.beta(k, n + 1 - k, size=1000)) / m
    assert np.array_equal(noise.simulate([(n, m)], 1000, np.random.default_rng(5)), expected)
