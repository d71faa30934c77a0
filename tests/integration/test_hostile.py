"""Hostile and everyday-messy input through ``setattn train / predict / explain``.

Each case is a file (written here, from the bundled FreeSolv rows) or a flag a user
might give: the command ends with exit status 0, or 2 and one line naming the file, row,
column, key or flag; never a traceback; and every input file has the same bytes after
the command as before (SHA-256).
"""

from __future__ import annotations

import codecs
import csv
import errno
import gzip
import hashlib
import io
import json
import os
import socket
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from molecule_runs import TINY, freesolv_slice, read_csv, run, subprocess_env

from setattn.molprop import checkpoint, splits
from setattn.molprop.checkpoint import LOCK_NAME

FAST = [*TINY, "--descriptors", "none", "--epochs", "1"]


@pytest.fixture(autouse=True)
def _keep_threads():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def _sha(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


_FREESOLV = Path(__file__).resolve().parents[2] / "datasets" / "molecules" / "freesolv.csv"


def _records(n: int = 40) -> list[list[str]]:
    """The header and the first ``n`` FreeSolv rows (iupac, smiles, expt, calc)."""
    with open(_FREESOLV, newline="") as handle:
        return list(csv.reader(handle))[: n + 1]


def _write(path: Path, rows: list[list[str]], delimiter: str = ",", encoding: str = "utf-8",
           bom: bool = False, compress: bool = False) -> Path:
    text = io.StringIO()
    csv.writer(text, delimiter=delimiter, lineterminator="\n").writerows(rows)
    data = text.getvalue().encode(encoding)
    if bom:
        data = codecs.BOM_UTF8 + data
    path.write_bytes(gzip.compress(data) if compress else data)
    return path


def _refused(status: int, err: str, *needles: str) -> None:
    """Exit status 2, one line naming what is wrong, no traceback."""
    assert status == 2, err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("setattn "), err
    for needle in needles:
        assert needle in err, (needle, err)


def _train(data: Path, out: Path, capsys, *flags: str, targets=("expt",)):
    return run(["train", "--data", data, "--target-columns", *targets, "--output-dir", out,
                *FAST, *flags], capsys)


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    """A tiny run on 40 FreeSolv rows, for predict and explain."""
    from setattn import cli

    folder = tmp_path_factory.mktemp("hostile")
    data = freesolv_slice(folder / "fs.csv", 40)
    threads = torch.get_num_threads()
    status = cli.main(["train", "--data", str(data), "--target-columns", "expt",
                       "--output-dir", str(folder / "run"), *FAST])
    torch.set_num_threads(threads)
    assert status == 0
    return folder / "run"


# ----------------------------------------------------------------------------
# Everyday files that must be accepted
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("dialect", [
    {"delimiter": ";", "bom": True},  # Excel in a European locale
    {"delimiter": "\t", "compress": True},
    {"delimiter": ",", "encoding": "utf-16"},  # Excel's "Unicode text" (BOM included)
])
def test_excel_semicolon_tab_gzip_and_utf16_files_train_and_predict(tmp_path, capsys, model,
                                                                    dialect):
    rows = _records(40)
    data = _write(tmp_path / "fs.csv", rows, **dialect)
    before = _sha(data)
    status, out, err = _train(data, tmp_path / "run", capsys)
    assert status == 0, err
    assert "test RMSE" in out and json.loads((tmp_path / "run" / "split.json").read_text())
    status, _, err = run(["predict", "--model", model, "--data", data, "--output",
                          tmp_path / "p.csv"], capsys)
    assert status == 0, err
    assert [r["smiles"] for r in read_csv(tmp_path / "p.csv")] == [r[1] for r in rows[1:]]
    assert _sha(data) == before


def test_latin1_file_needs_encoding_and_says_so(tmp_path, capsys, model):
    rows = _records(40)
    rows[12][0] = "éthanol"  # the iupac column: a byte 0xe9 in latin-1
    data = _write(tmp_path / "fs.csv", rows, encoding="latin-1")
    before = _sha(data)
    status, _, err = _train(data, tmp_path / "run", capsys)
    _refused(status, err, "fs.csv: line 13: not valid UTF-8", "0xe9", "--encoding")
    assert not (tmp_path / "run").exists()
    status, _, err = run(["predict", "--model", model, "--data", data, "--output",
                          tmp_path / "p.csv"], capsys)
    _refused(status, err, "fs.csv: line 13", "--encoding")
    assert not (tmp_path / "p.csv").exists()
    status, _, err = _train(data, tmp_path / "run", capsys, "--encoding", "latin-1")
    assert status == 0, err
    status, _, err = run(["predict", "--model", model, "--data", data, "--output",
                          tmp_path / "p.csv", "--encoding", "latin-1"], capsys)
    assert status == 0, err
    status, _, err = run(["predict", "--model", model, "--data", data, "--output",
                          tmp_path / "q.csv", "--encoding", "klingon"], capsys)
    _refused(status, err, "argument --encoding: unknown encoding 'klingon'")
    assert _sha(data) == before


# ----------------------------------------------------------------------------
# Files that must be refused, by name
# ----------------------------------------------------------------------------


def _bad_files(tmp: Path) -> dict[str, tuple[Path, list[str]]]:
    """name -> (file, what the message must name)."""
    rows = _records(30)
    dup = [r + [r[2]] for r in rows]
    dup[0][-1] = "expt"
    inf = [list(r) for r in rows]
    inf[6][2] = "inf"
    big = [list(r) for r in rows]
    big[9][0] = "x" * 140_000
    quote = [list(r) for r in rows]
    quote[4][1] = '"CCO'  # an opening quote that never closes swallows the rest
    return {
        "duplicate": (_write(tmp / "dup.csv", dup), ["dup.csv", "column 'expt' appears 2 times"]),
        "infinite": (_write(tmp / "inf.csv", inf), ["inf.csv: row 5, column 'expt'",
                                                     "not a finite number"]),
        "huge cell": (_write(tmp / "big.csv", big), ["big.csv: line 10", "field limit"]),
        "empty": (_write(tmp / "empty.csv", []), ["empty.csv: empty file"]),
        "truncated gzip": (tmp / "cut.csv.gz", ["cut.csv.gz", "unreadable"]),
    }


@pytest.mark.parametrize("case", ["duplicate", "infinite", "huge cell", "empty",
                                  "truncated gzip"])
def test_bad_files_are_refused_by_name_in_train(tmp_path, capsys, case):
    (tmp_path / "cut.csv.gz").write_bytes(gzip.compress(_FREESOLV.read_bytes())[:3000])
    data, needles = _bad_files(tmp_path)[case]
    before = _sha(data)
    status, _, err = _train(data, tmp_path / "run", capsys)
    _refused(status, err, *needles)
    assert _sha(data) == before
    assert not (tmp_path / "run").exists()  # a refused run leaves nothing behind


def test_bad_files_are_refused_by_name_in_predict(tmp_path, capsys, model):
    (tmp_path / "cut.csv.gz").write_bytes(gzip.compress(_FREESOLV.read_bytes())[:3000])
    for case in ("huge cell", "empty", "truncated gzip"):
        data, needles = _bad_files(tmp_path)[case]
        output = tmp_path / "p.csv"
        status, _, err = run(["predict", "--model", model, "--data", data, "--output",
                              output], capsys)
        _refused(status, err, *needles[:1])
        assert not output.exists()


def test_same_target_twice_and_smiles_as_target_are_refused(tmp_path, capsys):
    data = freesolv_slice(tmp_path / "fs.csv", 30)
    status, _, err = _train(data, tmp_path / "run", capsys, targets=("expt", "expt"))
    _refused(status, err, "argument --target-columns: ['expt'] given more than once")
    status, _, err = _train(data, tmp_path / "run", capsys, targets=("smiles",))
    _refused(status, err, "argument --target-columns: 'smiles' is the SMILES column")


def test_config_naming_a_system_file_never_prints_its_content(tmp_path, capsys, model):
    out = tmp_path / "run"
    out.mkdir()
    config = json.loads((model / "config.json").read_text())
    secret = tmp_path / "passwd"
    secret.write_text("root:x:0:0:root:/root:/bin/bash\ndaemon:x:1:1::/:/bin/false\n")
    config["data"] = str(secret)
    (out / "config.json").write_text(json.dumps(config))
    status, _, err = run(["train", "--output-dir", out, "--resume"], capsys)
    _refused(status, err, "passwd: missing column(s) ['smiles', 'expt']", "not shown")
    assert "root" not in err and "daemon" not in err


# ----------------------------------------------------------------------------
# Outputs: never over an input, never a directory for a file, permissions
# ----------------------------------------------------------------------------


def test_predict_never_writes_over_its_input(tmp_path, capsys, model):
    data = freesolv_slice(tmp_path / "fs.csv", 20)
    before = _sha(data)
    link = tmp_path / "link.csv"
    link.symlink_to(data)
    for output in (data, tmp_path / "." / "fs.csv", link):
        status, _, err = run(["predict", "--model", model, "--data", data, "--output",
                              output], capsys)
        _refused(status, err, "argument --output", "the same file as --data")
    status, _, err = run(["predict", "--model", model, "--data", data, "--output",
                          model / "config.json"], capsys)
    _refused(status, err, "argument --output", "the same file as --model")
    assert _sha(data) == before


def test_outputs_that_are_directories_files_or_unwritable(tmp_path, capsys, model):
    data = freesolv_slice(tmp_path / "fs.csv", 30)
    status, _, err = run(["predict", "--model", model, "--data", data, "--output", tmp_path],
                         capsys)
    _refused(status, err, f"argument --output: {tmp_path} is a directory")
    status, _, err = run(["explain", "--model", model, "--smiles", "CCO", "--output",
                          data / "x.png"], capsys)
    _refused(status, err, "argument --output:", "is a file, not a folder")
    status, _, err = _train(data, data, capsys)
    _refused(status, err, f"argument --output-dir: {data} is a file, not a directory")
    status, _, err = _train(data, Path("/sys/setattn-no-such-run"), capsys)
    _refused(status, err, "--output-dir", "/sys/setattn-no-such-run")
    status, _, err = run(["predict", "--model", model, "--data", data, "--output",
                          "/sys/setattn-preds.csv"], capsys)
    _refused(status, err, "/sys")


# ----------------------------------------------------------------------------
# Runs: config.json, checkpoints, sizes, memory
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("edit, needle", [
    (lambda c: [c], "a JSON list, expected an object"),
    (lambda c: {**c, "ensemble_size": "2"}, "key 'ensemble_size': '2' is not of type int"),
    (lambda c: {**c, "ensemble_size": 0}, "key 'ensemble_size': must be >= 1, got 0"),
    (lambda c: {**c, "colour": "red"}, "unknown key(s) ['colour']"),
    (lambda c: {**c, "train": {**c["train"], "epochs": None}}, "key 'train.epochs'"),
    (lambda c: {**c, "model": {**c["model"], "hidden": 12000}},
     "key 'model.hidden': must be <= 8,192 (the largest setattn accepts), got 12000"),
    (lambda c: {**c, "model": 3}, "key 'model' holds a JSON int"),
])
def test_malformed_config_json_names_the_key(tmp_path, capsys, model, edit, needle):
    out = tmp_path / "run"
    out.mkdir()
    config = edit(json.loads((model / "config.json").read_text()))
    (out / "config.json").write_text(json.dumps(config))
    status, _, err = run(["train", "--output-dir", out, "--resume"], capsys)
    _refused(status, err, f"{out / 'config.json'}: ", needle)
    status, _, err = run(["predict", "--model", out, "--data", _FREESOLV, "--output",
                          tmp_path / "p.csv"], capsys)
    _refused(status, err, needle)


def test_config_json_that_is_not_json(tmp_path, capsys):
    out = tmp_path / "run"
    out.mkdir()
    (out / "config.json").write_bytes(b"\x00\xff binary")
    status, _, err = run(["train", "--output-dir", out, "--resume"], capsys)
    _refused(status, err, "config.json: not a setattn run configuration (not valid JSON")


def test_checkpoint_claiming_absurd_width_is_refused_before_building(tmp_path, capsys, model,
                                                                    monkeypatch):
    ckpt = checkpoint.load_checkpoint(model / "model_0" / "best.pt")
    ckpt["config"] = {**ckpt["config"], "hidden": 12000}
    path = tmp_path / "best.pt"
    checkpoint.save_checkpoint({k: v for k, v in ckpt.items() if k != "setattn_format"}, path)
    built = []
    monkeypatch.setattr(checkpoint, "MoleculeNetwork", lambda config: built.append(config))
    status, _, err = run(["predict", "--model", path, "--data", _FREESOLV, "--output",
                          tmp_path / "p.csv"], capsys)
    _refused(status, err, "best.pt: key 'config.hidden': must be <= 8,192",
             "refused before building it")
    assert built == []  # no model of that width was ever made


def test_memory_hungry_flags_are_refused_with_the_estimate(tmp_path, capsys):
    data = freesolv_slice(tmp_path / "fs.csv", 30)
    status, _, err = _train(data, tmp_path / "run", capsys, "--hidden", "1000000000")
    assert status == 2 and err.strip().splitlines()[-1] == (  # argparse's error, after usage
        "setattn train: error: argument --hidden: must be <= 8,192 (the largest setattn "
        "accepts), got 1000000000")
    status, _, err = _train(data, tmp_path / "run", capsys, "--hidden", "8192", "--layers",
                            "64", "--heads", "8", "--batch-size", "1000000")
    _refused(status, err, "--batch-size", "this run needs about", "GB of memory", "available")
    assert not (tmp_path / "run").exists()  # nothing half-made


# ----------------------------------------------------------------------------
# Resume on changed data; output directories claimed once
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("change, needle", [
    (lambda rows: rows[:1] + rows[1:][::-1], "the SMILES column"),
    (lambda rows: [*rows[:5], [*rows[5][:2], "-99", *rows[5][3:]], *rows[6:]],
     "the labels of 'expt'"),
    (lambda rows: rows[:-1], "31 data rows then, 30 now"),
])
def test_resume_refuses_changed_data(tmp_path, capsys, change, needle):
    rows = _records(31)
    data = _write(tmp_path / "fs.csv", rows)
    out = tmp_path / "run"
    status, _, err = _train(data, out, capsys, "--epochs", "2")
    assert status == 0, err
    (out / "metrics.json").unlink()
    metrics_before = {p: _sha(p) for p in out.rglob("*.pt")}
    _write(data, change(rows))
    status, _, err = run(["train", "--output-dir", out, "--resume"], capsys)
    _refused(status, err, "argument --resume: fs.csv changed since the run", needle,
             "another --output-dir")
    assert not (out / "metrics.json").exists()
    assert {p: _sha(p) for p in out.rglob("*.pt")} == metrics_before


def test_resume_goes_on_when_only_unused_bytes_changed(tmp_path, capsys):
    rows = _records(31)
    data = _write(tmp_path / "fs.csv", rows)
    out = tmp_path / "run"
    assert _train(data, out, capsys, "--epochs", "2")[0] == 0
    (out / "metrics.json").unlink()
    _write(data, [[f"name {i}", *r[1:]] for i, r in enumerate(rows)])  # another column
    status, stdout, err = run(["train", "--output-dir", out, "--resume"], capsys)
    assert status == 0, err
    assert "its bytes changed since the run started, but not the rows, SMILES or labels" \
        in stdout


def test_a_held_or_stale_lock_refuses_the_directory(tmp_path, capsys):
    data = freesolv_slice(tmp_path / "fs.csv", 30)
    out = tmp_path / "run"
    out.mkdir()
    lock = out / LOCK_NAME
    lock.write_text(json.dumps({"pid": os.getpid(), "host": os.uname().nodename,
                                "started": "now"}))
    status, _, err = _train(data, out, capsys)
    _refused(status, err, f"argument --output-dir: {out} is in use by another setattn run",
             f"pid {os.getpid()}")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    lock.write_text(json.dumps({"pid": dead.pid, "host": os.uname().nodename,
                                "started": "then"}))
    status, _, err = _train(data, out, capsys)
    _refused(status, err, "has a stale lock", f"pid {dead.pid}", f"delete {lock}")
    lock.unlink()
    assert _train(data, out, capsys)[0] == 0
    assert not lock.exists()


@pytest.mark.slow
def test_two_runs_started_together_into_one_directory(tmp_path):
    data = freesolv_slice(tmp_path / "fs.csv", 60)
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "setattn.cli", "train", "--data", str(data),
           "--target-columns", "expt", "--output-dir", str(out), *FAST, "--epochs", "3"]
    procs = [subprocess.Popen(cmd, env=subprocess_env(), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = [p.communicate(timeout=300) for p in procs]
    statuses = sorted(p.returncode for p in procs)
    assert statuses == [0, 2], results
    err = next(e for p, (_, e) in zip(procs, results) if p.returncode == 2)
    assert "Traceback" not in err
    assert "is in use by another setattn run" in err or "already holds a run" in err
    assert not (out / LOCK_NAME).exists()
    assert json.loads((out / "metrics.json").read_text())["molecules"] == 60


# ----------------------------------------------------------------------------
# Chemistry: salts, large molecules, single-class test parts
# ----------------------------------------------------------------------------


def test_salts_are_noted_and_strict_refuses_them(tmp_path, capsys, model):
    rows = _records(30)
    rows[3][1] = "CCO.CCCCCCCCCCCCCC"
    rows[8][1] = "C" * 1000  # a valid 1,000-atom chain: above the size limit
    data = _write(tmp_path / "fs.csv", rows)
    status, out, err = _train(data, tmp_path / "run", capsys)
    assert status == 0, err
    assert "row 2: 'CCO.CCCCCCCCCCCCCC': 2 fragments: the largest (14 atoms)" in out
    assert "row 7:" in out and "1000 heavy atoms, above the limit of 300" in out
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert [n["row"] for n in metrics["notes"]] == [2]
    assert [s["row"] for s in metrics["skipped_rows"]] == [7]
    status, _, err = _train(data, tmp_path / "strict", capsys, "--strict")
    assert status == 2 and "Traceback" not in err
    assert "1 molecule(s) above the size or time limit and 1 SMILES of several fragments" \
        " (--strict)" in err
    status, _, err = _train(data, tmp_path / "big", capsys, "--max-heavy-atoms", "2000")
    assert status == 0, err  # the limit is a flag

    status, _, err = run(["predict", "--model", model, "--data", data, "--output",
                          tmp_path / "p.csv"], capsys)
    assert status == 0, err
    preds = read_csv(tmp_path / "p.csv")
    assert preds[2]["error"].startswith("note: 2 fragments") and preds[2]["expt"] != ""
    assert preds[7]["error"].startswith("skipped: 1000 heavy atoms") and preds[7]["expt"] == ""


def test_single_class_test_part_reports_roc_auc_as_undefined(tmp_path, capsys):
    rows = _records(40)
    _, val, test = splits.random(40, [0.8, 0.1, 0.1], 0)
    labels = ["1" if i in set(val[:2]) or i % 3 == 0 else "0" for i in range(40)]
    for i in test:
        labels[i] = "0"
    data = _write(tmp_path / "cls.csv", [["smiles", "active"]] +
                  [[r[1], y] for r, y in zip(rows[1:], labels)])
    out = tmp_path / "run"
    status, stdout, err = run(["train", "--data", data, "--target-columns", "active", "--task",
                               "classification", "--output-dir", out, *FAST], capsys)
    assert status == 0, err
    reason = f"task 'active': only class 0 in the test part ({len(test)} label(s))"
    assert f"ROC-AUC undefined ({reason})" in stdout
    # said before training too, with what it means, and only for the part it concerns
    note = f"note: {reason}; its test ROC-AUC will be undefined"
    assert note in stdout and stdout.index(note) < stdout.index(f"ROC-AUC undefined ({reason})")
    assert "in the training part" not in stdout and "in the validation part" not in stdout
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["test"]["roc_auc"] is None
    assert metrics["test"]["roc_auc_undefined"] == reason
    assert metrics["test"]["per_task"]["active"]["roc_auc_undefined"] == reason


# ----------------------------------------------------------------------------
# Outputs that are not regular files; text RDKit would read otherwise
# ----------------------------------------------------------------------------


def _special(folder: Path, kind: str, suffix: str) -> tuple[Path, str]:
    """A special file of ``kind`` in ``folder`` (a device: /dev/full's numbers; where
    this user cannot make one, /dev/full itself, which it cannot replace either) and
    the words its refusal names."""
    path = folder / f"{kind}{suffix}"
    if kind == "device":
        try:
            os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 7))
        except PermissionError:
            path = Path("/dev/full")
        return path, "is a character device"
    if kind == "fifo":
        os.mkfifo(path)
        return path, "is a FIFO"
    if kind == "socket":
        server = socket.socket(socket.AF_UNIX)
        server.bind(str(path))
        server.close()  # the socket file stays
        return path, "is a socket"
    (folder / f"real{suffix}").write_text("the user's file\n")
    path.symlink_to(folder / f"real{suffix}")
    return path, "is a symbolic link (to"


@pytest.mark.parametrize("kind", ["device", "fifo", "socket", "symlink"])
def test_outputs_that_are_special_files_are_refused_before_any_work(tmp_path, capsys,
                                                                     model, kind):
    data = freesolv_slice(tmp_path / "fs.csv", 10)
    for command, suffix in (["predict", "--data", data], ".csv"), \
            (["explain", "--smiles", "CCO"], ".png"):
        target, words = _special(tmp_path, kind, suffix)
        mode = os.lstat(target).st_mode
        status, out, err = run([command[0], "--model", model, *command[1:], "--output",
                                target], capsys)
        _refused(status, err, f"argument --output: {target}", words)
        assert "wrote" not in out and "drawn" not in out
        assert stat.S_IFMT(os.lstat(target).st_mode) == stat.S_IFMT(mode)  # not replaced
        if kind == "symlink":
            assert (tmp_path / f"real{suffix}").read_text() == "the user's file\n"


def test_explain_into_a_folder_holding_a_fifo_is_refused(tmp_path, capsys, model):
    data = freesolv_slice(tmp_path / "fs.csv", 5)
    out = tmp_path / "out"
    out.mkdir()
    (out / ".setattn-explain").write_text("{}\n")  # a folder explain wrote before
    os.mkfifo(out / "atoms.csv")
    reader = os.open(out / "atoms.csv", os.O_RDWR | os.O_NONBLOCK)  # never blocks a writer
    try:
        status, _, err = run(["explain", "--model", model, "--data", data, "--output", out],
                             capsys)
    finally:
        os.close(reader)
    _refused(status, err, "atoms.csv is a FIFO")
    assert stat.S_ISFIFO(os.lstat(out / "atoms.csv").st_mode)


def test_a_full_disk_names_the_file(tmp_path, capsys, model, monkeypatch):
    data = freesolv_slice(tmp_path / "fs.csv", 10)

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    out = tmp_path / "preds.csv"
    status, _, err = run(["predict", "--model", model, "--data", data, "--output", out],
                         capsys)
    _refused(status, err, f"{out}: No space left on device")
    assert not out.exists() and not list(tmp_path.glob(".preds.csv.*"))


TEXT_ROWS = {"C\U0001F600": "U+1F600", "CCO\x00": "U+0000", "CCO\u200b": "U+200B",
             "c1ccccc1\0": "U+0000", "C\ue000": "U+E000", "CC\u0378": "U+0378",
             "C\x7f": "U+007F"}
"""SMILES that RDKit reads as the molecule before their last character, and the code
point each error must name."""


def test_characters_rdkit_would_drop_are_row_errors(tmp_path, capsys, model):
    data = _write(tmp_path / "odd.csv", [["smiles"], *([s] for s in TEXT_ROWS), ["CCO"]])
    out = tmp_path / "p.csv"
    status, _, err = run(["predict", "--model", model, "--data", data, "--output", out],
                         capsys)
    assert status == 0, err
    rows = read_csv(out)
    assert [r["smiles"] for r in rows] == [*TEXT_ROWS, "CCO"]
    for row, point in zip(rows, TEXT_ROWS.values()):
        assert row["expt"] == "" and f"character {point} (" in row["error"], row
    assert rows[-1]["expt"] != "" and rows[-1]["error"] == ""


def test_the_api_refuses_a_dict_and_makes_a_lone_surrogate_a_row_error(model):
    from setattn.molprop import MoleculePredictor

    predictor = MoleculePredictor.load(model, verbose=False)
    with pytest.raises(TypeError, match="argument smiles: a dict is not a list of SMILES"):
        predictor.predict({"a": "CCO"})
    values = predictor.predict(["\ud800", "CCO", "C" * 2_000_000])
    assert np.isnan(values[0]).all() and np.isfinite(values[1]).all()
    assert np.isnan(values[2]).all()
    (first, reason_1), (third, reason_3) = [(i, m) for i, _, m in predictor.errors]
    assert (first, third) == (0, 2)
    assert "U+D800 (a lone surrogate" in reason_1
    assert "2,000,000 characters" in reason_3 and "not read" in reason_3
