"""The stacked blend weight's pure parts: the weight fitted per task, the cross-fitting
that keeps each half's predictions out of its own fit, and the ratio's direction."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture()
def bench(monkeypatch):
    """benchmarks/decisions/blend_stack.py, importable (with the benchmarks' helpers) for
    this test only."""
    monkeypatch.syspath_prepend(str(BENCH))
    monkeypatch.syspath_prepend(str(BENCH / "decisions"))
    import blend_stack

    return blend_stack


def parts(bench, y, network, kernel, task="regression"):
    return bench.Parts(Path("run"), task, y, network, kernel, ["C"] * len(y))


def test_the_weight_goes_to_the_part_that_predicts(bench):
    g = torch.Generator().manual_seed(1)
    y = torch.randn(40, 2, generator=g, dtype=torch.float64)
    noise = torch.randn(40, 2, generator=g, dtype=torch.float64)
    # task 0: the kernel is exact, task 1: the network is
    network = torch.stack([y[:, 0] + noise[:, 0], y[:, 1]], 1)
    kernel = torch.stack([y[:, 0], y[:, 1] + noise[:, 1]], 1)
    p = parts(bench, y, network, kernel)
    weights = bench.fitted_weights(p, torch.arange(40))
    assert weights.tolist() == pytest.approx([0.0, 1.0], abs=1e-12)
    predicted, whole = bench.cross_fitted(p)
    assert torch.allclose(predicted, y) and torch.equal(whole, weights)


def test_unlabelled_rows_are_left_out_of_the_fit(bench):
    y = torch.tensor([[1.0], [2.0], [float("nan")], [4.0]], dtype=torch.float64)
    network = y.nan_to_num(100.0)  # exact where labelled, wild where not
    kernel = torch.zeros(4, 1, dtype=torch.float64)
    assert bench.fitted_weights(parts(bench, y, network, kernel), torch.arange(4)).item() == 1.0


def test_each_half_is_predicted_by_the_other_half_s_weight(bench):
    # the network is exact on the first half (as the seeded halving draws it) and off by
    # 4 on the second, the kernel off by 2 everywhere: a half never sees its own rows
    order = torch.randperm(8, generator=torch.Generator().manual_seed(0))
    first, second = order[:4], order[4:]
    y = torch.zeros(8, 1, dtype=torch.float64)
    network = torch.zeros(8, 1, dtype=torch.float64)
    network[second] = 4.0
    kernel = torch.full((8, 1), 2.0, dtype=torch.float64)
    p = parts(bench, y, network, kernel)
    assert bench.fitted_weights(p, first).item() == 1.0  # the network alone
    assert bench.fitted_weights(p, second).item() == 0.0  # the kernel alone
    predicted, _ = bench.cross_fitted(p)
    assert torch.equal(predicted[second], network[second])  # the first half's weight
    assert torch.equal(predicted[first], kernel[first])  # the second half's weight


def test_a_ratio_below_one_means_the_stacked_weight_is_better(bench):
    assert bench.ratio(0.9, 1.0, "rmse") == pytest.approx(0.9)
    assert bench.ratio(0.95, 0.9, "roc_auc") == pytest.approx(0.9 / 0.95)

