"""The molecule benchmark's runs: data sets, split files, the chemprop anchors, resumable runs.

Sets are read from ``datasets/`` (provenance in ``datasets/README.md``); rows whose SMILES
RDKit cannot parse are dropped (chemprop stops at the first such row; Tox21 has 8).
Huuskonen's two SD files (train + test) are merged into one set: the canonical SMILES of
each record and its ``SOL`` property.

A split is a column of ``train`` / ``val`` / ``test`` labels made by
``setattn.molprop.splits.random`` or ``.scaffold`` (80/10/10), and every tool reads the
same CSV with that column (setattn ``--split column``, chemprop ``--splits-column``).
With ``report="test"`` one CSV per set holds all rows and one column per (split kind,
seed). With ``report="val"`` each (split kind, seed) has its own CSV that leaves the test
part out and holds the validation rows twice, once labelled ``val`` and once ``test``:
each tool's "test" predictions are then its predictions on the validation molecules.

chemprop 2.3.1 is installed on first use into ``benchmarks/.venv-chemprop`` (``pip install
torch==2.13.0 chemprop==2.3.1``) and run through its own command line, wrapped by
``CHEMPROP_TIMED``, which times Lightning's ``Trainer.fit`` and counts the epochs and the
trainable parameters. An anchor trains ``RunSettings.anchor_ensemble`` models
(``--ensemble-size``): its test predictions are the mean of the members' (chemprop writes
one ``model_i/test_predictions.csv`` per member), its fit time the sum of theirs.

Every finished run is a record in ``<out>/results.json``, keyed by (set, split kind, seed,
reported part, tool, extra flags); a later call with the same settings skips it, so an
interrupted benchmark resumes (its half-written run directory is removed and redone).
"""

from __future__ import annotations

import csv
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from rdkit import Chem, rdBase

from setattn.molprop import splits
from setattn.molprop.checkpoint import load_run
from setattn.molprop.metrics import evaluate

ROOT = Path(__file__).resolve().parents[1]
SIZES = (0.8, 0.1, 0.1)
SPLIT_KINDS = ("random", "scaffold")
CHEMPROP_VENV = Path(__file__).resolve().parent / ".venv-chemprop"

TOX21_TASKS = ("NR-AR", "NR-AR-LBD", "NR-AhR", "NR-Aromatase", "NR-ER", "NR-ER-LBD",
               "NR-PPAR-gamma", "SR-ARE", "SR-ATAD5", "SR-HSE", "SR-MMP", "SR-p53")


@dataclass(frozen=True)
class DataSet:
    """One benchmark set: where it is, its targets, task and reported metric."""

    file: str  # under datasets/ ("" for huuskonen, read from its two SD files)
    targets: tuple[str, ...]
    task: str  # "regression" or "classification"
    metric: str  # "rmse" (lower is better) or "roc_auc" (higher is better)
    label: str  # the metric as the table names it


SETS: dict[str, DataSet] = {
    "freesolv": DataSet("molecules/freesolv.csv", ("expt",), "regression", "rmse",
                        "RMSE (kcal/mol)"),
    "esol": DataSet("molecules/delaney-processed.csv",
                    ("measured log solubility in mols per litre",), "regression", "rmse",
                    "RMSE (log mol/L)"),
    "tox21": DataSet("molecules/tox21.csv", TOX21_TASKS, "classification", "roc_auc",
                     "mean ROC-AUC"),
    "huuskonen": DataSet("", ("SOL",), "regression", "rmse", "RMSE (log mol/L)"),
    "bace1": DataSet("molecules/bace1_chembl.csv", ("pIC50",), "regression", "rmse",
                     "RMSE (pIC50)"),
    "bace1_active": DataSet("molecules/bace1_chembl.csv", ("active",), "classification",
                            "roc_auc", "ROC-AUC"),
}


@dataclass
class MoleculeTable:
    """Parsable rows of a set: SMILES and target cells (text, "" if missing)."""

    smiles: list[str]
    cells: list[list[str]]  # (M, T) as written in the source

    def targets(self) -> np.ndarray:
        """The (M, T) targets as floats, NaN where missing."""
        return np.array([[float(c) if c != "" else np.nan for c in row] for row in self.cells],
                        dtype=np.float64).reshape(len(self.cells), -1)


def huuskonen(root: Path = ROOT / "datasets") -> MoleculeTable:
    """Huuskonen's train and test SD files merged (train first): SMILES and ``SOL``."""
    smiles, cells = [], []
    for part in ("train", "test"):
        path = root / "molecules" / f"solubility.{part}.sdf"
        with rdBase.BlockLogs():
            for mol in Chem.SDMolSupplier(str(path)):
                if mol is None or not mol.HasProp("SOL"):
                    continue
                smiles.append(Chem.MolToSmiles(mol))
                cells.append([mol.GetProp("SOL").strip()])
    return MoleculeTable(smiles, cells)


def load_set(name: str, root: Path = ROOT / "datasets") -> MoleculeTable:
    """The rows of set ``name`` whose SMILES RDKit parses.

    Raises:
        KeyError: naming a set that is not in ``SETS``.
        ValueError: naming the file if a target column is missing.
    """
    spec = SETS[name]
    if not spec.file:
        return huuskonen(root)
    path = root / spec.file
    with open(path, newline="") as handle:
        reader = csv.DictReader(handle)
        missing = [c for c in ("smiles", *spec.targets) if c not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(f"{path}: no column {missing[0]!r}")
        rows = list(reader)
    with rdBase.BlockLogs():
        kept = [r for r in rows if r["smiles"] and Chem.MolFromSmiles(r["smiles"]) is not None]
    return MoleculeTable([r["smiles"] for r in kept],
                         [[r[t].strip() for t in spec.targets] for r in kept])


def split_labels(kind: str, smiles: list[str], seed: int) -> list[str]:
    """One of ``train`` / ``val`` / ``test`` per molecule, for split ``kind`` and ``seed``.

    Raises:
        ValueError: naming ``--splits`` for a kind other than random or scaffold.
    """
    if kind == "random":
        parts = splits.random(len(smiles), SIZES, seed)
    elif kind == "scaffold":
        parts = splits.scaffold(smiles, SIZES, seed)
    else:
        raise ValueError(f"argument --splits: {kind!r} is not one of {list(SPLIT_KINDS)}")
    labels = [""] * len(smiles)
    for name, part in zip(splits.PARTS, parts):
        for i in part:
            labels[i] = name
    return labels


def column_name(kind: str, seed: int) -> str:
    """The split column of (kind, seed), e.g. ``random10``."""
    return f"{kind}{seed}"


def val_table(table: MoleculeTable, labels: list[str]) -> tuple[MoleculeTable, list[str]]:
    """The validation-report table of one split: its training and validation rows in
    file order, then the validation rows again; and their labels (the copies ``test``).
    The test rows are left out."""
    keep = [i for i, label in enumerate(labels) if label in ("train", "val")]
    again = [i for i, label in enumerate(labels) if label == "val"]
    order = keep + again
    new = MoleculeTable([table.smiles[i] for i in order], [table.cells[i] for i in order])
    return new, [labels[i] for i in keep] + ["test"] * len(again)


def write_csv(path: Path, table: MoleculeTable, targets: tuple[str, ...],
              columns: dict[str, list[str]]) -> Path:
    """Write ``smiles``, the target columns and the split ``columns`` (name -> labels)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["smiles", *targets, *columns])
        for i, (smi, cells) in enumerate(zip(table.smiles, table.cells)):
            writer.writerow([smi, *cells, *[labels[i] for labels in columns.values()]])
    return path


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


@dataclass(frozen=True)
class RunSettings:
    """What every run of one benchmark call shares."""

    out: Path
    report: str  # "test" or "val": which part the tools' "test" rows are
    threads: int
    setattn_flags: tuple[str, ...] = ()
    chemprop_flags: tuple[str, ...] = ()
    anchor_ensemble: int = 1  # models per chemprop anchor run


@dataclass
class Job:
    """One tool on one split: the CSV, its split column and the rows scored."""

    dataset: str
    kind: str
    seed: int
    data: Path
    column: str
    labels: list[str]  # the column, one label per CSV row
    table: MoleculeTable = field(repr=False)

    def counts(self) -> dict[str, int]:
        """Rows per part, as the tools must see them."""
        return {part: self.labels.count(part) for part in ("train", "val", "test")}

    def scored(self) -> tuple[list[str], np.ndarray]:
        """SMILES and (M, T) targets (NaN if missing) of the rows labelled test."""
        rows = [i for i, label in enumerate(self.labels) if label == "test"]
        return [self.table.smiles[i] for i in rows], self.table.targets()[rows]


def split_data(dataset: str, table: MoleculeTable, kind: str, seed: int, settings: RunSettings,
               columns: dict[str, list[str]]) -> Job:
    """The CSV both tools read for one split (see the module docstring).

    ``columns`` holds every split column of the call's test-report CSV; with
    ``report="test"`` that one CSV (written by the caller) serves all splits, with
    ``report="val"`` a CSV of the split's training and validation rows is written here.
    """
    column = column_name(kind, seed)
    targets = SETS[dataset].targets
    if settings.report == "test":
        return Job(dataset, kind, seed, settings.out / dataset / "data.csv", column,
                   columns[column], table)
    sub, labels = val_table(table, columns[column])
    path = settings.out / dataset / f"val_{column}.csv"
    write_csv(path, sub, targets, {column: labels})
    return Job(dataset, kind, seed, path, column, labels, sub)


def _key(dataset: str, kind: str, seed: int, report: str, tool: str, flags: str) -> tuple:
    return (dataset, kind, seed, report, tool, flags)


def record_key(record: dict) -> tuple:
    """The identity of a saved run."""
    return _key(record["dataset"], record["split"], record["seed"], record["report"],
                record["tool"], record["flags"])


def load_results(out: Path) -> list[dict]:
    """The saved runs of ``out`` (none if it holds no ``results.json``)."""
    path = out / "results.json"
    return json.loads(path.read_text()) if path.is_file() else []


def _write_results(out: Path, records: list[dict]) -> None:
    tmp = out / f"results.json.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(records, indent=1))
    os.replace(tmp, out / "results.json")


def save_result(out: Path, record: dict) -> None:
    """Add or replace a run's record in ``out/results.json``, atomically and locked."""
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "results.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        records = [r for r in load_results(out) if record_key(r) != record_key(record)]
        _write_results(out, [*records, record])


def _metric(job: Job, smiles: list[str], preds: np.ndarray, tool: str) -> float:
    """The set's metric of ``preds`` on the job's test rows, by setattn's ``evaluate``
    (RuntimeError if the tool's test rows are not the job's)."""
    want, y = job.scored()
    if smiles != want:
        raise RuntimeError(f"{tool}'s test rows differ from column {job.column!r} of "
                           f"{job.data}")
    spec = SETS[job.dataset]
    result = evaluate(torch.tensor(y, dtype=torch.float32),
                      torch.tensor(preds, dtype=torch.float32), spec.task, spec.targets)
    return float(result[spec.metric])


def _opt(value: object) -> float | None:
    return None if value is None else float(value)


def setattn_result(metrics: dict, run_dir: Path, metric: str) -> dict:
    """The record of a finished ``setattn train`` run from its ``metrics.json`` and models:
    the "test" part's metric, its network / kernel ridge parts and uncertainty (None when
    the run has none), epochs, training seconds and trainable parameters."""
    parts = metrics.get("components", {}).get("test", {})
    uncertainty = metrics.get("uncertainty", {}).get("test") or {}
    models, _ = load_run(run_dir)
    # the members of an ensemble hold copies of one shared kernel ridge: count it once
    kernel = next((m.kernel.centres.numel() + m.kernel.alpha.numel()
                   for m in models if m.kernel is not None), 0)
    return {
        "metric": float(metrics["test"][metric]),
        "network": _opt(parts.get("attention", {}).get(metric)),
        "kernel": _opt(parts.get("kernel_ridge", {}).get(metric)),
        "coverage": _opt(uncertainty.get("coverage")), "test_molecules": metrics["split"]["test"],
        "spearman": _opt(uncertainty.get("spearman")),
        "mean_width": _opt(uncertainty.get("mean_width")),
        "epochs": sum(m["epochs_run"] for m in metrics["models"]),
        "fit_seconds": float(metrics["train_seconds"]),
        "parameters": sum(p.numel() for m in models for p in m.parameters()
                          if p.requires_grad),
        "kernel_numbers": kernel,
    }


def _run_setattn(job: Job, run_dir: Path, settings: RunSettings) -> dict:
    spec = SETS[job.dataset]
    exe = Path(sys.executable).parent / "setattn"
    cmd = [str(exe), "train", "--data", str(job.data), "--smiles-column", "smiles",
           "--target-columns", *spec.targets, "--task", spec.task, "--split", "column",
           "--split-column", job.column, "--seed", str(job.seed), "--output-dir", str(run_dir),
           "--num-threads", str(settings.threads), *settings.setattn_flags]
    # featurisation from scratch in every run, as chemprop does (no feature cache hit),
    # in as many processes as the tools' threads (setattn's default uses every core on
    # sets of 2,000 rows or more; one process when threads is 1)
    seconds = timed(cmd, run_dir.parent / f"{run_dir.name}.log",
                                    settings.threads, SETATTN_CACHE_DIR="off",
                                    SETATTN_FEATURIZE_WORKERS=str(settings.threads))
    metrics = json.loads((run_dir / "metrics.json").read_text())
    seen = {part: metrics["split"][part] for part in ("train", "val", "test")}
    if seen != job.counts():
        raise RuntimeError(f"setattn split {job.data} column {job.column!r} into {seen}, "
                           f"not {job.counts()}")
    return {"seconds": seconds, **setattn_result(metrics, run_dir, spec.metric)}


def _run_anchor(job: Job, tool: str, run_dir: Path, settings: RunSettings) -> dict:
    spec = SETS[job.dataset]
    flags = [*ANCHORS[tool], *settings.chemprop_flags]
    result, smiles, preds = run_chemprop(
        job.data, job.column, spec.targets, spec.task, run_dir, job.seed, settings.threads,
        flags, settings.anchor_ensemble)
    return {**result, "metric": _metric(job, smiles, preds, tool)}


def tool_flags(tool: str, settings: RunSettings) -> str:
    """The flags a tool runs with beyond its defaults, as saved with its record."""
    if tool == "setattn":
        return " ".join(settings.setattn_flags)
    ensemble = ["--ensemble-size", str(settings.anchor_ensemble)] \
        if settings.anchor_ensemble > 1 else []
    return " ".join([*ANCHORS[tool], *settings.chemprop_flags, *ensemble])


def run_name(tool: str, settings: RunSettings) -> str:
    """The folder of a tool's run: the tool's name, plus a digest of the extra flags it got
    (``--setattn-flags`` / ``--chemprop-flags``), so that runs of other flags in the same
    ``--out`` keep their files."""
    extra = settings.setattn_flags if tool == "setattn" else settings.chemprop_flags
    if not extra:
        return tool
    return f"{tool}-{hashlib.sha1(' '.join(extra).encode()).hexdigest()[:8]}"


def run_job(job: Job, tool: str, settings: RunSettings, done: set[tuple]) -> dict | None:
    """Run ``tool`` ("setattn" or a chemprop anchor) on ``job`` unless ``done`` holds it;
    save and return its record (None when skipped)."""
    flags = tool_flags(tool, settings)
    key = _key(job.dataset, job.kind, job.seed, settings.report, tool, flags)
    if key in done:
        return None
    run_dir = settings.out / job.dataset / f"{job.column}_{settings.report}" / run_name(tool,
                                                                                    settings)
    shutil.rmtree(run_dir, ignore_errors=True)  # an interrupted run starts again
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    result = (_run_setattn(job, run_dir, settings) if tool == "setattn"
              else _run_anchor(job, tool, run_dir, settings))
    seen = job.counts()["train"] * result["epochs"]  # molecules x epochs, all members
    result["mol_per_s"], result["mol_per_s_all"] = (  # training; the whole run (featurising)
        seen / result["fit_seconds"], seen / result["seconds"])
    record = {"dataset": job.dataset, "split": job.kind, "seed": job.seed,
              "report": settings.report, "tool": tool, "flags": flags, "metric_name":
              SETS[job.dataset].metric, "train": job.counts()["train"], "result": result}
    save_result(settings.out, record)
    done.add(key)
    return record
