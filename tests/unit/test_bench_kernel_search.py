"""``benchmarks/kernel_search_same.py``: a saved kernel ridge's choice, searched again."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from setattn.molprop.kernel import KernelRidge

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
KERNEL = Path(__file__).resolve().parents[2] / "setattn" / "molprop" / "kernel.py"


@pytest.fixture()
def same(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    import kernel_search_same

    return kernel_search_same


def _saved(seed: int) -> dict:
    """A fitted kernel ridge's state as a molecule model saves it."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(60, 5, generator=g)  # (M, F)
    y = (x[:, :1] * 2 + 0.3 * torch.randn(60, 1, generator=g)).double()  # (M, 1)
    kernel = KernelRidge(60, 5, 1)
    kernel.fit(x, y)
    return {f"kernel.{k}": v for k, v in kernel.state_dict().items()}


def test_the_same_search_recovers_the_stored_choice(same):
    current = same._module(KERNEL)
    stored, before, now, worst = same.compare(_saved(0), current)
    assert stored == before == now
    assert worst < 1e-12


def test_a_search_that_differs_is_shown(same, tmp_path):
    changed = tmp_path / "kernel_changed.py"  # its leave-one-out errors favour the smallest ridge
    changed.write_text(KERNEL.read_text().replace(
        "fits.append((float(loo.square().mean()), ridge, alpha))",
        "fits.append((float(loo.square().mean()) * ridge, ridge, alpha))"))
    stored, before, now, worst = same.compare(_saved(1), same._module(changed))
    assert before[1] == 0.003 and stored == now and before != now
    assert worst > 0.1
