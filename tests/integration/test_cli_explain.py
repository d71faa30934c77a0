"""`setattn explain`: contributions per atom, one picture (PNG or SVG) or a folder for a CSV."""

from __future__ import annotations

import pytest
import torch
from molecule_runs import TINY, freesolv_slice, read_csv, run

from setattn import cli, viz
from setattn.molprop import checkpoint
from setattn.molprop.explain import explain_molecule
from setattn.molprop.featurize import featurize
from setattn.molprop.predict import predict


@pytest.fixture(autouse=True)
def _keep_threads():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("explain")
    data = freesolv_slice(root / "fs.csv", 30)
    threads = torch.get_num_threads()
    status = cli.main(["train", "--data", str(data), "--target-columns", "expt", "--epochs",
                       "2", "--output-dir", str(root / "run"), *TINY])
    torch.set_num_threads(threads)
    assert status == 0
    return root / "run"


def test_explain_png(trained, tmp_path, capsys):
    output = tmp_path / "mol.png"
    status, stdout, _ = run(["explain", "--model", trained, "--smiles", "CN(C)C(=O)c1ccccc1",
                             "--output", output], capsys)
    assert status == 0
    assert "predicted expt" in stdout and str(output) in stdout
    assert "sum to prediction - baseline" in stdout  # the default method claims its sum
    assert output.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_explain_svg_of_a_salt(trained, tmp_path, capsys):
    output = tmp_path / "mol.svg"
    status, _, _ = run(["explain", "--model", trained, "--smiles", "CC(=O)[O-].[Na+]",
                        "--output", output, "--method", "occlusion"], capsys)
    assert status == 0
    text = output.read_text()
    assert text.lstrip().startswith("<?xml") and "</svg>" in text


def test_the_salt_ion_the_model_never_sees_gets_zero(trained):
    model = checkpoint.load_run(trained)[0][0]
    e = explain_molecule(model, "[Na+].CC(=O)[O-]", "integrated-gradients")
    assert e.symbols == ["Na", "C", "C", "O", "O"]
    assert e.attribution.values[0] == 0 and (e.attribution.values[1:] != 0).all()


@pytest.mark.parametrize("method", ["integrated-gradients", "occlusion", "attention"])
def test_every_method_gives_one_value_per_atom(trained, method):
    model = checkpoint.load_run(trained)[0][0]
    e = explain_molecule(model, "OCC(N)c1ccncc1", method)
    assert e.attribution.values.shape == (10,) and torch.isfinite(e.attribution.values).all()
    with torch.no_grad():
        prediction = float(predict(model, [featurize("OCC(N)c1ccncc1",
                                                     model.config.descriptor_dim)])[0, 0])
    assert e.attribution.prediction == pytest.approx(prediction, abs=1e-4)  # the blend
    if method == "attention":
        assert e.attribution.values.mean() == pytest.approx(1.0, abs=1e-5)


def test_integrated_gradients_sum_to_prediction_minus_baseline(trained):
    model = checkpoint.load_run(trained)[0][0]
    for smiles in ("OCC(N)c1ccncc1", "CCCCCl", "c1ccccc1O"):
        a = explain_molecule(model, smiles, "integrated-gradients").attribution
        assert a.complete and abs(a.gap()) <= a.delta + 1e-4


def test_readout_is_refused_for_the_molecule_model(trained, tmp_path, capsys):
    status, _, err = run(["explain", "--model", trained, "--smiles", "CCO", "--output",
                          tmp_path / "x.png", "--method", "readout"], capsys)
    assert status == 2 and "no exact readout decomposition" in err


def test_explain_a_csv_into_a_folder(trained, tmp_path, capsys):
    data = tmp_path / "mols.csv"
    data.write_text("name,smi\na,CCO\nb,C1CC\nc,[Na+].CC(=O)[O-]\nd,c1ccccc1N\n")
    out = tmp_path / "explained"
    status, stdout, _ = run(["explain", "--model", trained, "--data", data, "--smiles-column",
                             "smi", "--output", out, "--max-pictures", "2"], capsys)
    assert status == 0 and "1 invalid SMILES" in stdout
    atoms = read_csv(out / "atoms.csv")
    assert list(atoms[0]) == ["row", "smiles", "atom", "symbol", "contribution"]
    assert [(r["row"], r["atom"], r["symbol"]) for r in atoms[:3]] == [
        ("0", "0", "C"), ("0", "1", "C"), ("0", "2", "O")]
    assert len(atoms) == 3 + 5 + 7
    molecules = read_csv(out / "molecules.csv")
    for m in molecules:  # contributions sum to prediction - baseline, up to the delta
        gap = float(m["prediction"]) - float(m["baseline"]) - float(m["sum"])
        assert abs(gap) <= float(m["delta"]) + 1e-4
    errors = read_csv(out / "errors.csv")
    assert [(e["row"], e["smiles"]) for e in errors] == [("1", "C1CC")]
    assert sorted(p.name for p in out.glob("*.png")) == ["row_0.png", "row_2.png"]


def test_a_missing_column_is_named(trained, tmp_path, capsys):
    data = tmp_path / "mols.csv"
    data.write_text("smi\nCCO\n")
    status, _, err = run(["explain", "--model", trained, "--data", data, "--output",
                          tmp_path / "out"], capsys)
    assert status == 2 and "missing column(s) ['smiles']" in err and "--smiles-column" in err


@pytest.mark.parametrize("smiles, output, needle", [
    ("C1CC", "x.png", "argument --smiles: invalid SMILES 'C1CC'"),
    ("", "x.png", "empty SMILES"),
    ("CCO", "x.jpg", "argument --output"),
])
def test_bad_input_is_named(trained, tmp_path, capsys, smiles, output, needle):
    status, _, err = run(["explain", "--model", trained, "--smiles", smiles,
                          "--output", tmp_path / output], capsys)
    assert status == 2 and needle in err
    assert not (tmp_path / output).exists()


def test_draw_atom_weights_checks_atom_count(tmp_path):
    with pytest.raises(ValueError, match="3 atoms"):
        viz.draw_atom_weights("CCO", [0.5, 0.5], tmp_path / "x.png")
    path = viz.draw_atom_weights("CCO", torch.tensor([[0.2, 0.3, 0.5], [1.0, 0.0, 0.0]]),
                                 tmp_path / "x.svg", legends=["a", "b"])
    assert "</svg>" in path.read_text()
