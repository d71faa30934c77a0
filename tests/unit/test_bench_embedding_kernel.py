"""The encoder-vector kernel experiment's parts: the three fits scored on validation rows
only, the stack leaning on the part whose leave-one-out residuals are smaller, and the
summary's ratios."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from setattn.chem.descriptors import descriptor_set_named
from setattn.molprop.featurize import featurize

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
SMILES = ["C" * n for n in range(1, 9)] + ["CO", "CCO", "CCCO", "CCCCO", "c1ccccc1",
                                           "Cc1ccccc1", "CCc1ccccc1", "OCCO", "CC(C)C",
                                           "CC(C)O", "CCN", "CCCN", "CCCCN", "ClCCl",
                                           "CCCl", "CCCCCl"]


@pytest.fixture()
def bench(monkeypatch):
    """benchmarks/decisions/embedding_kernel.py, importable (with the benchmarks' helpers)
    for this test only."""
    monkeypatch.syspath_prepend(str(BENCH))
    monkeypatch.syspath_prepend(str(BENCH / "decisions"))
    import embedding_kernel

    return embedding_kernel


@pytest.fixture(scope="module")
def molecules():
    width = descriptor_set_named("rdkit").width
    return [featurize(s, width) for s in SMILES]


def test_vectors_that_hold_the_target_take_the_stack(bench, molecules):
    """Vectors that are the target itself predict the validation rows almost exactly, so
    the stack gives the kernel part little weight and beats it; each RMSE is over the
    validation rows alone."""
    rng = np.random.default_rng(0)
    y = rng.normal(size=len(SMILES))
    vectors = torch.tensor(np.stack([y, y], 1))  # (M, 2): the target, twice
    train, val = list(range(0, 20)), list(range(20, len(SMILES)))
    scores = bench.fit_and_score(molecules, vectors, y, train, val)
    assert scores["train"] == 20 and scores["val"] == len(SMILES) - 20
    assert scores["weight"] < 0.2
    assert scores["vectors"] < 0.3 * scores["kernel_part"]
    assert scores["stack"] < scores["kernel_part"]


def test_noise_vectors_leave_the_kernel_part_in_charge(bench, molecules):
    """Vectors of pure noise carry no signal: the stack keeps most weight on the kernel
    part, whose leave-one-out residuals are the smaller."""
    rng = np.random.default_rng(1)
    y = np.array([len(s) for s in SMILES], dtype=float) + rng.normal(0, 0.1, len(SMILES))
    vectors = torch.tensor(rng.normal(size=(len(SMILES), 4)))
    scores = bench.fit_and_score(molecules, vectors, y, list(range(20)),
                                 list(range(20, len(SMILES))))
    assert scores["weight"] > 0.7


def test_the_summary_gives_the_geometric_mean_and_the_worst_row(bench):
    splits = [{"set": "freesolv", "split": "random", "seed": s, "kernel_part": 1.0,
               "vectors": 2.0, "stack": stack, "weight": 0.5} for s, stack in ((1, 0.8), (2, 1.0))]
    splits += [{"set": "esol", "split": "scaffold", "seed": 1, "kernel_part": 2.0,
                "vectors": 1.0, "stack": 2.2, "weight": 0.5}]
    text, geo, worst = bench.summary({"splits": splits})
    assert geo == pytest.approx(math.sqrt(0.9 * 1.1)) and worst == pytest.approx(1.1)
    assert "| freesolv | random | 1.000 | 2.000 | 0.900 | 0.900 | 0.50 |" in text
