"""Surviving faults: a training process killed with SIGKILL, and checkpoints on
``--resume`` that are truncated, foreign, or crafted to run code when unpickled.

(``test_train.py`` covers the checkpoint reader on such files and ``predict`` on a
malicious ``best.pt``; here the same files reach ``train --resume``.)
"""

from __future__ import annotations

import pickle
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from molecule_runs import TINY, freesolv_slice, read_csv, run, subprocess_env

from setattn.molprop import checkpoint, config
from setattn.molprop.checkpoint import LOCK_NAME

pytestmark = pytest.mark.slow  # make test-fast leaves these out

# 64 training molecules in batches of 4: an epoch of 16 steps, long enough for epoch 2
# to be caught in the middle by a SIGKILL sent as soon as epoch 1's checkpoint appears.
ARGS = ["--target-columns", "expt", "--epochs", "2", "--batch-size", "4", "--patience", "10",
        "--checkpoint-seconds", "0",
        "--descriptors", "none", *TINY]


def _wait_for(path: Path, proc: subprocess.Popen, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.is_file():
        assert proc.poll() is None, f"training ended before {path} appeared"
        assert time.monotonic() < deadline, f"{path} did not appear in {timeout} s"
        time.sleep(0.01)


def test_sigkill_mid_epoch_resumes_losing_at_most_one_epoch(tmp_path, capsys):
    data = freesolv_slice(tmp_path / "fs.csv", 80)
    killed = tmp_path / "killed"
    env = subprocess_env()
    cmd = [sys.executable, "-u", "-m", "setattn.cli", "train", "--data", str(data),
           "--output-dir", str(killed), *ARGS]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True)
    _wait_for(killed / "model_0" / "last.pt", proc)
    proc.send_signal(signal.SIGKILL)
    printed, _ = proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    assert not (killed / "metrics.json").exists()  # it really died before the end

    # every epoch it reported finished is in the checkpoint: only the running one is lost
    last = checkpoint.load_checkpoint(killed / "model_0" / "last.pt", "training")
    saved = last["progress"]["epoch"]
    reported = printed.count("model 0 epoch ")
    assert reported <= saved == 1  # (the kill may come between checkpoint and line)

    # the killed run could not remove its lock: reported as stale, with how to clear it
    lock = killed / LOCK_NAME
    status, _, err = run(["train", "--output-dir", killed, "--resume"], capsys)
    assert status == 2 and "has a stale lock" in err and f"pid {proc.pid}" in err
    assert f"delete {lock}" in err
    lock.unlink()

    status, out, _ = run(["train", "--output-dir", killed, "--resume"], capsys)
    assert status == 0
    assert not lock.exists()
    assert f"model 0: resuming after epoch {saved} from" in out
    assert "model 0 epoch   2/2" in out  # the resumed run starts right after
    assert "model 0 epoch   1/2" not in out  # and repeats no finished epoch
    assert [r["epoch"] for r in read_csv(killed / "log.csv")] == ["1", "2"]
    assert (killed / "metrics.json").is_file()


def _interrupted_run(tmp_path: Path, capsys) -> Path:
    """A finished one-epoch run whose training checkpoint then gets replaced."""
    out = tmp_path / "run"
    status, _, _ = run(["train", "--data", freesolv_slice(tmp_path / "fs.csv", 30),
                        "--target-columns", "expt", "--epochs", "2", "--output-dir", out,
                        "--descriptors", "none", *TINY], capsys)
    assert status == 0
    (out / "metrics.json").unlink()
    return out


def test_resume_refuses_truncated_and_foreign_training_checkpoints(tmp_path, capsys):
    out = _interrupted_run(tmp_path, capsys)
    last = out / "model_0" / "last.pt"
    good = last.read_bytes()

    last.write_bytes(good[: len(good) // 2])  # cut in the middle
    status, _, err = run(["train", "--output-dir", out, "--resume"], capsys)
    assert status == 2
    assert f"{last}: not a setattn checkpoint (unreadable by torch.load" in err

    torch.save({"model": torch.nn.Linear(2, 1).state_dict()}, last)  # someone else's
    status, _, err = run(["train", "--output-dir", out, "--resume"], capsys)
    assert status == 2 and f"{last}: not a setattn checkpoint (no 'setattn_format'" in err

    checkpoint.save_checkpoint({"kind": "model", "config": {}, "state_dict": {}, "meta": {}}, last)
    status, _, err = run(["train", "--output-dir", out, "--resume"], capsys)
    assert status == 2 and f"{last}: not a setattn training checkpoint (kind 'model'" in err
    assert not (out / "metrics.json").exists()


class _CreateOnUnpickle:
    """Unpickling this calls ``open(marker, "w")``, creating the marker file."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


@pytest.mark.filterwarnings("ignore:Detected pickle protocol")
def test_resume_refuses_a_code_running_checkpoint_without_running_it(tmp_path, capsys):
    out = _interrupted_run(tmp_path, capsys)
    last = out / "model_0" / "last.pt"
    marker = tmp_path / "executed"
    evil = pickle.dumps({"setattn_format": config.FORMAT, "kind": "training",
                         "progress": _CreateOnUnpickle(marker)}, protocol=2)
    last.write_bytes(evil)
    status, _, err = run(["train", "--output-dir", out, "--resume"], capsys)
    assert status == 2
    assert f"{last}: not a setattn checkpoint: loading it would run code " in err
    assert "(io.open)" in err and "nothing was executed" in err
    assert not marker.exists()
    assert not (out / "metrics.json").exists()
    pickle.loads(evil)  # the payload is live: an unrestricted load runs it
    assert marker.exists()
