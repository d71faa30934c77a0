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

Each chemprop anchor (``chemprop_runs``) is an ensemble of ``RunSettings.anchor_ensemble``
models. With ``RunSettings.members_from`` set, a one-model anchor is not trained again: it
is member 0 of the finished ensemble run of the same split saved there.

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
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import torch
from chemprop_runs import ANCHORS, member_run, run_chemprop
from rdkit import Chem, rdBase
from record import timed

from setattn.molprop import splits
from setattn.molprop.checkpoint import load_run
from setattn.molprop.metrics import evaluate

ROOT = Path(__file__).resolve().parents[1]
SIZES = (0.8, 0.1, 0.1)
SPLIT_KINDS = ("random", "scaffold")

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


@dataclass(frozen=True)
class RunSettings:
    """What every run of one benchmark call shares."""

    out: Path
    report: str  # "test" or "val": which part the tools' "test" rows are
    threads: int
    setattn_flags: tuple[str, ...] = ()
    chemprop_flags: tuple[str, ...] = ()
    anchor_ensemble: int = 1  # models per chemprop anchor run
    members_from: Path | None = None  # one-model anchors: member 0 of the runs saved here


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
    ensemble, _ = load_run(run_dir)
    ridge = ensemble.kernel.descriptor if ensemble.kernel is not None else None
    kernel = ridge.centres.numel() + ridge.alpha.numel() if ridge is not None else 0
    return {
        "metric": float(metrics["test"][metric]),
        "network": _opt(parts.get("attention", {}).get(metric)),
        "kernel": _opt(parts.get("kernel_ridge", {}).get(metric)),
        "coverage": _opt(uncertainty.get("coverage")), "test_molecules": metrics["split"]["test"],
        "spearman": _opt(uncertainty.get("spearman")),
        "mean_width": _opt(uncertainty.get("mean_width")),
        "epochs": sum(m["epochs_run"] for m in metrics["models"]),
        "fit_seconds": float(metrics["train_seconds"]),
        "parameters": sum(p.numel() for p in ensemble.networks.parameters()
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


def _ensemble_run(job: Job, tool: str, settings: RunSettings) -> Path:
    """The folder of the finished ensemble run of ``tool`` on ``job`` saved in
    ``settings.members_from`` (FileNotFoundError if none is saved)."""
    source = settings.members_from
    wanted = (job.dataset, job.kind, job.seed, settings.report, tool)

    def is_ensemble(r: dict) -> bool:  # the same flags, at the record's own ensemble size
        members = r["result"].get("members", 1)
        return members > 1 and r["flags"] == tool_flags(
            tool, replace(settings, anchor_ensemble=members))

    if not any(record_key(r)[:5] == wanted and is_ensemble(r) for r in load_results(source)):
        raise FileNotFoundError(f"{source}: no finished {tool} ensemble of {job.dataset} "
                                f"{job.column} ({settings.report} part) to read member 0 of")
    return source / job.dataset / f"{job.column}_{settings.report}" / run_name(tool, settings)


def _run_anchor(job: Job, tool: str, run_dir: Path, settings: RunSettings) -> dict:
    spec = SETS[job.dataset]
    if settings.anchor_ensemble == 1 and settings.members_from is not None:
        result, smiles, preds = member_run(_ensemble_run(job, tool, settings), spec.targets)
    else:
        result, smiles, preds = run_chemprop(
            job.data, job.column, spec.targets, spec.task, run_dir, job.seed, settings.threads,
            [*ANCHORS[tool], *settings.chemprop_flags], settings.anchor_ensemble)
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
        seen / result["fit_seconds"], seen / result["seconds"] if result["seconds"] else None)
    record = {"dataset": job.dataset, "split": job.kind, "seed": job.seed,
              "report": settings.report, "tool": tool, "flags": flags, "metric_name":
              SETS[job.dataset].metric, "train": job.counts()["train"], "result": result}
    save_result(settings.out, record)
    done.add(key)
    return record
