"""The molecule benchmark's runs: data sets, split files, the chemprop anchors, stored runs.

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
models; a one-model anchor is member 0 of a stored ensemble of ``members_of`` models. The
MiniMol anchors (``minimol_runs``: ``minimol_krr``, one kernel ridge, and ``minimol_mlp``,
an ensemble as chemprop's) fit heads on MiniMol's fingerprints of the same CSV, kept in
``<out>/minimol/``; they are stored and read back as chemprop's are.

Every run is kept as data when it finishes (``record.store_run``): an anchor in
``benchmarks/runs/anchors/<key>.json`` (its test predictions), setattn's in
``runs/molecules/`` (its record), a cost round's in ``runs/molecules_rounds/``, keyed by
the data file, the split's rows, the tool, its flags and version, the ensemble size, the
seed and the threads (:func:`run_material`). A later call skips stored runs (an
interrupted one is redone) and the tables come from them alone (:func:`stored_record`).
"""

from __future__ import annotations

import csv
import functools
import hashlib
import json
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from rdkit import Chem, rdBase

from setattn.molprop import splits
from setattn.molprop.checkpoint import load_run
from setattn.molprop.config import RunConfig
from setattn.molprop.metrics import evaluate

from helpers.chemprop_runs import (
    ANCHORS,
    anchor_content,
    anchor_flags,
    anchor_material,
    member_predictions,
    run_chemprop,
    stored_result,
)
from helpers.minimol_runs import HEADS as MINIMOL
from helpers.minimol_runs import anchor_material as minimol_material
from helpers.minimol_runs import head_flags, run_minimol
from helpers.minimol_runs import members_of as minimol_members
from helpers.record import (
    STORE,
    file_digest,
    load_stored,
    rows_digest,
    run_key,
    store_run,
    timed,
    tree_digest,
)

ROOT = Path(__file__).resolve().parents[2]
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
    members_of: int = 1  # a one-model anchor may be member 0 of a stored ensemble this big
    store: Path = STORE  # where finished runs are kept (record.store_run)
    benchmark: str = "molecules"  # the store's folder of the benchmark's own runs
    library: str | None = None  # setattn's version in its runs' keys (default: setattn/ now)
    round: int | None = None  # a cost round's index: runs timed anew, stored apart
    rdkit_once: tuple[str, ...] = ()  # sets whose chemprop_rdkit reads features made once


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


def _setattn_command(job: Job, run_dir: Path, settings: RunSettings,
                     extra: tuple[str, ...] = ()) -> list[str]:
    spec = SETS[job.dataset]
    exe = Path(sys.executable).parent / "setattn"
    return [str(exe), "train", "--data", str(job.data), "--smiles-column", "smiles",
            "--target-columns", *spec.targets, "--task", spec.task, "--split", "column",
            "--split-column", job.column, "--seed", str(job.seed), "--output-dir",
            str(run_dir), "--num-threads", str(settings.threads), *settings.setattn_flags,
            *extra]


def _timed_setattn(cmd: list[str], log: Path, settings: RunSettings) -> float:
    # featurisation from scratch in every run, as chemprop does (no feature cache hit),
    # in as many processes as the tools' threads (setattn's default uses every core on
    # sets of 2,000 rows or more; one process when threads is 1)
    return timed(cmd, log, settings.threads, SETATTN_CACHE_DIR="off",
                 SETATTN_FEATURIZE_WORKERS=str(settings.threads))


def warm_up(job: Job, settings: RunSettings) -> float:
    """One untimed setattn model of one epoch on ``job``, before a cost round times
    anything: a checkout's first run compiles the CPU kernels into Numba's cache (once
    per machine, tens of seconds), which the rounds should not time. Returns its
    seconds; its run folder is ``settings.out / "warm-up"``."""
    run_dir = settings.out / "warm-up" / job.dataset
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    cmd = _setattn_command(job, run_dir, settings, ("--epochs", "1", "--ensemble-size", "1"))
    return _timed_setattn(cmd, run_dir.parent / f"{job.dataset}.log", settings)


def _run_setattn(job: Job, run_dir: Path, settings: RunSettings) -> dict:
    spec = SETS[job.dataset]
    seconds = _timed_setattn(_setattn_command(job, run_dir, settings),
                             run_dir.parent / f"{run_dir.name}.log", settings)
    metrics = json.loads((run_dir / "metrics.json").read_text())
    seen = {part: metrics["split"][part] for part in ("train", "val", "test")}
    if seen != job.counts():
        raise RuntimeError(f"setattn split {job.data} column {job.column!r} into {seen}, "
                           f"not {job.counts()}")
    return {"seconds": seconds, **setattn_result(metrics, run_dir, spec.metric)}


def _run_anchor(job: Job, tool: str, run_dir: Path, settings: RunSettings) -> dict:
    """A cost round's anchor run: trained, its record's result (metric included)."""
    spec = SETS[job.dataset]
    result, smiles, preds = run_chemprop(
        job.data, job.column, spec.targets, spec.task, run_dir, job.seed, settings.threads,
        [*ANCHORS[tool], *settings.chemprop_flags], settings.anchor_ensemble)
    result.pop("fits", None)
    return {**result, "metric": _metric(job, smiles, preds, tool)}


def tool_flags(tool: str, settings: RunSettings, dataset: str = "") -> str:
    """The flags a tool runs with beyond its defaults (on ``dataset``), as its record says."""
    if tool == "setattn":
        return " ".join(settings.setattn_flags)
    if tool in MINIMOL:  # its head's settings; chemprop's flags are chemprop's
        size = minimol_members(tool, settings.anchor_ensemble)
        return " ".join([*head_flags(tool), *["--ensemble-size", str(size)] * (size > 1)])
    ensemble = ["--ensemble-size", str(settings.anchor_ensemble)] * (settings.anchor_ensemble > 1)
    once = dataset in settings.rdkit_once
    return " ".join([*anchor_flags(tool, once=once), *settings.chemprop_flags, *ensemble])


def run_name(tool: str, settings: RunSettings) -> str:
    """The folder of a tool's run: the tool's name, plus a digest of the extra flags it got
    (``--setattn-flags`` / ``--chemprop-flags``), so that runs of other flags in the same
    ``--out`` keep their files."""
    extra = (settings.setattn_flags if tool == "setattn" else () if tool in MINIMOL
             else settings.chemprop_flags)
    if not extra:
        return tool
    return f"{tool}-{hashlib.sha1(' '.join(extra).encode()).hexdigest()[:8]}"


def setattn_ensemble(flags: list[str] | tuple[str, ...]) -> int:
    """The ensemble size setattn trains with these extra flags."""
    flags = list(flags)
    sizes = [flags[i + 1] for i, f in enumerate(flags[:-1]) if f == "--ensemble-size"]
    sizes += [f.split("=", 1)[1] for f in flags if f.startswith("--ensemble-size=")]
    return int(sizes[-1]) if sizes else RunConfig().ensemble_size


def source_files(name: str, root: Path = ROOT / "datasets") -> list[Path]:
    """The file(s) set ``name`` is read from (Huuskonen: its two SD files)."""
    spec = SETS[name]
    if not spec.file:
        return [root / "molecules" / f"solubility.{part}.sdf" for part in ("train", "test")]
    return [root / spec.file]


@functools.cache
def _set_digest(name: str) -> str:
    return file_digest(source_files(name))


@functools.cache
def library_digest() -> str:
    """The setattn version in its runs' keys (unless ``RunSettings.library`` gives one):
    the digest of every file of ``setattn/`` as it is on disk now (what the run imports)."""
    return tree_digest(ROOT / "setattn")


def run_material(job: Job, tool: str, settings: RunSettings, members: int | None = None
                 ) -> tuple[str, dict]:
    """Where a run of ``tool`` on ``job`` is stored ("anchors", the benchmark's name, or
    ``<benchmark>_rounds`` for a cost round) and its key material; an anchor at
    ``members`` models (default ``settings.anchor_ensemble``)."""
    spec = SETS[job.dataset]
    data, rows = _set_digest(job.dataset), rows_digest(job.table.smiles, job.labels)
    if tool == "setattn":
        material = {"kind": "setattn", "data": data, "rows": rows,
                    "targets": list(spec.targets), "task": spec.task, "tool": tool,
                    "flags": list(settings.setattn_flags),
                    "version": settings.library or library_digest(),
                    "members": setattn_ensemble(settings.setattn_flags), "seed": job.seed,
                    "threads": settings.threads}
        kind = settings.benchmark
    elif tool in MINIMOL:
        size = minimol_members(tool, members or settings.anchor_ensemble)
        material = minimol_material(data, rows, spec.targets, spec.task, tool, size, job.seed,
                                    settings.threads)
        kind = "anchors"
    else:
        flags = anchor_flags(tool, once=job.dataset in settings.rdkit_once)
        material = anchor_material(data, rows, spec.targets, spec.task, tool,
                                   [*flags, *settings.chemprop_flags],
                                   members or settings.anchor_ensemble, job.seed, settings.threads)
        kind = "anchors"
    if settings.round is not None:  # a timed run of its own, never a stored accuracy run
        # a round times the three tools together at one setattn library: every tool's
        # run of it carries that library, so another library's rounds are timed anew
        return f"{settings.benchmark}_rounds", {**material, "round": settings.round,
                                                "setattn": settings.library or library_digest()}
    return kind, material


def describes(job: Job, settings: RunSettings) -> dict:
    """What a stored run is, for people reading the file (not part of its key)."""
    return {"benchmark": settings.benchmark, "dataset": job.dataset, "split": job.kind,
            "seed": job.seed, "part": settings.report, "column": job.column}


def _anchor_sources(job: Job, tool: str, settings: RunSettings) -> list[tuple[str, bool]]:
    """The stored anchor runs that give ``tool`` on ``job``, in order of preference:
    (key, whether member 0 of it is the run). A one-model anchor is also member 0 of the
    ensemble of ``settings.members_of`` models."""
    keys = [(run_key(run_material(job, tool, settings)[1]), False)]
    if settings.anchor_ensemble == 1 and settings.members_of > 1 and settings.round is None:
        ensemble = run_material(job, tool, settings, settings.members_of)[1]
        keys.append((run_key(ensemble), True))
    return keys


def _stored(job: Job, tool: str, settings: RunSettings) -> tuple[dict, bool] | None:
    """The stored run that gives ``tool`` on ``job`` and whether it is member 0 of it;
    None when none is stored."""
    if tool == "setattn" or settings.round is not None:
        kind, material = run_material(job, tool, settings)
        run = load_stored(kind, run_key(material), settings.store)
        return None if run is None else (run, False)
    for key, member0 in _anchor_sources(job, tool, settings):
        run = load_stored("anchors", key, settings.store)
        if run is not None and (not member0 or run.get("member0")):
            return run, member0
    return None


def _record(job: Job, tool: str, settings: RunSettings, result: dict) -> dict:
    seen = job.counts()["train"] * result["epochs"]  # molecules x epochs, all members
    result["mol_per_s"], result["mol_per_s_all"] = (  # training; the whole run (featurising)
        seen / result["fit_seconds"], seen / result["seconds"] if result["seconds"] else None)
    return {"dataset": job.dataset, "split": job.kind, "seed": job.seed, "report": settings.report,
            "tool": tool, "flags": tool_flags(tool, settings, job.dataset), "result": result,
            "metric_name": SETS[job.dataset].metric, "train": job.counts()["train"]}


def stored_record(job: Job, tool: str, settings: RunSettings) -> dict | None:
    """The record of ``tool`` on ``job`` from the stored runs, its metric computed here
    for an anchor (from its stored predictions); None when no run is stored."""
    found = _stored(job, tool, settings)
    if found is None or "record" in found[0]:
        return found and found[0]["record"]
    result, smiles, preds = stored_result(*found)
    return _record(job, tool, settings, {**result, "metric": _metric(job, smiles, preds, tool)})


def _train_anchor(job: Job, tool: str, run_dir: Path, settings: RunSettings) -> dict:
    """Train an anchor and store it in ``anchors/`` (its test predictions, member 0's
    too, and costs); returns its costs."""
    if tool in MINIMOL:
        return _train_minimol(job, tool, settings)
    spec = SETS[job.dataset]
    members = settings.anchor_ensemble
    result, smiles, preds = run_chemprop(
        job.data, job.column, spec.targets, spec.task, run_dir, job.seed, settings.threads,
        [*anchor_flags(tool, job.data, job.dataset in settings.rdkit_once),
         *settings.chemprop_flags], members)
    if smiles != job.scored()[0]:
        raise RuntimeError(f"{tool}'s test rows differ from column {job.column!r} of "
                           f"{job.data}")
    member0 = None
    if members > 1:
        first, member0 = member_predictions(run_dir, spec.targets)
        if first != smiles:
            raise RuntimeError(f"{run_dir}: member 0 predicted other molecules")
    _, material = run_material(job, tool, settings)
    store_run("anchors", material, anchor_content(result, smiles, preds, member0,
                                                  describes(job, settings)), settings.store)
    return result


def _train_minimol(job: Job, tool: str, settings: RunSettings) -> dict:
    """Fit a MiniMol anchor (``minimol_runs``) and store it in ``anchors/`` as a chemprop
    anchor is (plus what its head chose); returns its costs."""
    spec = SETS[job.dataset]
    _, material = run_material(job, tool, settings)
    result, smiles, preds, member0 = run_minimol(
        tool, job.data, job.column, spec.targets, spec.task, settings.out / "minimol",
        job.seed, settings.threads, material["members"])
    if smiles != job.scored()[0]:
        raise RuntimeError(f"{tool}'s test rows differ from column {job.column!r} of "
                           f"{job.data}")
    content = anchor_content(result, smiles, preds, member0, describes(job, settings))
    store_run("anchors", material, {**content, "head": result["head"]}, settings.store)
    return result


def run_job(job: Job, tool: str, settings: RunSettings) -> dict | None:
    """Run ``tool`` ("setattn", a chemprop or a MiniMol anchor) on ``job`` unless a run of it is
    stored; store it as soon as it finishes. Returns ``{"tool", "key", "seconds"}``
    (None when skipped), no metric: progress is read without reading results.

    An anchor's file keeps its predictions, and its metric is computed only when the
    tables are made (:func:`stored_record`). A setattn run and a cost round's run are
    stored as their record (in the benchmark's folder, or ``<benchmark>_rounds``).
    """
    if _stored(job, tool, settings) is not None:
        return None
    run_dir = settings.out / job.dataset / f"{job.column}_{settings.report}" / run_name(tool,
                                                                                    settings)
    shutil.rmtree(run_dir, ignore_errors=True)  # an interrupted run starts again
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    kind, material = run_material(job, tool, settings)
    if tool != "setattn" and settings.round is None:
        result = _train_anchor(job, tool, run_dir, settings)
    else:
        result = _run_setattn(job, run_dir, settings) if tool == "setattn" else \
            _run_anchor(job, tool, run_dir, settings)
        record = _record(job, tool, settings, result)
        store_run(kind, material, {"describes": describes(job, settings), "record": record},
                  settings.store)
    return {"tool": tool, "key": run_key(material), "seconds": result["seconds"]}
