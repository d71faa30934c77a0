"""Split conformal prediction intervals (setattn.molprop.conformal): the quantile rank,
coverage on fresh draws, constant width for one model, missing labels, the report."""

from __future__ import annotations

import math

import pytest
import torch

from setattn.molprop.conformal import Calibration, bounds, calibrate, interval_report, quantile


def _draw(n: int, generator: torch.Generator) -> tuple[torch.Tensor, ...]:
    """Heteroscedastic data whose error scale is the std: y = mean + std * noise."""
    mean = torch.randn(n, 2, generator=generator, dtype=torch.float64)  # (n, 2)
    std = 0.1 + torch.rand(n, 2, generator=generator, dtype=torch.float64) * 2  # (n, 2)
    y = mean + std * torch.randn(n, 2, generator=generator, dtype=torch.float64)  # (n, 2)
    return y, mean, std


def test_scale_is_the_conformal_order_statistic():
    # one target, std 0 (one model): floor 1, scores are |y - mean| = 1..9
    y = torch.arange(1.0, 10.0)[:, None]  # (9, 1)
    mean, std = torch.zeros(9, 1), torch.zeros(9, 1)
    cal = calibrate(y, mean, std, level=0.9)  # ceil(10 * 0.9) = 9th smallest
    assert cal.scale == [9.0] and cal.floor == [1.0] and cal.calibration_size == [9]
    cal = calibrate(y, mean, std, level=0.5)  # ceil(10 * 0.5) = 5th smallest
    assert cal.scale == [5.0]
    # 8 labels cannot give a 90 % interval: ceil(9 * 0.9) = 9 > 8
    assert math.isinf(calibrate(y[:8], mean[:8], std[:8]).scale[0])


def test_coverage_holds_on_fresh_draws_and_std_orders_errors():
    generator = torch.Generator().manual_seed(0)
    cal = calibrate(*_draw(2000, generator), level=0.9)
    y, mean, std = _draw(20000, generator)
    report = interval_report(y, mean, std, cal)
    assert 0.88 <= report["coverage"] <= 0.92
    assert all(0.87 <= t["coverage"] <= 0.93 for t in report["per_target"])
    assert report["spearman"] > 0.3  # errors grow with the std by construction
    # a wrong level gives a different coverage: the check can fail
    low = interval_report(y, mean, std, calibrate(*_draw(2000, generator), level=0.5))
    assert 0.47 <= low["coverage"] <= 0.53


def test_one_model_gives_constant_width_and_no_spearman():
    generator = torch.Generator().manual_seed(1)
    y, mean, _ = _draw(500, generator)
    zeros = torch.zeros_like(mean)
    cal = calibrate(y, mean, zeros)
    lower, upper = bounds(mean, zeros, cal)  # (500, 2) each
    width = upper - lower
    assert torch.allclose(width, width[:1].expand_as(width))
    assert interval_report(y, mean, zeros, cal)["spearman"] is None


def test_missing_labels_are_skipped():
    y = torch.tensor([[1.0, float("nan")], [2.0, 3.0], [float("nan"), 4.0]])  # (3, 2)
    cal = calibrate(y, torch.zeros(3, 2), torch.zeros(3, 2), level=0.5)
    assert cal.calibration_size == [2, 2]
    assert cal.scale == [2.0, 4.0]  # ceil(3 * 0.5) = 2nd smallest of {1, 2} and {3, 4}
    report = interval_report(y, torch.zeros(3, 2), torch.zeros(3, 2), cal)
    assert report["coverage"] == 1.0 and [t["molecules"] for t in report["per_target"]] == [2, 2]


def test_bad_level_shapes_and_saved_form():
    with pytest.raises(ValueError, match="level"):
        calibrate(torch.zeros(3, 1), torch.zeros(3, 1), torch.zeros(3, 1), level=1.0)
    with pytest.raises(ValueError, match="same shape"):
        calibrate(torch.zeros(3, 1), torch.zeros(3, 2), torch.zeros(3, 1))
    cal = calibrate(torch.arange(1.0, 20.0)[:, None], torch.zeros(19, 1), torch.zeros(19, 1))
    assert Calibration.from_dict(cal.to_dict()) == cal
    saved = {**cal.to_dict(), "scale": [None]}  # how metrics.json writes an infinite scale
    assert math.isinf(Calibration.from_dict(saved).scale[0])
    with pytest.raises(ValueError, match="metrics.json"):
        Calibration.from_dict({"level": 0.9}, "run/metrics.json")


def test_interpolated_quantile_positions():
    scores = torch.arange(1.0, 10.0, dtype=torch.float64)  # (9,) sorted
    # 1-based position (n + 1) * level: 10 * 0.85 = 8.5 lies halfway between 8 and 9
    assert quantile(scores, 0.85, guarantee=False) == pytest.approx(8.5)
    assert quantile(scores, 0.85, guarantee=True) == 9.0  # ceil(8.5) = 9th
    assert quantile(scores, 0.5, guarantee=False) == 5.0  # exactly the 5th
    assert quantile(scores, 0.9, guarantee=False) == 9.0  # position 9 = n
    assert quantile(scores, 0.05, guarantee=False) == 1.0  # before the first: the first
    assert math.isinf(quantile(scores[:8], 0.9, guarantee=False))  # 9 * 0.9 = 8.1 > 8
    assert math.isinf(quantile(scores[:0], 0.9, guarantee=False))


@pytest.mark.parametrize(("guarantee", "expected"), [(True, 19 / 21), (False, 0.9)])
def test_expected_coverage_of_each_quantile(guarantee, expected):
    # uniform scores: the coverage of a threshold q is q itself, so the mean of q over
    # many calibration sets of 20 is the rule's expected coverage: ceil(21 * 0.9) / 21
    # with the guarantee, 0.9 interpolated (the two differ by 0.0048)
    generator = torch.Generator().manual_seed(3)
    draws = torch.rand(20000, 20, generator=generator, dtype=torch.float64).sort(1).values
    mean = sum(quantile(row, 0.9, guarantee) for row in draws) / len(draws)
    assert mean == pytest.approx(expected, abs=0.0015)
