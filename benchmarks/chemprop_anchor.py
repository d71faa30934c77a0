"""The chemprop 2.3.1 anchors of the molecule benchmark: install, run, read back.

chemprop is installed on first use into ``benchmarks/.venv-chemprop`` with
``pip install torch==2.13.0 chemprop==2.3.1`` and run through its own command line,
wrapped by ``CHEMPROP_TIMED``: the wrapper times Lightning's ``Trainer.fit`` (the
training epochs with their validation passes), counts the epochs it ran and the
model's trainable parameters, and otherwise leaves chemprop's ``main`` unchanged.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

__all__ = ["ANCHORS", "CHEMPROP_TIMED", "CHEMPROP_VENV", "chemprop_command", "ensure_chemprop",
           "read_predictions", "run_chemprop", "timed"]

CHEMPROP_VENV = Path(__file__).resolve().parent / ".venv-chemprop"

ANCHORS: dict[str, tuple[str, ...]] = {
    # chemprop's defaults
    "chemprop": (),
    # chemprop with the normalised RDKit 2D descriptors of chemprop 1 (alias
    # --features-generators), concatenated to the learned representation
    "chemprop_rdkit": ("--molecule-featurizers", "v1_rdkit_2d_normalized"),
    # chemprop at setattn's width: message passing and feed-forward hidden sizes 96
    "chemprop_w96": ("--message-hidden-dim", "96", "--ffn-hidden-dim", "96"),
}
"""The chemprop variants: name -> the flags beyond chemprop's defaults."""

# Runs chemprop's command line, timing Trainer.fit (training epochs with their validation)
# and counting the epochs it ran and the trainable parameters of the model it fitted;
# writes {"fit_seconds", "epochs", "parameters"} to $CHEMPROP_FIT_JSON.
CHEMPROP_TIMED = """
import json, os, sys, time
import lightning.pytorch as pl
from chemprop.cli.main import main

_fit = pl.Trainer.fit

def timed_fit(self, model, *args, **kwargs):
    start = time.perf_counter()
    out = _fit(self, model, *args, **kwargs)
    seconds = time.perf_counter() - start
    params = sum(p.numel() for p in model.parameters() if p.requires_grad)
    with open(os.environ["CHEMPROP_FIT_JSON"], "w") as f:
        json.dump({"fit_seconds": seconds, "epochs": self.current_epoch,
                   "parameters": params}, f)
    return out

pl.Trainer.fit = timed_fit
sys.argv[0] = "chemprop"
sys.exit(main())
"""


def ensure_chemprop(venv: Path = CHEMPROP_VENV) -> Path:
    """The Python of chemprop's virtual environment, installing chemprop there if needed."""
    python = venv / "bin" / "python"
    if not (venv / "bin" / "chemprop").exists():
        print(f"installing chemprop 2.3.1 into {venv} ...", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        pip = [str(python), "-m", "pip", "install", "--quiet"]
        subprocess.run([*pip, "torch==2.13.0", "chemprop==2.3.1"], check=True)
    return python


def timed(cmd: list[str], log: Path, threads: int, **env_extra: str) -> float:
    """Wall seconds of ``cmd`` run with ``threads`` CPU threads, its output in ``log``.

    Raises:
        RuntimeError: naming the log if the command fails.
    """
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads),
               **env_extra)
    log.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with open(log, "w") as handle:
        res = subprocess.run(cmd, stdout=handle, stderr=subprocess.STDOUT, env=env)
    seconds = time.perf_counter() - start
    if res.returncode != 0:
        raise RuntimeError(f"{Path(cmd[0]).name} failed (exit {res.returncode}); see {log}")
    return seconds


def chemprop_command(python: Path, data: Path, column: str, targets: tuple[str, ...],
                     task: str, run_dir: Path, seed: int, flags: list[str]) -> list[str]:
    """chemprop's ``train`` on the split ``column`` of ``data``, through the timing
    wrapper, with ``flags`` (the anchor's and the user's) beyond its defaults."""
    return [str(python), "-c", CHEMPROP_TIMED, "train", "--data-path", str(data),
            "--smiles-columns", "smiles", "--target-columns", *targets, "--task-type", task,
            "--splits-column", column, "--output-dir", str(run_dir),
            "--pytorch-seed", str(seed), "--data-seed", str(seed), *flags]


def read_predictions(run_dir: Path, targets: tuple[str, ...]) -> tuple[list[str], np.ndarray]:
    """The SMILES and (M, T) predictions of chemprop's ``test_predictions.csv``.

    Raises:
        FileNotFoundError: naming the run directory if chemprop wrote no predictions.
    """
    found = sorted(run_dir.glob("**/test_predictions.csv"))
    if len(found) != 1:
        raise FileNotFoundError(f"{run_dir}: expected one test_predictions.csv, found "
                                f"{len(found)}")
    with open(found[0], newline="") as handle:
        rows = list(csv.DictReader(handle))
    preds = np.array([[float(r[t]) for t in targets] for r in rows], dtype=np.float64)
    return [r["smiles"] for r in rows], preds.reshape(len(rows), len(targets))


def run_chemprop(data: Path, column: str, targets: tuple[str, ...], task: str,
                 run_dir: Path, seed: int, threads: int, flags: list[str]
                 ) -> tuple[dict, list[str], np.ndarray]:
    """Train one chemprop variant on one split; the run's costs and its test predictions.

    Returns:
        ``{"seconds", "fit_seconds", "epochs", "parameters"}``, then the SMILES and the
        (M, T) predictions of the rows labelled ``test`` (in file order).
    """
    python = ensure_chemprop()
    timing = run_dir.parent / f"{run_dir.name}_fit.json"
    cmd = chemprop_command(python, data, column, targets, task, run_dir, seed, flags)
    seconds = timed(cmd, run_dir.parent / f"{run_dir.name}.log", threads,
                    CHEMPROP_FIT_JSON=str(timing))
    fit = json.loads(timing.read_text())
    smiles, preds = read_predictions(run_dir, targets)
    return {"seconds": seconds, **fit}, smiles, preds
