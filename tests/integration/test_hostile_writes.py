"""Nothing of the user's is overwritten: one rule for every writer of a run (``setattn
train``, ``MoleculePredictor.fit`` and ``save``): a run folder is new or empty, or a
setattn run (its marker file), or it is refused naming the files that would be
replaced; an input is never a destination. Checked by the SHA-256 of every file at
stake. Also: an output that names a folder by its trailing slash, and CSV rows with more
cells than the header."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
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
from setattn.molprop.checkpoint import LOCK_NAME, RUN_MARKER

pytestmark = pytest.mark.usefixtures("keep_threads")

API = {"hidden": 8, "layers": 1, "heads": 2, "ensemble_size": 1, "epochs": 1,
       "descriptors": "none"}


def _refused(status: int, err: str, *needles: str) -> None:
    assert status == 2 and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1, err
    for needle in needles:
        assert needle in err, (needle, err)


def _hashes(folder: Path) -> dict[str, str]:
    return {p.name: sha256(p) for p in sorted(folder.iterdir()) if p.is_file()}


def _smiles_y(path: Path) -> tuple[list[str], np.ndarray]:
    rows = read_csv(path)
    return [r["smiles"] for r in rows], np.array([float(r["expt"]) for r in rows])


@pytest.mark.parametrize("name", ["log.csv", "metrics.json", "split.json", "config.json"])
def test_the_training_csv_under_a_run_files_name_is_never_replaced(tmp_path, capsys, name):
    folder = tmp_path / "d"
    folder.mkdir()
    data = freesolv_slice(folder / name, 30)
    before = sha256(data)
    status, _, err = train_tiny(data, folder, capsys, "--descriptors", "none")
    _refused(status, err, name, "replace")
    assert sha256(data) == before
    assert sorted(p.name for p in folder.iterdir()) == [name]  # no marker, no lock


def test_train_into_a_folder_of_the_users_files_is_refused(tmp_path, capsys):
    data = freesolv_slice(tmp_path / "fs.csv", 30)
    folder = tmp_path / "mine"
    folder.mkdir()
    for name in ("log.csv", "metrics.json", "split.json", "notes.txt"):
        (folder / name).write_text(f"the user's {name}\n")
    before = _hashes(folder)
    status, _, err = train_tiny(data, folder, capsys, "--descriptors", "none")
    _refused(status, err, "would replace log.csv, metrics.json, split.json")
    assert _hashes(folder) == before and not (folder / RUN_MARKER).exists()
    other = tmp_path / "other"  # nothing it would replace: still not a run folder
    other.mkdir()
    (other / "notes.txt").write_text("mine\n")
    status, _, err = train_tiny(data, other, capsys, "--descriptors", "none")
    _refused(status, err, "not a setattn run", "holds notes.txt")


def test_a_new_or_empty_folder_becomes_a_marked_run(tmp_path, capsys):
    data = freesolv_slice(tmp_path / "fs.csv", 30)
    empty = tmp_path / "empty"
    empty.mkdir()
    for out in (tmp_path / "new" / "run", empty):
        status, _, err = train_tiny(data, out, capsys, "--descriptors", "none")
        assert status == 0, err
        assert (out / RUN_MARKER).is_file() and not (out / LOCK_NAME).exists()
    status, _, err = train_tiny(data, empty, capsys, "--descriptors", "none")
    _refused(status, err, "already holds a run")
    status, _, err = run(["train", "--output-dir", empty, "--resume"], capsys)
    assert status == 0, err


def test_a_refused_run_into_a_new_folder_leaves_nothing(tmp_path, capsys):
    out = tmp_path / "new"
    status, _, err = train_tiny(tmp_path / "missing.csv", out, capsys)
    assert status == 2 and not out.exists(), err
    bad = tmp_path / "bad.csv"
    bad.write_text("smiles,expt\nCCO,abc\n")
    empty = tmp_path / "empty"  # the user's empty folder stays empty
    empty.mkdir()
    status, _, err = train_tiny(bad, empty, capsys)
    assert status == 2 and "row 0, column 'expt'" in err and not list(empty.iterdir()), err


def test_a_run_written_before_markers_still_resumes(tmp_path, capsys):
    data = freesolv_slice(tmp_path / "fs.csv", 30)
    out = tmp_path / "run"
    assert train_tiny(data, out, capsys, "--descriptors", "none", epochs=2)[0] == 0
    (out / RUN_MARKER).unlink()
    (out / "metrics.json").unlink()
    status, _, err = run(["train", "--output-dir", out, "--resume"], capsys)
    assert status == 0, err
    assert (out / RUN_MARKER).is_file()


def test_the_data_inside_a_run_folder_under_a_records_name_is_refused(tmp_path, capsys):
    """A run folder (marked) with the CSV inside under a record's name: refused by path."""
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / RUN_MARKER).write_text("{}\n")
    data = freesolv_slice(folder / "log.csv", 30)
    before = sha256(data)
    status, _, err = train_tiny(data, folder, capsys, "--descriptors", "none")
    _refused(status, err, "argument --data", "is a file the run in", "it would be replaced")
    assert sha256(data) == before


def test_api_fit_and_save_never_replace_the_users_files(tmp_path):
    smiles, y = _smiles_y(freesolv_slice(tmp_path / "fs.csv", 30))
    folder = tmp_path / "mine"
    folder.mkdir()
    for name in ("data.csv", "log.csv", "metrics.json"):
        (folder / name).write_text(f"the user's {name}\n")
    before = _hashes(folder)
    with pytest.raises(ValueError, match="argument output_dir: .* would replace data.csv, "
                                         "log.csv, metrics.json"):
        MoleculePredictor(output_dir=folder, verbose=False, **API).fit(smiles, y)
    model = MoleculePredictor(verbose=False, **API).fit(smiles, y)  # a temporary folder
    with pytest.raises(ValueError, match="argument directory: .* would replace data.csv"):
        model.save(folder)
    tests = tmp_path / "csv"  # a folder of test files: no run is written among them
    tests.mkdir()
    (tests / "test_a.csv").write_text("x\n")
    with pytest.raises(ValueError, match="not a setattn run .* holds test_a.csv"):
        model.save(tests)
    assert _hashes(folder) == before and sorted(p.name for p in tests.iterdir()) == ["test_a.csv"]
    saved = model.save(tmp_path / "saved")
    assert (saved / RUN_MARKER).is_file() and not (saved / LOCK_NAME).exists()
    assert MoleculePredictor.load(saved, verbose=False).predict(smiles[:3]).shape == (3, 1)
    again = MoleculePredictor(output_dir=tmp_path / "fit", verbose=False, **API).fit(smiles, y)
    assert (again.run_dir / RUN_MARKER).is_file()


def test_predict_output_with_a_trailing_slash_names_a_folder(tmp_path, capsys):
    data = freesolv_slice(tmp_path / "fs.csv", 30)
    out = tmp_path / "run"
    assert train_tiny(data, out, capsys, "--descriptors", "none")[0] == 0
    status, _, err = run(["predict", "--model", out, "--data", data, "--output",
                          f"{tmp_path / 'newdir'}/"], capsys)
    _refused(status, err, "argument --output", "ends in '/'", "give a file name")
    status, _, err = run(["explain", "--model", out, "--smiles", "CCO", "--output",
                          f"{tmp_path / 'newdir'}/"], capsys)
    _refused(status, err, "argument --output", "ends in '/'")
    assert not (tmp_path / "newdir").exists()


def test_explain_never_replaces_the_users_files_in_its_folder(tmp_path, capsys):
    data = freesolv_slice(tmp_path / "fs.csv", 30)
    out = tmp_path / "run"
    assert train_tiny(data, out, capsys, "--descriptors", "none")[0] == 0
    folder = tmp_path / "mine"
    folder.mkdir()
    for name in ("atoms.csv", "row_0.png", "notes.txt"):
        (folder / name).write_text(f"the user's {name}\n")
    before = _hashes(folder)
    explain = ["explain", "--model", out, "--data", data, "--max-pictures", "1", "--output"]
    status, _, err = run([*explain, folder], capsys)
    _refused(status, err, "argument --output", "holds atoms.csv, row_0.png, which explain "
                                                "would replace")
    assert _hashes(folder) == before
    (folder / "atoms.csv").unlink()
    (folder / "row_0.png").unlink()
    for _ in range(2):  # a folder explain wrote may be written again
        status, _, err = run([*explain, folder], capsys)
        assert status == 0, err
    assert (folder / "notes.txt").read_text() == "the user's notes.txt\n"
    assert (folder / ".setattn-explain").is_file() and (folder / "atoms.csv").is_file()


def test_rows_with_more_cells_than_the_header_are_refused(tmp_path, capsys):
    data = freesolv_slice(tmp_path / "fs.csv", 30)
    lines = data.read_text().splitlines()
    lines[3] += ",surplus"  # line 4 of the file
    bad = tmp_path / "bad.csv"
    bad.write_text("\n".join(lines) + "\n")
    padded = tmp_path / "padded.csv"  # empty cells past the header (spreadsheets): fine
    padded.write_text("\n".join(line + ",," for line in data.read_text().splitlines()) + "\n")
    before = sha256(bad)
    status, _, err = train_tiny(bad, tmp_path / "run", capsys, "--descriptors", "none")
    _refused(status, err, "bad.csv: line 4: 5 cells, but the header has 4 columns")
    assert train_tiny(padded, tmp_path / "run2", capsys, "--descriptors", "none")[0] == 0
    status, _, err = run(["predict", "--model", tmp_path / "run2", "--data", bad, "--output",
                          tmp_path / "p.csv"], capsys)
    _refused(status, err, "bad.csv: line 4: 5 cells")
    assert sha256(bad) == before and not (tmp_path / "p.csv").exists()


def test_save_keeps_the_config_pointing_at_the_copied_data(tmp_path):
    smiles, y = _smiles_y(freesolv_slice(tmp_path / "fs.csv", 30))
    model = MoleculePredictor(verbose=False, **API).fit(smiles, y)
    saved = model.save(tmp_path / "saved")
    config = json.loads((saved / "config.json").read_text())
    assert Path(config["data"]) == (saved / "data.csv").resolve()
    shutil.rmtree(model.run_dir)  # the temporary run goes; the saved one stands alone
    assert MoleculePredictor.load(saved, verbose=False).predict(smiles[:2]).shape == (2, 1)


def test_tiny_flags_are_the_shared_ones():
    assert TINY[:2] == ["--hidden", "8"]
