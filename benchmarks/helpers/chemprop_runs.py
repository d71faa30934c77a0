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
``member_predictions`` reads it back as that run.

A finished anchor run is kept as data (``record.store_run``): :func:`anchor_material` is its
key's material, :func:`anchor_content` what its file holds (the test SMILES, the mean and
member 0's predictions, the costs), and :func:`stored_result` reads either the ensemble
or member 0 back from it, so that neither is trained again.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from helpers.record import install_venv, timed

CHEMPROP_VENV = Path(__file__).resolve().parents[1] / ".venv-chemprop"
CHEMPROP_VERSION, TORCH_VERSION = "2.3.1", "2.13.0"
VERSION = f"chemprop {CHEMPROP_VERSION}, torch {TORCH_VERSION}"
"""What ``ensure_chemprop`` installs: part of every anchor run's key."""

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


def anchor_flags(tool: str, data: Path | None = None, once: bool = False) -> list[str]:
    """An anchor's flags beyond chemprop's defaults; with ``once``, chemprop + RDKit 2D
    reads the same features computed once per data file (:func:`rdkit_2d_file` of
    ``data``; without ``data``, the flags as its key and record name them)."""
    if not (once and tool == "chemprop_rdkit"):
        return list(ANCHORS[tool])
    return ["--descriptors-path", str(rdkit_2d_file(data)) if data else "v1_rdkit_2d_normalized"]

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


# Writes chemprop's own v1_rdkit_2d_normalized features of every row of a CSV (argv[1],
# column "smiles"), made from the molecule chemprop makes of it, to the .npz argv[2]
# that --descriptors-path reads (one row per CSV row, float64 as the featuriser gives).
RDKIT_2D = """
import csv, sys
import numpy as np
from chemprop.featurizers import MoleculeFeaturizerRegistry
from chemprop.utils import make_mol

featurize = MoleculeFeaturizerRegistry["v1_rdkit_2d_normalized"]()
with open(sys.argv[1], newline="") as f:
    rows = [featurize(make_mol(r["smiles"])) for r in csv.DictReader(f)]
np.savez(sys.argv[2], np.vstack(rows))
"""


def rdkit_2d_file(data: Path) -> Path:
    """chemprop's RDKit 2D features of every row of ``data``, computed once into
    ``<data>.rdkit2d.npz`` (reused while newer than ``data``) for ``--descriptors-path``."""
    out = data.with_suffix(".rdkit2d.npz")
    if not out.is_file() or out.stat().st_mtime < data.stat().st_mtime:
        tmp = out.with_suffix(".tmp.npz")
        subprocess.run([str(ensure_chemprop()), "-c", RDKIT_2D, str(data), str(tmp)],
                       check=True)
        tmp.replace(out)
    return out


def ensure_chemprop(venv: Path = CHEMPROP_VENV) -> Path:
    """The Python of chemprop's virtual environment, installing chemprop there if needed."""
    python = venv / "bin" / "python"
    if not (venv / "bin" / "chemprop").exists():
        install_venv(venv, [f"torch=={TORCH_VERSION}", f"chemprop=={CHEMPROP_VERSION}"],
                     f"chemprop {CHEMPROP_VERSION}")
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
    return {"seconds": seconds, **fit, "fits": fits}, smiles, preds


def member_predictions(run_dir: Path, targets: tuple[str, ...], index: int = 0
                       ) -> tuple[list[str], np.ndarray]:
    """The SMILES and (M, T) test predictions of member ``index`` of an ensemble run."""
    return read_predictions(run_dir / f"model_{index}", targets)


def anchor_material(data: str, rows: str, targets: tuple[str, ...], task: str, tool: str,
                    flags: list[str], members: int, seed: int, threads: int) -> dict:
    """The key material of an anchor run: the digests of the data file and of the split's
    rows (``record.store_run``), the targets and task, the tool's name, its flags beyond
    chemprop's defaults (without the ensemble size), chemprop's and torch's versions, the
    ensemble size, the seed (``--pytorch-seed`` and ``--data-seed``) and the threads."""
    return {"kind": "anchor", "data": data, "rows": rows, "targets": list(targets),
            "task": task, "tool": tool, "flags": list(flags), "version": VERSION,
            "members": members, "seed": seed, "threads": threads}


def _listed(preds: np.ndarray) -> list[list[float]]:
    return [[float(v) for v in row] for row in preds]  # JSON writes each float's repr


def anchor_content(result: dict, smiles: list[str], preds: np.ndarray,
                   member0: np.ndarray | None, describes: dict) -> dict:
    """What an anchor run's file holds beside its key: ``describes`` (set, split, seed,
    for people), the costs of ``run_chemprop``, the test SMILES, the (M, T) mean
    predictions and member 0's (None for a one-model run, whose mean is member 0)."""
    fits = result.get("fits") or []
    return {"describes": describes, "seconds": result["seconds"],
            "fit_seconds": result["fit_seconds"], "epochs": result["epochs"],
            "parameters": result["parameters"], "members": result["members"],
            "fits": fits, "smiles": list(smiles), "predictions": _listed(preds),
            "member0": None if member0 is None else {
                **(fits[0] if fits else {}), "predictions": _listed(member0)}}


def stored_result(run: dict, member0: bool = False) -> tuple[dict, list[str], np.ndarray]:
    """A stored anchor run read back as ``run_chemprop`` returns it: its costs, the test
    SMILES and (M, T) predictions; with ``member0``, member 0 of the ensemble as a
    one-model run (its own fit line; ``seconds`` None, as the command was shared).

    Raises:
        KeyError: if ``member0`` is asked of a run that did not keep member 0.
    """
    smiles = run["smiles"]
    if not member0:
        costs = {k: run[k] for k in ("seconds", "fit_seconds", "epochs", "parameters",
                                     "members")}
        return {**costs, "stored": run["key"]}, smiles, np.array(run["predictions"])
    if not run.get("member0"):
        raise KeyError(f"stored anchor run {run['key']} kept no member 0")
    first = run["member0"]
    costs = {"seconds": None, "fit_seconds": first["fit_seconds"], "epochs": first["epochs"],
             "parameters": first["parameters"], "members": 1, "member_of": run["key"]}
    return costs, smiles, np.array(first["predictions"])


def same_descriptors(data: Path, column: str, targets: tuple[str, ...], task: str,
                     seed: int, threads: int, out: Path) -> bool:
    """One model of ``chemprop_rdkit`` on split ``column`` of ``data``, featurising in the
    run (``--molecule-featurizers``) and reading the features computed once
    (``--descriptors-path``, :func:`rdkit_2d_file`): whether the test predictions are
    identical, printed with the largest difference (predictions only, no metric)."""
    preds = []
    for name, flags in (("featurizers", list(ANCHORS["chemprop_rdkit"])),
                        ("descriptors", ["--descriptors-path", str(rdkit_2d_file(data))])):
        run_dir = out / "check_descriptors" / f"{data.stem}_{column}" / name
        preds.append(run_chemprop(data, column, targets, task, run_dir, seed, threads,
                                  flags)[1:])
    (smiles_a, a), (smiles_b, b) = preds
    same = smiles_a == smiles_b and bool((a == b).all())
    gap = float(abs(a - b).max()) if smiles_a == smiles_b else None
    verdict = "gives identical" if same else "does NOT give the same"
    print(f"{data} {column}: --descriptors-path {verdict} test predictions as "
          f"--molecule-featurizers (largest difference {gap})", file=sys.stderr)
    return same
