"""setattn.matmul: float32 products through oneDNN only where they stay exact, and the
previous setting always restored."""

import pytest
import torch

from setattn import attend, complete, matmul, scores
from setattn.topology import ptr_from_sizes

backend = matmul._backend()


@pytest.fixture(autouse=True)
def _fresh_probe():
    matmul.onednn_is_exact.cache_clear()
    yield
    matmul.onednn_is_exact.cache_clear()


def test_setting_comes_back_after_the_block_and_after_an_error():
    assert backend is not None, "the pinned PyTorch (constraints.txt) has the setting"
    before = backend.fp32_precision
    with matmul.fast_float32_matmul() as on:
        assert backend.fp32_precision == ("bf16" if on else before)
    assert backend.fp32_precision == before
    with pytest.raises(RuntimeError), matmul.fast_float32_matmul():
        raise RuntimeError
    assert backend.fp32_precision == before


def test_disabled_or_inexact_leaves_the_setting_alone(monkeypatch):
    assert backend is not None, "the pinned PyTorch (constraints.txt) has the setting"
    before = backend.fp32_precision
    with matmul.fast_float32_matmul(enabled=False) as on:
        assert not on and backend.fp32_precision == before
    monkeypatch.setattr(matmul, "_probe_exact", lambda: False)  # a CPU that rounds
    with matmul.fast_float32_matmul() as on:
        assert not on and backend.fp32_precision == before
    assert backend.fp32_precision == before  # the probe restored it too


def test_products_inside_are_float32_products():
    """Inside the block (on or off), a product whose inputs bfloat16 cannot hold is
    exact, and attention matches the float64 result as closely as outside it."""
    a = torch.full((300, 64), 1.0 + 2.0**-12)
    b = torch.eye(64)
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(96, 4, 16, generator=gen) for _ in range(3))
    top = complete(ptr_from_sizes([40, 56]))
    want = attend(q.double(), k.double(), v.double(), top, scores.ScaledDot())
    outside = (attend(q, k, v, top, scores.ScaledDot()) - want).abs().max()
    with matmul.fast_float32_matmul():
        assert torch.equal(a @ b, a)
        inside = (attend(q, k, v, top, scores.ScaledDot()) - want).abs().max()
    assert inside <= max(4 * outside, 1e-6)
