"""The one stacking rule: the least-squares weight between two parts, shrunk or not."""

from __future__ import annotations

import pytest
import torch

from setattn.molprop.stacking import stack_weight


def test_the_shrunk_weight_keeps_a_clear_step_and_drops_a_noisy_one():
    g = torch.Generator().manual_seed(2)
    y = torch.randn(400, generator=g, dtype=torch.float64)
    # a clear case: the kernel is exact, the network far off; the step to 0 is kept
    r_kernel = torch.zeros(400, dtype=torch.float64)
    r_network = torch.randn(400, generator=g, dtype=torch.float64)
    assert stack_weight(r_network, r_kernel, 0.5, shrink=True) == pytest.approx(0.0, abs=1e-9)
    # two equally good, independent parts on 6 molecules: the unshrunk weight wanders,
    # the shrunk one moves less far from 0.5
    r_network = torch.randn(6, generator=g, dtype=torch.float64)
    r_kernel = torch.randn(6, generator=g, dtype=torch.float64)
    gap = r_network - r_kernel
    raw = -float((r_kernel * gap).sum()) / float(gap.square().sum())
    shrunk = stack_weight(r_network, r_kernel, 0.5, shrink=True)
    assert abs(shrunk - 0.5) < abs(raw - 0.5)
    assert 0.0 <= shrunk <= 1.0
    assert stack_weight(y, y, 0.5, shrink=True) == 0.5  # the parts agree: nothing to fit


def test_the_unshrunk_weight_is_the_clipped_least_squares_minimum():
    g = torch.Generator().manual_seed(5)
    r_a = torch.randn(50, generator=g, dtype=torch.float64)
    r_b = torch.randn(50, generator=g, dtype=torch.float64) * 0.5
    w = stack_weight(r_a, r_b, 1.0, shrink=False)
    # the weight minimises the stack's squared residual over a fine grid in [0, 1]
    grid = torch.linspace(0, 1, 2001, dtype=torch.float64)
    losses = torch.stack([(v * r_a + (1 - v) * r_b).square().mean() for v in grid])
    assert w == pytest.approx(float(grid[losses.argmin()]), abs=1e-3)
    # outside [0, 1] it is clipped: b strictly better and a anticorrelated noise
    assert stack_weight(r_b * 3, r_b, 1.0, shrink=False) == 0.0
    assert stack_weight(r_a, r_a, 1.0, shrink=False) == 1.0  # equal: the centre
