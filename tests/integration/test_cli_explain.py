"""`setattn explain`: contributions per atom, one picture (PNG or SVG) or a folder for a CSV."""

from __future__ import annotations

import pytest
import torch
from molecule_runs import TINY, TOX21_TASKS, freesolv_slice, read_csv, run, tox21_slice

from setattn import cli, viz
from setattn.molprop import checkpoint
from setattn.molprop.batching import collate_molecules
from setattn.molprop.config import NetworkConfig
from setattn.molprop.ensemble import Ensemble
from setattn.molprop.explain import explain_molecule
from setattn.molprop.featurize import featurize
from setattn.molprop.network import MoleculeNetwork


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


def _train_ensemble(root, data, targets, *flags):
    threads = torch.get_num_threads()
    status = cli.main(["train", "--data", str(data), "--target-columns", *targets,
                       "--epochs", "2", "--output-dir", str(root), *TINY,
                       "--ensemble-size", "2", *flags])
    torch.set_num_threads(threads)
    assert status == 0
    return checkpoint.load_run(root)[0]


@pytest.fixture(scope="module")
def ensemble(tmp_path_factory):
    """A FreeSolv run of two members."""
    root = tmp_path_factory.mktemp("explain_ensemble")
    return root / "run", _train_ensemble(root / "run", freesolv_slice(root / "fs.csv", 30),
                                         ["expt"])


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
    model = checkpoint.load_run(trained)[0]
    e = explain_molecule(model, "[Na+].CC(=O)[O-]", "integrated-gradients")
    assert e.symbols == ["Na", "C", "C", "O", "O"]
    assert e.attribution.values[0] == 0 and (e.attribution.values[1:] != 0).all()


@pytest.mark.parametrize("method", ["integrated-gradients", "occlusion", "attention"])
def test_every_method_gives_one_value_per_atom(trained, method):
    model = checkpoint.load_run(trained)[0]
    e = explain_molecule(model, "OCC(N)c1ccncc1", method)
    assert e.attribution.values.shape == (10,) and torch.isfinite(e.attribution.values).all()
    with torch.no_grad():
        prediction = float(model.spread([featurize("OCC(N)c1ccncc1",
                                                   model.descriptor_dim)])[0][0, 0])
    assert e.attribution.prediction == pytest.approx(prediction, abs=1e-4)  # the blend
    if method == "attention":
        assert e.attribution.values.mean() == pytest.approx(1.0, abs=1e-5)


def test_integrated_gradients_sum_to_prediction_minus_baseline(trained):
    model = checkpoint.load_run(trained)[0]
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


def _members_prediction(models, smiles):
    data = [featurize(smiles, models.descriptor_dim)]
    return models.member_predictions(data)[:, 0, 0]  # (K,)


def test_an_ensemble_is_explained_as_predict_averages_it(ensemble):
    """The explained prediction is the members' mean (what ``predict`` writes); occlusion
    and attention are the members' means, integrated gradients sum to the ensemble's
    prediction minus its baseline."""
    _, models = ensemble
    smiles = "OCC(N)c1ccncc1"
    members = _members_prediction(models, smiles)
    assert float(members[0] - members[1]) != 0  # two members that disagree
    for method in ("occlusion", "attention", "integrated-gradients"):
        e = explain_molecule(models, smiles, method)
        assert e.attribution.prediction == pytest.approx(float(members.mean()), abs=1e-5)
        if method != "integrated-gradients":
            each = torch.stack([explain_molecule(models.member(k), smiles, method)
                                .attribution.values for k in range(len(models))])  # (K, N)
            torch.testing.assert_close(e.attribution.values, each.mean(0), atol=1e-5,
                                       rtol=1e-5)
    a = explain_molecule(models, smiles, "integrated-gradients").attribution
    assert a.complete and abs(a.gap()) <= a.delta + 1e-4
    single = explain_molecule(models.member(0), smiles, "integrated-gradients").attribution
    assert a.baseline != pytest.approx(single.baseline, abs=1e-6)  # not member 0's


def test_the_command_line_explains_the_ensemble(ensemble, tmp_path, capsys):
    run_dir, models = ensemble
    status, stdout, _ = run(["explain", "--model", run_dir, "--smiles", "CCO", "--output",
                             tmp_path / "x.png"], capsys)
    mean = float(_members_prediction(models, "CCO").mean())
    assert status == 0 and "(the mean of an ensemble of 2)" in stdout
    assert f"predicted expt {mean:.3f}" in stdout


def test_a_classification_ensemble_explains_the_mean_probability(tmp_path):
    models = _train_ensemble(tmp_path / "run", tox21_slice(tmp_path / "tox.csv", 60),
                             TOX21_TASKS, "--task", "classification")
    data = [featurize("c1ccccc1O", models.descriptor_dim)]
    p = models.member_predictions(data)[:, 0, 1]  # (K,)
    e = explain_molecule(models, "c1ccccc1O", "occlusion", target=1)
    assert float(p[0] - p[1]) != 0  # two members that disagree
    assert e.probability == pytest.approx(float(p.mean()), abs=1e-6)
    assert e.attribution.prediction == pytest.approx(float(torch.logit(p.mean())), abs=1e-4)
    assert e.unit == "logit"


def test_members_of_different_kinds_or_none_are_refused(ensemble, trained):
    _, models = ensemble
    with pytest.raises(ValueError, match="at least one network"):
        Ensemble([])
    other = checkpoint.load_run(trained)[0].networks[0]
    other.config.num_tasks = 2  # a member predicting another number of tasks
    with pytest.raises(ValueError, match="network 1 is not of network 0's kind"):
        Ensemble([models.networks[0], other])


def test_explain_refuses_a_gpu_but_takes_auto(trained, tmp_path, capsys):
    status, _, err = run(["explain", "--model", trained, "--smiles", "CCO", "--output",
                          tmp_path / "x.png", "--device", "cuda:0"], capsys)
    assert status == 2 and "--device" in err
    assert not (tmp_path / "x.png").exists()


def test_an_ensembles_logit_is_exact_near_certainty():
    """The members' mean probability as a logit, computed in log space: float32's
    ``logit(mean(sigmoid))`` is off by 1e-3 at a logit of 10 and by more beyond."""
    models = []
    for bias in (9.0, 12.0, 15.0):
        m = MoleculeNetwork(NetworkConfig(hidden=8, layers=1, heads=2,
                                              task="classification")).eval()
        with torch.no_grad():
            m.head[-1].weight.zero_()
            m.head[-1].bias.fill_(bias)  # the member's logit, whatever the molecule
        models.append(m)
    out = Ensemble(models).eval()(collate_molecules([featurize("CCO")]))
    exact = torch.logit(torch.sigmoid(torch.tensor([9.0, 12.0, 15.0], dtype=torch.float64))
                        .mean())
    assert float(out[0, 0]) == pytest.approx(float(exact), abs=1e-5)
