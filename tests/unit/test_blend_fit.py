"""The network's blend weight fitted per task: the shrunk least-squares weight."""

from __future__ import annotations

import pytest
import torch

from setattn.molprop.blend_fit import shrunk_weight


def test_the_shrunk_weight_keeps_a_clear_step_and_drops_a_noisy_one():
    g = torch.Generator().manual_seed(2)
    y = torch.randn(400, generator=g, dtype=torch.float64)
    # a clear case: the kernel is exact, the network far off; the step to 0 is kept
    r_kernel = torch.zeros(400, dtype=torch.float64)
    r_network = torch.randn(400, generator=g, dtype=torch.float64)
    assert shrunk_weight(r_network, r_kernel) == pytest.approx(0.0, abs=1e-9)
    # two equally good, independent parts on 6 molecules: the unshrunk weight wanders,
    # the shrunk one moves less far from 0.5
    r_network = torch.randn(6, generator=g, dtype=torch.float64)
    r_kernel = torch.randn(6, generator=g, dtype=torch.float64)
    gap = r_network - r_kernel
    raw = -float((r_kernel * gap).sum()) / float(gap.square().sum())
    shrunk = shrunk_weight(r_network, r_kernel)
    assert abs(shrunk - 0.5) < abs(raw - 0.5)
    assert 0.0 <= shrunk <= 1.0
    assert shrunk_weight(y, y) == 0.5  # the parts agree: nothing to fit
