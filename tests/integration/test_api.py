"""``MoleculePredictor``: the command line's runs from Python. Same data, options and seed
give the same metrics.json as ``setattn train``; run directories go both ways between
the two; bad input is refused by name."""

from __future__ import annotations

import csv
import json
import math

import numpy as np
import pytest
import torch
from molecule_runs import TINY, freesolv_slice, read_csv, run, tox21_slice
from rdkit import Chem

from setattn.chem.descriptors import descriptor_count
from setattn.molprop import MoleculePredictor
from setattn.molprop.checkpoint import load_run
from setattn.molprop.explain import explain_molecule

# TINY, as keywords
OPTIONS = {"hidden": 8, "layers": 1, "heads": 2, "epochs": 2, "ensemble_size": 1}
TIMES = ("wall_time_s", "train_seconds")


@pytest.fixture(autouse=True)
def _keep_threads():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def _columns(path, *names):
    rows = read_csv(path)
    return [[r[n] for r in rows] for n in names]


def _without_times(metrics: dict) -> dict:
    metrics = {k: v for k, v in metrics.items() if k not in TIMES}
    if "components" in metrics:
        kernel = {k: v for k, v in metrics["components"]["kernel"].items() if k != "seconds"}
        metrics["components"] = {**metrics["components"], "kernel": kernel}
    return metrics


def _cells(path, column):
    return np.array([float(v) if v else math.nan for v in _columns(path, column)[0]])


@pytest.fixture(scope="module")
def freesolv(tmp_path_factory):
    return freesolv_slice(tmp_path_factory.mktemp("data") / "freesolv.csv", 60)


def test_five_lines_reach_the_command_lines_metrics(freesolv, tmp_path, capsys):
    smiles, expt = _columns(freesolv, "smiles", "expt")
    model = MoleculePredictor(target_columns=["expt"], seed=3, verbose=False, **OPTIONS)
    model.fit(smiles, [float(v) for v in expt])
    status, _, _ = run(["train", "--data", freesolv, "--target-columns", "expt", "--seed", "3",
                        "--epochs", "2", "--output-dir", tmp_path / "cli", *TINY], capsys)
    assert status == 0
    cli = json.loads((tmp_path / "cli" / "metrics.json").read_text())
    api = json.loads((model.run_dir / "metrics.json").read_text())
    assert _without_times(api) == _without_times(cli)  # every metric, exactly
    assert model.metrics["test"] == cli["test"] and "components" in cli  # kernel ridge on
    parts = ("train", "val", "test")  # "data" names each run's own CSV file
    api_split = json.loads((model.run_dir / "split.json").read_text())
    cli_split = json.loads((tmp_path / "cli" / "split.json").read_text())
    assert {k: api_split[k] for k in parts} == {k: cli_split[k] for k in parts}


@pytest.fixture(scope="module")
def cli_ensemble(freesolv, tmp_path_factory):
    from setattn import cli

    out = tmp_path_factory.mktemp("runs") / "ensemble"
    status = cli.main([str(a) for a in ["train", "--data", freesolv, "--target-columns",
                                        "expt", "--epochs", "2",
                                        # 12 validation molecules: a bounded 90 % interval
                                        "--split-sizes", "0.7", "0.2", "0.1",
                                        "--output-dir", out, *TINY, "--ensemble-size", "2",
                                        # the networks' half shows in the members' spread
                                        "--network-weight", "fixed"]])
    assert status == 0
    return out


def test_a_cli_run_loads_in_the_api(cli_ensemble, freesolv, tmp_path, capsys):
    model = MoleculePredictor.load(cli_ensemble, device="cpu")
    assert model.target_columns == ["expt"] and len(model.ensemble) == 2
    assert model.options["ensemble_size"] == 2 and model.options["hidden"] == 8
    smiles = _columns(freesolv, "smiles")[0]
    queries = [*smiles[:10], "not a smiles", ""]
    mean, std = model.predict(queries), model.predict_std(queries)  # (12, 1) each
    assert model.errors == [(10, "not a smiles", "SMILES syntax error"),
                            (11, "", "empty SMILES")]
    assert np.isnan(mean[10:]).all() and np.isnan(std[10:]).all()
    assert (std[:10] > 0).all()  # two members disagree
    query = tmp_path / "query.csv"
    with open(query, "w", newline="") as handle:
        csv.writer(handle).writerows([["smiles"], *([s] for s in queries)])
    status, _, _ = run(["predict", "--model", cli_ensemble, "--data", query,
                        "--output", tmp_path / "preds.csv"], capsys)
    assert status == 0
    # the command line writes 8 significant digits of the same float32 numbers
    np.testing.assert_allclose(_cells(tmp_path / "preds.csv", "expt"), mean[:, 0],
                               rtol=1e-7, equal_nan=True)
    np.testing.assert_allclose(_cells(tmp_path / "preds.csv", "expt_std"), std[:, 0],
                               rtol=1e-6, equal_nan=True)
    lower, upper = model.predict_interval(queries)  # (12, 1) each
    np.testing.assert_allclose(_cells(tmp_path / "preds.csv", "expt_lower"), lower[:, 0],
                               rtol=1e-6, equal_nan=True)
    assert np.isfinite(lower[:10]).all() and (lower[:10] < mean[:10]).all()
    np.testing.assert_allclose(mean[:10] - lower[:10], upper[:10] - mean[:10], rtol=1e-5)
    weights = model.explain(smiles[0], "attention")  # (N,) attention x N
    expected = explain_molecule(load_run(cli_ensemble)[0], smiles[0], "attention")  # all members
    assert np.array_equal(weights, expected.attribution.values.numpy())
    np.testing.assert_allclose(weights.mean(), 1.0, rtol=1e-5)  # weights sum to 1


def test_an_api_run_works_with_the_command_line(freesolv, tmp_path, capsys):
    smiles, expt = _columns(freesolv, "smiles", "expt")
    model = MoleculePredictor(verbose=False, **OPTIONS).fit(smiles, np.array(expt, float))
    assert model.predict_std(smiles[:3]).tolist() == [[0.0]] * 3  # one model
    saved = model.save(tmp_path / "saved")
    status, _, _ = run(["predict", "--model", saved, "--data", freesolv,
                        "--output", tmp_path / "preds.csv", "--device", "cpu"], capsys)
    assert status == 0
    np.testing.assert_allclose(_cells(tmp_path / "preds.csv", "y"),
                               model.predict(smiles)[:, 0], rtol=1e-7)
    config = json.loads((saved / "config.json").read_text())
    assert config["data"] == str((saved / "data.csv").resolve())  # the copy's own CSV
    again = MoleculePredictor.load(saved)
    assert np.array_equal(again.predict(smiles), model.predict(smiles))
    assert again.metrics == model.metrics
    # --resume reads the copy's config.json and CSV: the finished run ends as it was
    status, _, _ = run(["train", "--output-dir", saved, "--resume"], capsys)
    assert status == 0
    resumed = json.loads((saved / "metrics.json").read_text())
    assert resumed["test"] == model.metrics["test"] and resumed["split"]["test"] == 6
    (tmp_path / "a_file").write_text("x")
    with pytest.raises(ValueError, match="a_file is a file, not a directory"):
        model.save(tmp_path / "a_file")
    with pytest.raises(TypeError, match="argument smiles: a SMILES string, an RDKit Mol or a"):
        model.predict(None)


def test_validation_set_and_multitask_classification(tmp_path):
    data = tox21_slice(tmp_path / "tox21.csv", 60)
    rows = read_csv(data)
    tasks = ["NR-AR", "NR-AhR", "SR-MMP"]
    smiles = [r["smiles"] for r in rows]
    y = np.array([[float(r[t]) if r[t] else math.nan for t in tasks] for r in rows])  # (61, 3)
    model = MoleculePredictor("classification", descriptors="none", target_columns=tasks,
                              output_dir=tmp_path / "run", verbose=False, **OPTIONS)
    model.fit(smiles[:45], y[:45], val=(smiles[45:], y[45:]))
    split = json.loads((tmp_path / "run" / "split.json").read_text())
    assert split["val"] == list(range(45, 60)) and split["test"] == []  # row 60: invalid
    assert split["train"] == list(range(45))
    assert model.metrics["split"]["type"] == "column" and model.metrics["split"]["val"] == 15
    assert math.isnan(model.metrics["test"]["roc_auc"])  # no test part
    assert [s["row"] for s in model.metrics["skipped_rows"]] == [60]
    p = model.predict(smiles)  # (61, 3) probabilities
    assert p.shape == (61, 3) and np.isnan(p[60]).all()
    assert ((p[:60] > 0) & (p[:60] < 1)).all()
    assert model.errors[0][0] == 60 and "AtomValenceException" in model.errors[0][2]
    assert len(model.errors) == 1 and all("fragments" in n for _, _, n in model.notes)
    assert [i for i, _, _ in model.notes] == [i for i, s in enumerate(smiles[:60]) if "." in s]
    assert "uncertainty" not in model.metrics
    with pytest.raises(ValueError, match="no interval calibration"):
        model.predict_interval(smiles[:2])


@pytest.mark.parametrize("make, error, needle", [
    (lambda: MoleculePredictor(epoch=3), TypeError, "unexpected keyword argument 'epoch'"),
    (lambda: MoleculePredictor(data="x.csv"), TypeError, "unexpected keyword argument 'data'"),
    (lambda: MoleculePredictor(epochs=0).check(), ValueError, "epochs must be >= 1, got 0"),
    (lambda: MoleculePredictor("ranking").check(), ValueError,
     "task must be regression or classification, got 'ranking'"),
    (lambda: MoleculePredictor(descriptors="morgan").check(), ValueError,
     "descriptors must be fast, lean, rdkit or none, got 'morgan'"),
    (lambda: MoleculePredictor(device="gpu").check(), ValueError,
     "device must be auto, cpu, cuda or cuda:N, got 'gpu'"),
    (lambda: MoleculePredictor(hidden=30, heads=4).check(), ValueError,
     "hidden: 30 is not divisible by heads 4"),
    (lambda: MoleculePredictor(split="halves").check(), ValueError, "split must be one of"),
    (lambda: MoleculePredictor(kernel_ridge="on", descriptors="none").check(), ValueError,
     "kernel_ridge: on needs descriptors"),
    (lambda: MoleculePredictor(split_sizes=[0.5, 0.5]).check(), ValueError,
     "split_sizes: expected 3 fractions"),
    (lambda: MoleculePredictor(conv="gcn").check(), ValueError,
     "conv must be 'gat' or 'gatv2'"),
    (lambda: MoleculePredictor(epochs="5").check(), TypeError, "option epochs: must be an int"),
])
def test_bad_options_are_named(make, error, needle):
    """The library names the keyword, never a command-line flag; a keyword is checked by
    ``check`` and ``fit``, not where it is given (scikit-learn's convention)."""
    with pytest.raises(error) as info:
        make()
    assert needle in str(info.value) and "--" not in str(info.value)


def test_fit_checks_the_keywords_before_it_writes_anything(tmp_path):
    model = MoleculePredictor(epochs=0, output_dir=tmp_path / "run", verbose=False)
    with pytest.raises(ValueError, match="epochs must be >= 1, got 0"):
        model.fit(["CCO", "CCC", "CCCC"], [1.0, 2.0, 3.0])
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("smiles, y, val, error, needle", [
    (["CCO", "CCC"], [1.0], None, ValueError, "argument y: expected shape (2,) or (2, T)"),
    (["CCO", None], [1.0, 2.0], None, TypeError, "argument smiles: item 1 is NoneType"),
    (["CCO", "CCC"], [1.0, "x"], None, ValueError, "argument y: not numbers"),
    (["CCO", "CCC"], [1.0, np.inf], None, ValueError, "argument y: row 1, column 0: inf"),
    (["CCO", "CCC"], [1.0, -1e300], None, ValueError,
     "argument y: row 1, column 0: -1e+300 is not a finite number within float32"),
    (["CCO", "CCC"], [np.nan, np.nan], None, ValueError, "argument y: every value is NaN"),
    (["CCO", "CCC"], [[1.0, np.nan], [2.0, np.nan]], None, ValueError,
     "argument y: every value of column 1 is NaN, so it has no label"),
    (["CCO", "CCC"], [1.0, 2.0], (["CO"], [np.nan]), ValueError,
     "argument val[1]: every value is NaN"),
    ([], [], None, ValueError, "argument smiles: no molecule to train on"),
    (["CCO", "CCC"], [[1.0, 2.0], [3.0, 4.0]], None, ValueError,
     "argument target_columns: 1 name(s) for the 2 column(s) of y"),
    (["CCO", "CCC"], [1.0, 2.0], (["CO"], [[1.0, 2.0]]), ValueError,
     "argument val[1]: 2 target column(s), y has 1"),
    (["CCO", "CCC"], [1.0, 2.0], ["CO"], TypeError, "argument val: expected a (smiles, y)"),
])
def test_bad_fit_input_is_named_and_writes_nothing(tmp_path, smiles, y, val, error, needle):
    names = {"target_columns": ["a"]} if "target_columns" in needle else {}
    model = MoleculePredictor(output_dir=tmp_path / "run", verbose=False, **names)
    with pytest.raises(error) as info:
        model.fit(smiles, y, val=val)
    assert needle in str(info.value)
    assert not (tmp_path / "run").exists()


def test_no_model_yet_and_no_overwrite(freesolv, tmp_path):
    with pytest.raises(ValueError, match="no model yet"):
        MoleculePredictor().predict(["CCO"])
    smiles, expt = _columns(freesolv, "smiles", "expt")
    out = tmp_path / "run"
    MoleculePredictor(output_dir=out, verbose=False, **OPTIONS).fit(smiles, np.array(expt, float))
    before = (out / "metrics.json").read_bytes()
    with pytest.raises(ValueError, match="already holds a run"):
        MoleculePredictor(output_dir=out, verbose=False, **OPTIONS).fit(smiles, [0.0] * 60)
    assert (out / "metrics.json").read_bytes() == before
    with pytest.raises(FileNotFoundError, match="not a setattn run directory"):
        MoleculePredictor.load(tmp_path)


def _with_parts(source, path, parts):
    """``source`` with a column "part" holding ``parts``, one per row."""
    rows = read_csv(source)
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, [*rows[0], "part"])
        writer.writeheader()
        writer.writerows({**row, "part": part} for row, part in zip(rows, parts))
    return path


def test_split_column_on_the_command_line(freesolv, tmp_path, capsys):
    parts = [("val", "test", "train", "train", "train")[i % 5] for i in range(60)]
    labelled = _with_parts(freesolv, tmp_path / "labelled.csv", parts)
    flags = ["--target-columns", "expt", "--split", "column", "--split-column", "part", *TINY,
             "--epochs", "1"]
    status, _, _ = run(["train", "--data", labelled, "--output-dir", tmp_path / "run", *flags],
                       capsys)
    assert status == 0
    split = json.loads((tmp_path / "run" / "split.json").read_text())
    assert split["val"] == list(range(0, 60, 5)) and split["test"] == list(range(1, 60, 5))
    parts[4] = "holdout"
    labelled = _with_parts(freesolv, tmp_path / "labelled.csv", parts)
    status, _, stderr = run(["train", "--data", labelled, "--output-dir", tmp_path / "bad",
                             *flags], capsys)
    assert status == 2
    assert stderr.strip() == ("setattn train: error: labelled.csv: column 'part': row 4: "
                              "'holdout' is not train, val or test")


def test_a_failed_fit_keeps_the_last_run(freesolv, tmp_path):
    smiles, expt = _columns(freesolv, "smiles", "expt")
    model = MoleculePredictor(verbose=False, **OPTIONS).fit(smiles, np.array(expt, float))
    before = model.predict(smiles[:5])
    with pytest.raises(ValueError, match="no valid molecule to train on"):
        model.fit(["xyz", "C1CC"], [1.0, 2.0])
    with pytest.raises(ValueError, match="^target_columns: 'smiles' is the SMILES"):
        MoleculePredictor(target_columns=["smiles"], output_dir=tmp_path / "dup").fit(
            ["CCO"], [1.0])
    assert not (tmp_path / "dup").exists()
    assert np.array_equal(model.predict(smiles[:5]), before)
    assert (model.save(tmp_path / "kept") / "model_0" / "best.pt").is_file()


def test_one_target_name_may_be_a_string():
    assert MoleculePredictor(target_columns="expt").options["target_columns"] == ["expt"]


def test_a_split_too_small_names_the_keyword():
    """A check made during fit names the keyword too (``--split-sizes`` on the command
    line)."""
    model = MoleculePredictor(verbose=False, **OPTIONS)
    with pytest.raises(ValueError, match=r"^split_sizes: the \w+ part is empty with 3 "
                                         r"valid molecules") as info:
        model.fit(["CCO", "CCC", "CCN"], [1.0, 2.0, 3.0])
    assert "--" not in str(info.value)


def test_load_names_its_keyword(tmp_path):
    with pytest.raises(FileNotFoundError, match="^argument directory: .* is not a setattn "
                                                "run directory") as info:
        MoleculePredictor.load(tmp_path)
    assert "--" not in str(info.value)


@pytest.mark.parametrize("kind", ["lean", "fast"])
def test_a_smaller_descriptor_set_is_read_back_from_the_saved_model(freesolv, tmp_path,
                                                                     capsys, kind):
    smiles, expt = _columns(freesolv, "smiles", "expt")
    model = MoleculePredictor(descriptors=kind, verbose=False, **OPTIONS)
    model.fit(smiles, np.array(expt, float))
    assert model.ensemble_.descriptor_dim == descriptor_count(kind)
    saved = model.save(tmp_path / "saved")
    again = MoleculePredictor.load(saved)
    assert again.get_params()["descriptors"] == kind
    assert np.array_equal(again.predict(smiles), model.predict(smiles))
    status, _, _ = run(["predict", "--model", saved, "--data", freesolv,
                        "--output", tmp_path / "preds.csv", "--device", "cpu"], capsys)
    assert status == 0
    np.testing.assert_allclose(_cells(tmp_path / "preds.csv", "y"),
                               model.predict(smiles)[:, 0], rtol=1e-7)
    assert model.explain(smiles[0]).shape == (Chem.MolFromSmiles(smiles[0]).GetNumAtoms(),)
