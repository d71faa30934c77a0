"""chemprop 2.3.1 as the molecule benchmarks' anchor: installing it, running its command
line timed, reading its ensembles' test predictions.

chemprop 2.3.1 is installed on first use into ``benchmarks/.venv-chemprop`` (``pip install
torch==2.13.0 chemprop==2.3.1``) and run through its own command line, wrapped by
``CHEMPROP_TIMED``, which times Lightning's ``Trainer.fit`` and counts the epochs and the
trainable parameters. An anchor of ``members`` models runs chemprop's ``--ensemble-size``:
its test predictions are the mean of the members' (one ``model_i/test_predictions.csv``
each), its fit time the sum of theirs.

chemprop seeds member i of an ensemble with ``--pytorch-seed`` + i and trains member 0
first, from the loaders' first state, so member 0 is the one-model run of the same seeds
(on FreeSolv's random split of seed 20 their test predictions are identical).
``member_run`` reads it back as that run.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
from record import timed

CHEMPROP_VENV = Path(__file__).resolve().parent / ".venv-chemprop"

ANCHORS: dict[str, tuple[str, ...]] = {
    # chemprop's defaults
    "chemprop": (),
    # plus chemprop 1's normalised RDKit 2D descriptors (alias --features-generators)
    "chemprop_rdkit": ("--molecule-featurizers", "v1_rdkit_2d_normalized"),
    # chemprop at setattn's width, depth and batch: hidden 96, 1 message step, batches of 96
    "chemprop_w96": ("--message-hidden-dim", "96", "--ffn-hidden-dim", "96", "--depth", "1",
                     "--batch-size", "96"),
}
"""The chemprop variants: name -> the flags beyond chemprop's defaults."""

# Runs chemprop's command line, timing Trainer.fit (training epochs with their validation)
# and counting the epochs it ran and the trainable parameters of the model it fitted;
# appends {"fit_seconds", "epochs", "parameters"} to $CHEMPROP_FIT_JSON, a line per member.
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
    with open(os.environ["CHEMPROP_FIT_JSON"], "a") as f:
        f.write(json.dumps({"fit_seconds": seconds, "epochs": self.current_epoch,
                            "parameters": params}) + "\\n")
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


def chemprop_command(python: Path, data: Path, column: str, targets: tuple[str, ...],
                     task: str, run_dir: Path, seed: int, flags: list[str]) -> list[str]:
    """chemprop's ``train`` on the split ``column`` of ``data``, through the timing
    wrapper, with ``flags`` (the anchor's and the user's) beyond its defaults."""
    return [str(python), "-c", CHEMPROP_TIMED, "train", "--data-path", str(data),
            "--smiles-columns", "smiles", "--target-columns", *targets, "--task-type", task,
            "--splits-column", column, "--output-dir", str(run_dir),
            "--pytorch-seed", str(seed), "--data-seed", str(seed), *flags]


def read_predictions(run_dir: Path, targets: tuple[str, ...], members: int = 1
                     ) -> tuple[list[str], np.ndarray]:
    """The SMILES and (M, T) mean test predictions of a chemprop run of ``members``
    models (one ``test_predictions.csv`` each).

    Raises:
        FileNotFoundError: if the run holds another number of prediction files.
        ValueError: if the members predicted different molecules.
    """
    found = sorted(run_dir.glob("**/test_predictions.csv"))
    if len(found) != members:
        raise FileNotFoundError(f"{run_dir}: expected {members} test_predictions.csv, found "
                                f"{len(found)}")
    read = []
    for path in found:
        rows = list(csv.DictReader(path.read_text().splitlines()))
        read.append(([r["smiles"] for r in rows], np.array(
            [[float(r[t]) for t in targets] for r in rows]).reshape(len(rows), len(targets))))
    smiles = read[0][0]
    if any(other != smiles for other, _ in read[1:]):
        raise ValueError(f"{run_dir}: the ensemble's members predicted different molecules")
    return smiles, np.mean([preds for _, preds in read], axis=0)  # (M, T)


def run_chemprop(data: Path, column: str, targets: tuple[str, ...], task: str,
                 run_dir: Path, seed: int, threads: int, flags: list[str], members: int = 1
                 ) -> tuple[dict, list[str], np.ndarray]:
    """Train one chemprop variant (an ensemble of ``members``) on one split: its costs
    ``{"seconds", "fit_seconds", "epochs" (both summed), "parameters", "members"}``,
    the SMILES and the (M, T) mean predictions of the rows labelled ``test``."""
    python = ensure_chemprop()
    timing = run_dir.parent / f"{run_dir.name}_fit.json"
    timing.unlink(missing_ok=True)  # the wrapper adds each member's fit to it
    flags = [*flags, "--ensemble-size", str(members)] if members > 1 else flags
    cmd = chemprop_command(python, data, column, targets, task, run_dir, seed, flags)
    seconds = timed(cmd, run_dir.parent / f"{run_dir.name}.log", threads,
                    CHEMPROP_FIT_JSON=str(timing))
    fits = [json.loads(line) for line in timing.read_text().splitlines()]
    fit = {"fit_seconds": sum(f["fit_seconds"] for f in fits), "members": len(fits),
           "epochs": sum(f["epochs"] for f in fits),
           "parameters": fits[0]["parameters"]}
    smiles, preds = read_predictions(run_dir, targets, members)
    return {"seconds": seconds, **fit}, smiles, preds



def member_run(run_dir: Path, targets: tuple[str, ...]) -> tuple[dict, list[str], np.ndarray]:
    """Member 0 of a finished chemprop ensemble run in ``run_dir``, as a one-model run: its
    costs (its own fit line; ``seconds`` None, as the whole command was shared), the SMILES
    and the (M, T) predictions of ``model_0/test_predictions.csv``.

    Raises:
        FileNotFoundError: if the run has no timing lines or no member 0.
    """
    timing = run_dir.parent / f"{run_dir.name}_fit.json"
    if not timing.is_file():
        raise FileNotFoundError(f"{timing}: no timing lines of a finished chemprop run")
    fit = json.loads(timing.read_text().splitlines()[0])  # member 0 fits first
    smiles, preds = read_predictions(run_dir / "model_0", targets)
    return {"seconds": None, **fit, "members": 1, "member_of": str(run_dir)}, smiles, preds
