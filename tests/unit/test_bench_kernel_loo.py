"""``benchmarks/kernel_loo.py`` against refitting without each molecule, and the kernel
ridge's own standardisation."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from setattn.molprop.kernel import RIDGES, KernelRidge

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture()
def screen(monkeypatch):
    """``benchmarks/kernel_loo.py``, importable for this test only."""
    monkeypatch.syspath_prepend(str(BENCH))
    import kernel_loo

    return kernel_loo


def _refit_loo_mse(kernel: torch.Tensor, y: torch.Tensor, ridge: float) -> float:
    """Mean squared error of predicting each target from a fit without it."""
    errors = []
    for i in range(len(y)):
        keep = torch.arange(len(y)) != i
        alpha = torch.linalg.solve(kernel[keep][:, keep] + ridge * torch.eye(len(y) - 1,
                                   dtype=kernel.dtype), y[keep])  # (M - 1,)
        errors.append(float(kernel[i, keep] @ alpha - y[i]))
    return sum(e * e for e in errors) / len(errors)


@pytest.mark.parametrize(("m", "f"), [(17, 3), (26, 5)])
def test_least_loo_is_the_least_refitted_error(screen, m, f):
    g = torch.Generator().manual_seed(m)
    z = torch.randn(m, f, generator=g, dtype=torch.float64)  # (M, F)
    y = z[:, 0].sin() + 0.3 * z[:, 1] + 0.05 * torch.randn(m, generator=g, dtype=torch.float64)
    y = y - y.mean()
    distances = torch.cdist(z, z, p=1) / f  # (M, M) the Laplacian kernel's
    gammas = (0.5, 2.0)
    mse, gamma, ridge = screen.least_loo(distances, gammas, y)
    refitted = {(gm, r): _refit_loo_mse(torch.exp(-gm * distances), y, r)
                for gm in gammas for r in RIDGES}
    assert (gamma, ridge) == min(refitted, key=refitted.get)
    assert mse == pytest.approx(refitted[(gamma, ridge)], rel=1e-8)


def test_standardised_is_what_the_kernel_ridge_keeps(screen):
    g = torch.Generator().manual_seed(3)
    x = torch.randn(40, 4, generator=g) * torch.tensor([1.0, 10.0, 0.1, 3.0]) + 2  # (M, F)
    x[0, 2] = 50.0  # beyond the clip
    x[:, 3] = 7.0  # constant: no spread
    ridge = KernelRidge(40, 4, 1)
    ridge.fit(x, x[:, :1].double().sin())
    assert torch.allclose(screen.standardised(x), ridge.centres.double(), atol=1e-6)


def test_report_seeds_are_refused(screen, capsys):
    with pytest.raises(SystemExit):
        screen.main(["--seeds", "20", "12"])
    assert "[12] are report seeds" in capsys.readouterr().err


def test_training_part_reads_training_molecules_only(screen):
    smiles = ["C" * (k % 7 + 1) + "O" * (k % 3) for k in range(60)]
    values = [float(k) for k in range(60)]
    values[5] = math.nan
    descriptors = torch.arange(60.0)[:, None].repeat(1, 2)  # (N, 2): row numbers
    labels = screen.split_labels("random", smiles, 20)
    z, y, scale = screen.training_part(smiles, "random", 20, descriptors, values)
    train = [i for i, label in enumerate(labels) if label == "train" and i != 5]
    assert len(y) == len(train) == z.shape[0]
    rows = torch.tensor(train, dtype=torch.float64)
    assert scale == pytest.approx(float(rows.std(unbiased=False)))
    assert torch.allclose(y, (rows - rows.mean()) / scale)
