"""``benchmarks/recalibrate.py``: validation halves, the record check, the two quantiles."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest
import torch
from molecule_runs import saved_bench_run

from setattn.molprop import conformal, splits
from setattn.molprop.featurize import featurize

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"

SMILES = ["c1ccccc1C", "c1ccccc1CC", "c1ccccc1O", "C1CCCCC1O", "C1CCCCC1N", "CCO", "CCCN",
          "CCCCO", "c1ccncc1C", "c1ccncc1CC", "C1CCOC1", "C1CCOC1C"]


@pytest.fixture()
def recal(monkeypatch):
    """``benchmarks/recalibrate.py``, importable for this test only."""
    monkeypatch.syspath_prepend(str(BENCH))
    import recalibrate

    return recalibrate


def _part(recal, smiles: list[str], seed: int = 0):
    """Exchangeable data: y = mean + std * noise, one target."""
    generator = torch.Generator().manual_seed(seed)
    n = len(smiles)
    mean = torch.randn(n, 1, generator=generator, dtype=torch.float64)  # (n, 1)
    std = 0.2 + torch.rand(n, 1, generator=generator, dtype=torch.float64)  # (n, 1)
    y = mean + std * torch.randn(n, 1, generator=generator, dtype=torch.float64)  # (n, 1)
    return recal.Part(list(smiles), y, mean, std)


def test_scaffold_halves_keep_groups_whole(recal):
    part = _part(recal, SMILES)
    first, second = recal.halves(part, "scaffold", np.random.default_rng(0))
    assert sorted([*first, *second]) == list(range(len(SMILES)))
    side = {}
    for rows, name in ((first, "a"), (second, "b")):
        for i in rows:
            scaffold = splits.murcko_scaffold(SMILES[i])
            assert side.setdefault(scaffold, name) == name  # a group never straddles
    assert abs(len(first) - len(second)) <= 3  # the largest group here has 3 molecules


def test_random_halves_split_molecule_by_molecule(recal):
    part = _part(recal, SMILES[:11])
    first, second = recal.halves(part, "random", np.random.default_rng(1))
    assert (len(first), len(second)) == (5, 6)
    assert sorted([*first, *second]) == list(range(11))


def _saved(recal, val, test, rmse: float, cover: float):
    metrics = {"task": "regression", "test": {"rmse": rmse},
               "uncertainty": {"test": {"coverage": cover}}}
    return recal.SavedRun(Path("run"), "set", "random", 10, metrics, val, test)


def test_interpolated_never_covers_more_and_aims_at_the_level(recal):
    val = _part(recal, ["C"] * 400, seed=2)
    test = _part(recal, ["C"] * 400, seed=3)
    run = _saved(recal, val, test, 0.0, 0.0)
    cover = recal.half_coverages(run, repeats=40)
    assert len(cover["guarantee"]) == len(cover["interpolated"]) == 80
    assert all(g >= i for g, i in zip(cover["guarantee"], cover["interpolated"], strict=True))
    # halves of 200: the guarantee's rank aims at ceil(201 * 0.9) / 201 = 0.905
    assert np.mean(cover["interpolated"]) < np.mean(cover["guarantee"])
    assert np.mean(cover["interpolated"]) == pytest.approx(0.9, abs=0.02)


def test_check_record_reproduces_or_names_the_folder(recal):
    val, test = _part(recal, ["C"] * 50, seed=4), _part(recal, ["C"] * 30, seed=5)
    rmse = float((test.y - test.mean).square().mean().sqrt())
    cal = conformal.calibrate(val.y, val.mean, val.std)
    cover = conformal.coverage(test.y, test.mean, test.std, cal)
    check = recal.check_record(_saved(recal, val, test, rmse, cover))
    assert check == {"recorded": cover, "again": cover}
    with pytest.raises(SystemExit, match="run: reloaded test RMSE"):
        recal.check_record(_saved(recal, val, test, rmse + 0.01, cover))


def test_a_missing_or_changed_data_file_is_named(recal, tmp_path):
    path = tmp_path / "data.csv"
    with pytest.raises(SystemExit, match="data.csv: the run's data file is missing"):
        recal.read_table(path, "0" * 64, "smiles", ["y"])
    path.write_text("smiles,y\nCCO,1.5\nCCN,\n")
    with pytest.raises(SystemExit, match="data.csv: not the file the run read"):
        recal.read_table(path, "0" * 64, "smiles", ["y"])
    smiles, y = recal.read_table(path, hashlib.sha256(path.read_bytes()).hexdigest(),
                                  "smiles", ["y"])
    assert smiles == ["CCO", "CCN"] and y[0, 0] == 1.5 and np.isnan(y[1, 0])


def test_a_saved_kernel_run_reloads_with_the_scale_its_intervals_use(recal, tmp_path):
    folder = saved_bench_run(tmp_path, "random20")
    saved = recal.load_saved(folder)
    assert recal.spread_of(saved.metrics) == conformal.KERNEL
    models = recal.open_run(folder).models
    data = [featurize(s, models[0].config.descriptor_dim) for s in saved.val.smiles]
    u = models[0].kernel.posterior_std(torch.cat([d.descriptors for d in data]))  # (M,)
    torch.testing.assert_close(saved.val.std[:, 0], u)
    check = recal.check_record(saved)  # today's coverage, as the run recorded it
    assert check["again"] == check["recorded"]
    assert recal.spread_of({}) == conformal.ENSEMBLE  # runs saved before intervals
