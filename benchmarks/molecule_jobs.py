"""Runs of the molecule benchmark: one tool on one (set, split kind, seed), saved as it ends.

Every finished run is a record in ``<out>/results.json``, keyed by (data set, split kind,
seed, reported part, tool, extra flags); a later call with the same settings skips it,
so an interrupted benchmark resumes where it stopped. A run directory left by an
interrupted run is removed and the run started again.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

import chemprop_anchor
import molecule_sets
import numpy as np
import torch
from molecule_sets import SETS, MoleculeTable

from setattn.molprop.checkpoint import load_run
from setattn.molprop.metrics import evaluate

__all__ = ["Job", "RunSettings", "load_results", "run_job", "run_name", "save_result",
           "setattn_result", "split_data"]


@dataclass(frozen=True)
class RunSettings:
    """What every run of one benchmark call shares."""

    out: Path
    report: str  # "test" or "val": which part the tools' "test" rows are
    threads: int
    setattn_flags: tuple[str, ...] = ()
    chemprop_flags: tuple[str, ...] = ()


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
    """The CSV both tools read for one split (see ``molecule_sets``'s docstring).

    ``columns`` holds every split column of the call's test-report CSV; with
    ``report="test"`` that one CSV (written by the caller) serves all splits, with
    ``report="val"`` a CSV of the split's training and validation rows is written here.
    """
    column = molecule_sets.column_name(kind, seed)
    targets = SETS[dataset].targets
    if settings.report == "test":
        return Job(dataset, kind, seed, settings.out / dataset / "data.csv", column,
                   columns[column], table)
    sub, labels = molecule_sets.val_table(table, columns[column])
    path = settings.out / dataset / f"val_{column}.csv"
    molecule_sets.write_csv(path, sub, targets, {column: labels})
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
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / "results.json.tmp"
    tmp.write_text(json.dumps(records, indent=1))
    os.replace(tmp, out / "results.json")


def save_result(out: Path, record: dict) -> None:
    """Add (or replace) one run's record in ``out/results.json``, atomically."""
    records = [r for r in load_results(out) if record_key(r) != record_key(record)]
    _write_results(out, [*records, record])


def import_results(out: Path, files: list[Path]) -> int:
    """Add to ``out/results.json`` the records of other results files (slices of one
    benchmark run in separate folders) that it does not hold yet; returns how many.

    Raises:
        ValueError: a file is not a list of run records (names the file).
    """
    records = load_results(out)
    have = {record_key(r) for r in records}
    added = 0
    for path in files:
        try:
            incoming = json.loads(Path(path).read_text())
            keys = [record_key(r) for r in incoming]
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise ValueError(f"{path}: not a benchmark results file ({err})") from err
        for record, key in zip(incoming, keys):
            if key not in have:
                records.append(record)
                have.add(key)
                added += 1
    _write_results(out, records)
    return added


def _metric(job: Job, smiles: list[str], preds: np.ndarray, tool: str) -> float:
    """The set's metric of ``preds`` on the job's test rows, by setattn's ``evaluate``.

    Raises:
        RuntimeError: if the tool's test rows are not the job's.
    """
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
        "coverage": _opt(uncertainty.get("coverage")),
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
    seconds = chemprop_anchor.timed(cmd, run_dir.parent / f"{run_dir.name}.log",
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
    flags = [*chemprop_anchor.ANCHORS[tool], *settings.chemprop_flags]
    result, smiles, preds = chemprop_anchor.run_chemprop(
        job.data, job.column, spec.targets, spec.task, run_dir, job.seed, settings.threads,
        flags)
    return {**result, "metric": _metric(job, smiles, preds, tool)}


def tool_flags(tool: str, settings: RunSettings) -> str:
    """The flags a tool runs with beyond its defaults, as saved with its record."""
    if tool == "setattn":
        return " ".join(settings.setattn_flags)
    return " ".join([*chemprop_anchor.ANCHORS[tool], *settings.chemprop_flags])


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
    train = job.counts()["train"]
    result["mol_per_s"] = train * result["epochs"] / result["fit_seconds"]
    record = {"dataset": job.dataset, "split": job.kind, "seed": job.seed,
              "report": settings.report, "tool": tool, "flags": flags,
              "metric_name": SETS[job.dataset].metric, "train": train, "result": result}
    save_result(settings.out, record)
    done.add(key)
    return record
