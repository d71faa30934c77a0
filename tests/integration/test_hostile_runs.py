"""Hostile input around a run's own files and columns: no output replaces a run's records
or the CSV being explained, a SMILES with whitespace inside is invalid (not cut), target
names that would collide in predict's output and targets without a label are refused,
a run started with a relative --data resumes from any directory, and API options of the
wrong type are named."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from molecule_runs import (
    TINY,
    freesolv_slice,
    keep_threads,  # noqa: F401 (the fixture pytestmark uses)
    read_csv,
    run,
    sha256,
    train_tiny,
)

from setattn.molprop import MoleculePredictor
from setattn.molprop.config import new_run

pytestmark = pytest.mark.usefixtures("keep_threads")


def _refused(status: int, err: str, *needles: str) -> None:
    assert status == 2 and "Traceback" not in err, err
    for needle in needles:
        assert needle in err, (needle, err)


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("runs")
    data = freesolv_slice(folder / "fs.csv", 30)
    threads = torch.get_num_threads()
    from setattn import cli

    status = cli.main(["train", "--data", str(data), "--target-columns", "expt", "--epochs",
                       "2", "--output-dir", str(folder / "run"), *TINY])
    torch.set_num_threads(threads)
    assert status == 0
    return folder / "run"


@pytest.mark.parametrize("record", ["metrics.json", "split.json", "log.csv", "curve.png"])
def test_no_output_replaces_a_runs_record(model, tmp_path, capsys, record):
    data = freesolv_slice(tmp_path / "fs.csv", 5)
    before = sha256(model / record)
    status, _, err = run(["predict", "--model", model, "--data", data, "--output",
                          model / record], capsys)
    _refused(status, err, "argument --output", f"the same file as --model's {record}")
    status, _, err = run(["explain", "--model", model, "--smiles", "CCO", "--output",
                          model / record], capsys)
    _refused(status, err, f"the same file as --model's {record}")
    assert sha256(model / record) == before
    # the run still predicts: its records are whole
    status, _, err = run(["predict", "--model", model, "--data", data, "--output",
                          tmp_path / "p.csv"], capsys)
    assert status == 0, err


def test_explain_never_writes_over_the_csv_it_explains(model, tmp_path, capsys):
    out = tmp_path / "explained"
    out.mkdir()
    data = freesolv_slice(out / "molecules.csv", 5)  # the name of one of its output tables
    before = sha256(data)
    status, _, err = run(["explain", "--model", model, "--data", data, "--output", out],
                         capsys)
    _refused(status, err, "argument --output", "molecules.csv is the same file as --data")
    assert sha256(data) == before and not (out / "atoms.csv").exists()


def test_a_smiles_with_whitespace_inside_is_invalid_not_cut(model, tmp_path, capsys):
    data = tmp_path / "q.csv"
    data.write_text("smiles\nC CO\nCCO\nCCCCCCCC\tO\n")
    status, _, err = run(["predict", "--model", model, "--data", data, "--output",
                          tmp_path / "p.csv"], capsys)
    assert status == 0, err
    rows = read_csv(tmp_path / "p.csv")
    assert [r["expt"] == "" for r in rows] == [True, False, True]  # not methane, not octane
    assert "whitespace inside the SMILES" in rows[0]["error"] and rows[1]["error"] == ""


@pytest.mark.parametrize("targets, needle", [
    (("error",), "two columns named 'error'"),
    (("expt", "expt_std"), "two columns named 'expt_std'"),
])
def test_targets_that_would_collide_in_predicts_output(tmp_path, capsys, targets, needle):
    lines = freesolv_slice(tmp_path / "fs.csv", 30).read_text().splitlines()
    header = lines[0].replace("calc", targets[-1]).replace("expt", targets[0])
    data = tmp_path / "named.csv"
    data.write_text("\n".join([header, *lines[1:]]) + "\n")
    status, _, err = train_tiny(data, tmp_path / "run", capsys, targets=targets)
    _refused(status, err, "argument --target-columns", needle)
    assert not (tmp_path / "run" / "config.json").exists()


def test_a_target_column_without_any_label(tmp_path, capsys):
    rows = freesolv_slice(tmp_path / "fs.csv", 30).read_text().splitlines()
    data = tmp_path / "empty.csv"
    data.write_text("\n".join([rows[0] + ",b", *(r + "," for r in rows[1:])]) + "\n")
    for flags in ((), ("--kernel-ridge", "off")):
        status, _, err = train_tiny(data, tmp_path / f"run{len(flags)}", capsys, *flags,
                                    targets=("expt", "b"))
        _refused(status, err, "empty.csv: target column(s) ['b'] hold no label in any row")


def test_a_relative_data_path_resumes_from_another_directory(tmp_path, capsys, monkeypatch):
    (tmp_path / "work").mkdir()
    freesolv_slice(tmp_path / "work" / "fs.csv", 30)
    monkeypatch.chdir(tmp_path / "work")
    status, _, err = train_tiny(Path("fs.csv"), tmp_path / "run", capsys, epochs=2)
    assert status == 0, err
    (tmp_path / "run" / "metrics.json").unlink()
    monkeypatch.chdir(tmp_path)
    status, _, err = run(["train", "--output-dir", tmp_path / "run", "--resume"], capsys)
    assert status == 0, err
    assert (tmp_path / "run" / "metrics.json").is_file()


@pytest.mark.parametrize("options, needle", [
    ({"epochs": 2.5}, "option epochs: must be an int, got 2.5"),
    ({"hidden": 8.0}, "option hidden: must be an int"),
    ({"seed": "0"}, "option seed: must be an int, got '0'"),
    ({"lr": "0.01"}, "option lr: must be a float"),
    ({"compile": 1}, "option compile: must be a bool"),
    ({"split_sizes": 0.8}, "option split_sizes: must be a list of float"),
])
def test_api_options_of_the_wrong_type_are_named(tmp_path, options, needle):
    model = MoleculePredictor(output_dir=tmp_path / "run", **options)  # kept as given
    with pytest.raises(TypeError, match=needle):
        model.fit(["CCO", "CCC", "CCCC"], [1.0, 2.0, 3.0])
    assert not (tmp_path / "run").exists()  # nothing written: a corrected fit may go there
    lr = new_run({"lr": 1, "target_columns": ("y",)}).train.lr
    assert lr == 1.0 and isinstance(lr, float)  # an int where a float is expected is one
