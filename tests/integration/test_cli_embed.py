"""`setattn embed` and `MoleculePredictor.transform`: the networks' molecule vectors, one
row per input row, in order; what the head reads; one member or all; bad input named."""

from __future__ import annotations

import pytest
import torch
from molecule_runs import (  # noqa: F401 (keep_threads: a fixture, used by name)
    BAD_ROWS,
    BAD_SMILES_CSV,
    bad_smiles_ensemble,
    keep_threads,
    read_csv,
    run,
)

from setattn.molprop import MoleculePredictor
from setattn.molprop.batching import collate_molecules
from setattn.molprop.checkpoint import load_run
from setattn.molprop.featurize import featurize
from setattn.molprop.predict import embed_smiles

WIDTH = 2 * 8  # readout and atom sum of TINY's --hidden 8


pytestmark = pytest.mark.usefixtures("keep_threads")  # the commands set torch's threads


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """An ensemble of 2 regression networks trained 1 epoch on the bad-SMILES fixture."""
    return bad_smiles_ensemble(tmp_path_factory.mktemp("embed") / "run", epochs=1)


def test_one_row_of_vectors_per_input_row(model, tmp_path, capsys):
    output = tmp_path / "vectors.csv"
    status, stdout, _ = run(["embed", "--model", model, "--data", BAD_SMILES_CSV,
                             "--output", output], capsys)
    assert status == 0
    assert f"wrote 41 rows of {2 * WIDTH} numbers" in stdout
    assert f"2 member(s) x {WIDTH}; 5 invalid or skipped SMILES" in stdout
    rows, source = read_csv(output), read_csv(BAD_SMILES_CSV)
    assert list(rows[0]) == ["smiles", *(f"m{k}_{i}" for k in (0, 1) for i in range(WIDTH)),
                             "error"]
    assert [r["smiles"] for r in rows] == [s["smiles"] for s in source]
    for i, r in enumerate(rows):
        cells = [r[f"m{k}_{j}"] for k in (0, 1) for j in range(WIDTH)]
        if i in BAD_ROWS:
            assert set(cells) == {""} and r["error"].startswith("invalid SMILES")
        else:
            assert all(c != "" for c in cells) and r["error"] == ""


def test_the_vectors_are_what_the_head_reads(model):
    ensemble, _ = load_run(model)
    smiles = ["CCO", "c1ccccc1O", "CC(=O)N"]
    vectors, messages = embed_smiles(ensemble, smiles)  # (3, 2 * WIDTH)
    assert messages == ["", "", ""] and vectors.shape == (3, 2 * WIDTH)
    batch = collate_molecules([featurize(s, ensemble.descriptor_dim) for s in smiles])
    for k, net in enumerate(ensemble.networks):
        d = (batch.descriptors - net.descriptor_mean) / net.descriptor_std
        head_in = torch.cat([vectors[:, k * WIDTH:(k + 1) * WIDTH], d.clamp(-10, 10)], 1)
        with torch.no_grad():
            torch.testing.assert_close(net.head(head_in), net(batch), rtol=1e-5, atol=1e-5)


def test_one_member_and_the_api_give_the_same_numbers(model, tmp_path, capsys):
    whole, one = tmp_path / "all.csv", tmp_path / "one.csv"
    assert run(["embed", "--model", model, "--data", BAD_SMILES_CSV, "--output", whole],
               capsys)[0] == 0
    status, stdout, _ = run(["embed", "--model", model, "--data", BAD_SMILES_CSV,
                             "--output", one, "--member", "1"], capsys)
    assert status == 0 and f"1 member(s) x {WIDTH}" in stdout
    all_rows, one_rows = read_csv(whole), read_csv(one)
    assert list(one_rows[0]) == ["smiles", *(f"m1_{i}" for i in range(WIDTH)), "error"]
    assert all(a[f"m1_{i}"] == b[f"m1_{i}"] for a, b in zip(all_rows, one_rows)
               for i in range(WIDTH))
    smiles = [r["smiles"] for r in all_rows]
    predictor = MoleculePredictor.load(model)
    vectors = predictor.transform(smiles)  # (41, 2 * WIDTH), NaN rows where invalid
    assert vectors.shape == (41, 2 * WIDTH)
    assert [i for i, _, _ in predictor.errors] == BAD_ROWS
    for i, r in enumerate(all_rows):
        if i not in BAD_ROWS:
            written = [float(r[f"m{k}_{j}"]) for k in (0, 1) for j in range(WIDTH)]
            assert vectors[i].tolist() == pytest.approx(written, rel=1e-7, abs=1e-30)
    assert predictor.transform(["CCO"], member=0).shape == (1, WIDTH)


def test_a_member_out_of_range_or_an_output_over_the_input_is_refused(model, tmp_path,
                                                                      capsys):
    output = tmp_path / "vectors.csv"
    status, _, err = run(["embed", "--model", model, "--data", BAD_SMILES_CSV, "--output",
                          output, "--member", "2"], capsys)
    assert status == 2 and "argument --member: the model has 2 member(s), 0 to 1; got 2" in err
    assert not output.exists()
    status, _, err = run(["embed", "--model", model, "--data", BAD_SMILES_CSV, "--output",
                          BAD_SMILES_CSV], capsys)
    assert status == 2 and "--data" in err
    status, _, err = run(["embed", "--model", model, "--data", tmp_path / "none.csv",
                          "--output", output], capsys)
    assert status == 2 and "none.csv" in err and not output.exists()
    with pytest.raises(ValueError, match="the model has 2 member"):
        MoleculePredictor.load(model).transform(["CCO"], member=-1)
