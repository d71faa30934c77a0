"""A damaged model is never used, a resumed run says which setting changed, and a
molecule RDKit cannot featurise in time does not hold up a command: a checkpoint with
one flipped byte in its tensor data is refused by predict, explain, resume and
``MoleculePredictor.load``; ``--resume`` after ``config.json`` was edited names the
field; a 5,000-atom chain is stopped at its deadline and by SIGTERM or Ctrl-C; isotopes,
dummy atoms and unusual elements are predicted with a note."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
import torch
from molecule_runs import (
    freesolv_slice,
    keep_threads,  # noqa: F401 (the fixture pytestmark uses)
    read_csv,
    run,
    sha256,
    subprocess_env,
    train_tiny,
)

from setattn.chem.descriptors import descriptor_count
from setattn.molprop import MoleculePredictor, checkpoint
from setattn.molprop.checkpoint import CheckpointError
from setattn.molprop.featurize import featurize

pytestmark = pytest.mark.usefixtures("keep_threads")


def _flip_tensor_byte(path: Path) -> None:
    """Flip one byte inside the largest tensor's data of a torch zip file (the zip
    headers, and so ``torch.load``, are left intact)."""
    with zipfile.ZipFile(path) as archive:
        info = max((i for i in archive.infolist() if "/data/" in i.filename),
                   key=lambda i: i.file_size)
    raw = bytearray(path.read_bytes())
    name_len = int.from_bytes(raw[info.header_offset + 26:info.header_offset + 28], "little")
    extra_len = int.from_bytes(raw[info.header_offset + 28:info.header_offset + 30], "little")
    start = info.header_offset + 30 + name_len + extra_len
    raw[start + info.file_size // 2] ^= 0x40
    path.write_bytes(bytes(raw))


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("models")
    data = freesolv_slice(folder / "fs.csv", 30)
    threads = torch.get_num_threads()
    from setattn import cli
    status = cli.main(["train", "--data", str(data), "--target-columns", "expt", "--epochs",
                       "2", "--output-dir", str(folder / "run"), "--hidden", "8", "--layers",
                       "1", "--heads", "2", "--ensemble-size", "1", "--num-threads", "1",
                       "--descriptors", "none"])
    torch.set_num_threads(threads)
    assert status == 0
    return folder / "run"


def test_a_flipped_byte_is_refused_by_predict_explain_resume_and_load(tiny_run, tmp_path,
                                                                      capsys):
    import shutil
    run_dir = tmp_path / "run"
    shutil.copytree(tiny_run, run_dir)
    data = tiny_run.parent / "fs.csv"
    status, _, err = run(["predict", "--model", run_dir, "--data", data, "--output",
                          tmp_path / "good.csv"], capsys)
    assert status == 0, err
    best, last = run_dir / "model_0" / "best.pt", run_dir / "model_0" / "last.pt"
    _flip_tensor_byte(best)
    torch.load(best, weights_only=True)  # still a readable torch file: only the checksum tells
    status, _, err = run(["predict", "--model", run_dir, "--data", data, "--output",
                          tmp_path / "p.csv"], capsys)
    assert status == 2 and f"{best}: damaged checkpoint" in err, err
    assert not (tmp_path / "p.csv").exists()
    status, _, err = run(["explain", "--model", run_dir, "--smiles", "CCO", "--output",
                          tmp_path / "e.png"], capsys)
    assert status == 2 and f"{best}: damaged checkpoint" in err, err
    with pytest.raises(CheckpointError, match="damaged checkpoint"):
        MoleculePredictor.load(run_dir, verbose=False)
    shutil.copy(tiny_run / "model_0" / "best.pt", best)
    (run_dir / "metrics.json").unlink()  # an unfinished run, to resume
    _flip_tensor_byte(last)
    before = sha256(last)
    status, _, err = run(["train", "--output-dir", run_dir, "--resume"], capsys)
    assert status == 2 and f"{last}: damaged checkpoint" in err and "Traceback" not in err, err
    assert sha256(last) == before


def test_checkpoints_carry_a_checksum_and_old_ones_still_load(tiny_run, tmp_path):
    best = tiny_run / "model_0" / "best.pt"
    ckpt = torch.load(best, weights_only=True)
    assert ckpt["checksum"] == checkpoint.tensor_checksum(ckpt)
    del ckpt["checksum"]  # as written before checksums existed: read unverified
    old = tmp_path / "old.pt"
    torch.save(ckpt, old)
    model, meta = checkpoint.load_network(old)
    assert meta["target_columns"] == ["expt"]
    ckpt["checksum"] = "0" * 64  # a checksum that does not match
    torch.save(ckpt, old)
    with pytest.raises(CheckpointError, match=f"{old}: damaged checkpoint"):
        checkpoint.load_network(old)


def test_resume_after_config_json_was_edited_names_the_field(tiny_run, tmp_path, capsys):
    import shutil
    run_dir = tmp_path / "run"
    shutil.copytree(tiny_run, run_dir)
    (run_dir / "metrics.json").unlink()
    config_path = run_dir / "config.json"
    config = json.loads(config_path.read_text())
    config["model"]["hidden"] = 16
    config_path.write_text(json.dumps(config))
    status, _, err = run(["train", "--output-dir", run_dir, "--resume"], capsys)
    assert status == 2 and "Traceback" not in err, err
    assert "model.hidden 8" in err and "now give 16" in err and "last.pt" in err, err
    status, _, err = run(["predict", "--model", run_dir, "--data", tiny_run.parent / "fs.csv",
                          "--output", tmp_path / "p.csv"], capsys)
    assert status == 0, err  # predict reads each checkpoint's own config


def test_the_learning_rate_logged_is_the_epochs_own(tmp_path, capsys):
    data = freesolv_slice(tmp_path / "fs.csv", 30)
    out = tmp_path / "run"
    assert train_tiny(data, out, capsys, "--descriptors", "none", "--batch-size", "100",
                      epochs=3)[0] == 0
    rows = read_csv(out / "log.csv")
    # one step per epoch: the OneCycle schedule's steps 0, 1, 2 of 3
    schedule = torch.optim.lr_scheduler.OneCycleLR(
        torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1e-3), max_lr=1e-3,
        total_steps=3)
    expected = []
    for _ in range(3):
        expected.append(schedule.get_last_lr()[0])
        schedule.optimizer.step()
        schedule.step()
    lr = json.loads((out / "config.json").read_text())["train"]["lr"]
    assert lr == 1e-3
    assert [float(r["lr"]) for r in rows] == pytest.approx(expected, rel=1e-6)


def test_a_large_molecule_is_stopped_at_its_deadline():
    start = time.perf_counter()
    with pytest.raises(ValueError, match="took over 2 s.*worker process"):
        featurize("C" * 3000, descriptor_count(), max_heavy_atoms=10_000, time_budget=2)
    assert time.perf_counter() - start < 10


def _children(pid: int) -> list[str]:
    """The process ids of ``pid``'s children (Linux's /proc)."""
    tasks = Path(f"/proc/{pid}/task")
    return [c for t in (tasks.iterdir() if tasks.is_dir() else [])
            for c in (t / "children").read_text().split()]


@pytest.mark.parametrize(("signum", "status"), [(signal.SIGTERM, 128 + signal.SIGTERM),
                                                (signal.SIGINT, 130)])
def test_sigterm_and_ctrl_c_stop_predict_on_a_5000_atom_chain(tmp_path, capsys, signum,
                                                              status):
    data = freesolv_slice(tmp_path / "fs.csv", 30)
    out = tmp_path / "run"
    assert train_tiny(data, out, capsys)[0] == 0  # with RDKit descriptors
    chain = tmp_path / "chain.csv"
    chain.write_text("smiles\nCCO\n" + "C" * 5000 + "\n")
    before = sha256(chain)
    command = [sys.executable, "-m", "setattn.cli", "predict", "--model", str(out), "--data",
               str(chain), "--output", str(tmp_path / "p.csv"), "--max-heavy-atoms", "10000",
               "--workers", "1"]
    process = subprocess.Popen(command, env=subprocess_env(), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    waited = time.perf_counter()  # until the chain's featurisation process has started
    while not _children(process.pid) and time.perf_counter() - waited < 120:
        time.sleep(0.2)
    kids = _children(process.pid)
    assert kids, "the chain was never featurised in a worker process"
    time.sleep(1)
    sent = time.perf_counter()
    process.send_signal(signum)
    try:
        process.communicate(timeout=15)
    finally:
        process.kill()
    assert time.perf_counter() - sent < 10  # the chain alone would take minutes
    assert process.returncode == status
    assert sha256(chain) == before and not (tmp_path / "p.csv").exists()
    time.sleep(0.5)  # the featurisation process ended with the command (or is a zombie)
    assert all(not Path(f"/proc/{k}").exists()
               or Path(f"/proc/{k}/stat").read_text().split(")")[-1].split()[0] == "Z"
               for k in kids)
    assert not list(tmp_path.glob(".p.csv.*"))  # no half-written output left behind


def test_isotopes_dummy_atoms_and_unusual_elements_get_a_note(tiny_run, tmp_path, capsys):
    data = tmp_path / "odd.csv"
    data.write_text("smiles\nCO\n[2H]C([2H])([2H])O\n*C\nC[Xe]\nCCO\n")
    out = tmp_path / "p.csv"
    status, stdout, err = run(["predict", "--model", tiny_run, "--data", data, "--output", out],
                              capsys)
    assert status == 0, err
    rows = read_csv(out)
    assert rows[1]["expt"] == rows[0]["expt"]  # deuterated methanol is methanol
    assert rows[1]["error"] == ("note: isotopes stripped (3 x [2H]): featurised as the "
                                "plain element")
    assert rows[2]["error"].startswith("note: 1 dummy atom '*'") and rows[2]["expt"]
    assert "element Xe outside the model's element list" in rows[3]["error"]
    assert rows[0]["error"] == rows[4]["error"] == ""
    assert "3 with a note" in stdout
    model = MoleculePredictor.load(tiny_run, verbose=False)
    model.predict(["[13CH3]O", "CO"])
    assert [i for i, _, _ in model.notes] == [0] and "[13C]" in model.notes[0][2]
