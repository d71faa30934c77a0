"""`setattn explain`: the readout's attention drawn over the atoms, PNG or SVG."""

from __future__ import annotations

import pytest
import torch
from molecule_runs import TINY, freesolv_slice, run

from setattn import cli, viz
from setattn.molprop import checkpoint
from setattn.molprop.explain import explain_molecule


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


def test_explain_png_with_heads(trained, tmp_path, capsys):
    output = tmp_path / "mol.png"
    status, stdout, _ = run(["explain", "--model", trained, "--smiles", "CN(C)C(=O)c1ccccc1",
                             "--output", output, "--heads"], capsys)
    assert status == 0
    assert "predicted expt" in stdout and str(output) in stdout
    assert output.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_explain_svg_of_a_salt(trained, tmp_path, capsys):
    output = tmp_path / "mol.svg"
    status, _, _ = run(["explain", "--model", trained, "--smiles", "CC(=O)[O-].[Na+]",
                        "--output", output], capsys)
    assert status == 0
    text = output.read_text()
    assert text.lstrip().startswith("<?xml") and "</svg>" in text


def test_attention_weights_per_head_sum_to_one(trained):
    model = checkpoint.load_run(trained)[0][0]
    weights, prediction = explain_molecule(model, "OCC(N)c1ccncc1")
    assert weights.shape == (10, 2) and prediction.shape == (1,)
    assert torch.allclose(weights.sum(0), torch.ones(2))
    assert (weights >= 0).all()


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
