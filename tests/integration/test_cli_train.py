"""`setattn train`: a short run on regression and on multi-task classification with
missing labels writes every promised file; bad input is reported, never half-done."""

from __future__ import annotations

import csv
import json
import math

import pytest
import torch
from molecule_runs import (
    BAD_ROWS,
    BAD_SMILES_CSV,
    TINY,
    TOX21_TASKS,
    freesolv_slice,
    read_csv,
    run,
    tox21_slice,
)


@pytest.fixture(autouse=True)
def _keep_threads():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def _check_run_dir(out, ensemble=1):
    """The files of a finished run: every member's best.pt; one last.pt, in model_0,
    when an ensemble trained together (the default), else one per member."""
    for name in ("config.json", "split.json", "log.csv", "curve.png", "metrics.json"):
        assert (out / name).is_file(), name
    together = json.loads((out / "config.json").read_text())["members"] != "apart"
    for k in range(ensemble):
        assert (out / f"model_{k}" / "best.pt").is_file()
        assert (out / f"model_{k}" / "last.pt").is_file() == (k == 0 or not together)
    assert (out / "curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not list(out.rglob(".*tmp"))
    return json.loads((out / "metrics.json").read_text())


def test_train_regression_two_epochs(tmp_path, capsys):
    data = freesolv_slice(tmp_path / "freesolv.csv", 40)
    out = tmp_path / "run"
    status, stdout, _ = run(["train", "--data", data, "--smiles-column", "smiles",
                             "--target-columns", "expt", "--task", "regression",
                             "--split", "random", "--split-sizes", "0.8", "0.1", "0.1",
                             "--seed", "0", "--epochs", "2", "--output-dir", out, *TINY], capsys)
    assert status == 0
    assert "model 0 epoch   1/2" in stdout and "model 0 epoch   2/2" in stdout  # val lines
    assert "test RMSE" in stdout
    metrics = _check_run_dir(out)
    assert set(metrics["test"]) == {"rmse", "mae", "r2"}
    assert all(math.isfinite(metrics["test"][k]) for k in ("rmse", "mae", "r2"))
    assert metrics["split"] == {"type": "random", "seed": 0, "sizes": [0.8, 0.1, 0.1],
                                "train": 32, "val": 4, "test": 4}
    assert metrics["skipped_rows"] == [] and metrics["wall_time_s"] > 0
    assert set(metrics["val"]) == {"rmse", "mae", "r2"}
    log = read_csv(out / "log.csv")
    assert list(log[0]) == ["model", "epoch", "train_loss", "val_loss", "val_rmse", "lr",
                            "seconds"]
    assert [r["epoch"] for r in log] == ["1", "2"]
    config = json.loads((out / "config.json").read_text())
    assert config["setattn_format"] == 1 and config["train"]["epochs"] == 2
    assert config["model"]["hidden"] == 8 and config["target_columns"] == ["expt"]
    split = json.loads((out / "split.json").read_text())
    assert sorted(split["train"] + split["val"] + split["test"]) == list(range(40))


def test_train_classification_with_missing_labels(tmp_path, capsys):
    data = tox21_slice(tmp_path / "tox21.csv", 60)
    out = tmp_path / "run"
    status, stdout, _ = run(["train", "--data", data, "--target-columns", *TOX21_TASKS,
                             "--task", "classification", "--split", "scaffold", "--epochs", "2",
                             "--output-dir", out, *TINY], capsys)
    assert status == 0
    assert "row 60" in stdout and "AtomValenceException" in stdout  # the Al species
    metrics = _check_run_dir(out)
    assert set(metrics["test"]) == {"roc_auc", "pr_auc", "per_task"}
    assert set(metrics["test"]["per_task"]) == set(TOX21_TASKS)
    defined = [m["roc_auc"] for m in metrics["test"]["per_task"].values()
               if m["roc_auc"] is not None]
    assert defined and metrics["test"]["roc_auc"] == pytest.approx(sum(defined) / len(defined))
    assert metrics["skipped_rows"][0]["row"] == 60
    assert sum(metrics["split"][p] for p in ("train", "val", "test")) == 60
    assert math.isfinite(float(read_csv(out / "log.csv")[-1]["train_loss"]))


def test_train_ensemble_kfold(tmp_path, capsys):
    data = freesolv_slice(tmp_path / "fs.csv", 30)
    out = tmp_path / "run"
    status, _, _ = run(["train", "--data", data, "--target-columns", "expt", "--split",
                        "kfold", "--split-sizes", "0.6", "0.2", "0.2", "--fold", "1",
                        "--epochs", "1", "--output-dir", out, *TINY, "--ensemble-size", "2"],
                       capsys)
    assert status == 0
    metrics = _check_run_dir(out, ensemble=2)
    assert metrics["split"]["folds"] == 5 and metrics["split"]["fold"] == 1
    assert len(metrics["models"]) == 2
    assert [r["model"] for r in read_csv(out / "log.csv")] == ["0", "1"]


def test_invalid_and_empty_smiles_are_listed_and_skipped(tmp_path, capsys):
    out = tmp_path / "run"
    status, stdout, _ = run(["train", "--data", BAD_SMILES_CSV, "--target-columns", "logS",
                             "--epochs", "1", "--output-dir", out, *TINY], capsys)
    assert status == 0
    assert "skipping 5 row(s) with invalid or empty SMILES" in stdout
    for row in BAD_ROWS:
        assert f"row {row}:" in stdout
    assert "empty SMILES" in stdout
    metrics = json.loads((out / "metrics.json").read_text())
    assert [s["row"] for s in metrics["skipped_rows"]] == BAD_ROWS
    assert metrics["molecules"] == 36
    split = json.loads((out / "split.json").read_text())
    used = split["train"] + split["val"] + split["test"]
    assert not set(used) & set(BAD_ROWS) and len(used) == 36


def test_strict_makes_invalid_smiles_an_error(tmp_path, capsys):
    out = tmp_path / "run"
    status, _, err = run(["train", "--data", BAD_SMILES_CSV, "--target-columns", "logS",
                          "--epochs", "1", "--strict", "--output-dir", out, *TINY], capsys)
    assert status == 2
    assert "bad_smiles.csv: 5 invalid or empty SMILES (--strict)" in err
    assert "row 3: 'C1CC'" in err and "row 7: ''" in err
    assert not (out / "model_0").exists()


def test_missing_column_lists_the_columns_present(tmp_path, capsys):
    status, _, err = run(["train", "--data", BAD_SMILES_CSV, "--target-columns", "solubility",
                          "--output-dir", tmp_path / "run", *TINY], capsys)
    assert status == 2
    assert "missing column(s) ['solubility']" in err
    assert "columns present: ['name', 'smiles', 'logS']" in err


def test_non_numeric_target_names_its_row(tmp_path, capsys):
    path = tmp_path / "typo.csv"
    rows = list(csv.reader(open(BAD_SMILES_CSV, newline="")))
    rows[1 + 9][2] = "-3,2"  # decimal comma in data row 9
    with open(path, "w", newline="") as handle:
        csv.writer(handle).writerows(rows)
    status, _, err = run(["train", "--data", path, "--target-columns", "logS",
                          "--output-dir", tmp_path / "run", *TINY], capsys)
    assert status == 2
    assert "typo.csv: row 9, column 'logS': target '-3,2' is not a number" in err


def test_classification_labels_must_be_binary(tmp_path, capsys):
    status, _, err = run(["train", "--data", BAD_SMILES_CSV, "--target-columns", "logS",
                          "--task", "classification", "--output-dir", tmp_path / "run",
                          *TINY], capsys)
    assert status == 2
    assert "row 0, column 'logS': classification target -0.77 is not 0 or 1" in err


@pytest.mark.parametrize("flags, needle", [
    (["--epochs", "0"], "--epochs"),
    (["--split-sizes", "0.5", "0.5", "0.5"], "--split-sizes"),
    (["--hidden", "7"], "argument --hidden: 7 is not divisible by heads"),
    (["--ensemble-size", "0"], "--ensemble-size"),
])
def test_bad_arguments_are_named(tmp_path, capsys, flags, needle):
    status, _, err = run(["train", "--data", BAD_SMILES_CSV, "--target-columns", "logS",
                          "--output-dir", tmp_path / "run", *TINY, *flags], capsys)
    assert status == 2 and needle in err


def test_missing_data_file_is_named(tmp_path, capsys):
    status, _, err = run(["train", "--data", tmp_path / "nope.csv", "--target-columns", "y",
                          "--output-dir", tmp_path / "run", *TINY], capsys)
    assert status == 2 and "nope.csv" in err


def test_rdkit_descriptors_flow_through_train_predict_explain(tmp_path, capsys):
    data = freesolv_slice(tmp_path / "fs.csv", 30)
    out = tmp_path / "run"
    status, _, _ = run(["train", "--data", data, "--target-columns", "expt", "--epochs", "1",
                        "--descriptors", "rdkit", "--output-dir", out, *TINY], capsys)
    assert status == 0
    config = json.loads((out / "config.json").read_text())
    assert config["model"]["descriptor_dim"] > 100
    status, _, _ = run(["predict", "--model", out, "--data", data, "--output",
                        tmp_path / "p.csv"], capsys)
    assert status == 0
    assert all(r["expt"] != "" for r in read_csv(tmp_path / "p.csv"))
    status, _, _ = run(["explain", "--model", out, "--smiles", "CCO", "--output",
                        tmp_path / "e.svg"], capsys)
    assert status == 0
    status, _, err = run(["train", "--output-dir", out, "--resume", "--descriptors", "none"],
                         capsys)
    assert status == 2 and "--descriptors" in err
