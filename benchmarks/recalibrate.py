"""Recalibrate the 90 % intervals of saved benchmark runs, with either conformal quantile.

The interval step comes after training (``setattn.molprop.conformal``): the validation
molecules' normalised errors give the scale of each interval. This script reloads the
ensembles that ``benchmarks/molecules.py`` saved in its ``--out`` folders
(``<set>/<split column>_<part>/setattn/``), predicts their validation and test
molecules again (checking that they reproduce the run's recorded test RMSE and coverage),
and calibrates both ways: ``guarantee`` (the ``ceil((n + 1) * 0.9)``-th score, coverage
at least 90 %, what runs use) and ``interpolated`` (position ``(n + 1) * 0.9``, 90 % in
expectation). Trains nothing.

It is meant for development runs (``--report val``) and reads their validation molecules
only: ``--halves N`` splits them N times at random into two halves (a random split
molecule by molecule, a scaffold split by whole Bemis-Murcko scaffold groups); each half
calibrates and the other is scored, both ways. A row's coverage is the mean of all its
evaluations.

    python benchmarks/recalibrate.py --halves 500 --runs runs/dev_cov_a runs/dev_cov_b
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import math
import statistics
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from coverage_noise import expected_coverage
from util import print_table

from setattn.molprop import conformal, splits
from setattn.molprop.checkpoint import load_run
from setattn.molprop.metrics import regression_metrics
from setattn.molprop.predict import predict_spread

RULES = {"guarantee": True, "interpolated": False}  # name -> conformal's guarantee flag


@dataclass
class Part:
    """One part of a run's split: SMILES, (M, T) targets, the ensemble's mean, and in
    ``std`` the scale ``u`` the run's intervals use (the members' spread, or the kernel
    ridge's posterior std: its calibration's ``spread``)."""

    smiles: list[str]
    y: torch.Tensor
    mean: torch.Tensor
    std: torch.Tensor


@dataclass
class SavedRun:
    """A saved setattn run of the benchmark and its reloaded predictions."""

    folder: Path
    dataset: str
    split: str  # random or scaffold
    seed: int
    metrics: dict
    val: Part
    test: Part


def run_folders(roots: list[Path]) -> list[Path]:
    """Every finished setattn run folder (one with metrics.json) under the roots, sorted."""
    found = sorted(f.parent for root in roots for f in root.glob("*/*/setattn/metrics.json"))
    if not found:
        raise SystemExit(f"no setattn run folder with metrics.json under {[str(r) for r in roots]}"
                         " (expected <out>/<set>/<split column>_<part>/setattn/)")
    return found


def read_table(path: Path, digest: str, smiles_column: str, targets: list[str]
                ) -> tuple[list[str], np.ndarray]:
    """SMILES and (N, T) float targets (NaN where empty) of a benchmark CSV, after
    checking it is the file the run read (its sha256 in split.json)."""
    if not path.is_file():
        raise SystemExit(f"{path}: the run's data file is missing (named in its split.json)")
    if hashlib.sha256(path.read_bytes()).hexdigest() != digest:
        raise SystemExit(f"{path}: not the file the run read (sha256 differs from split.json)")
    with path.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    values = [[float(r[t]) if r[t].strip() else math.nan for t in targets] for r in rows]
    return [r[smiles_column] for r in rows], np.asarray(values, dtype=np.float64)


def spread_of(metrics: dict) -> str:
    """What a run's intervals are scaled by, from its ``metrics.json`` (the ensemble's
    spread for runs saved before there was a choice)."""
    saved = metrics.get("uncertainty", {}).get("calibration")
    return conformal.Calibration.from_dict(saved).spread if saved else conformal.ENSEMBLE


def _part(models: list, smiles: list[str], y: np.ndarray, rows: list[int], folder: Path,
          kind: str) -> Part:
    chosen = [smiles[i] for i in rows]
    mean, _, std, errors = predict_spread(models, chosen, kind)  # (M, T) each
    if any(errors):
        raise SystemExit(f"{folder}: its split holds SMILES that no longer parse: "
                         f"{[e for e in errors if e]}")
    return Part(chosen, torch.from_numpy(y[rows]).to(mean.dtype), mean, std)


@dataclass
class RunFiles:
    """What a saved run folder holds: its records, its data file's SMILES and (N, T)
    targets, its split rows, its reloaded ensemble, and its split kind and seed."""

    metrics: dict
    data: Path
    smiles: list[str]
    y: np.ndarray
    split: dict
    models: list
    kind: str
    seed: int


def open_run(folder: Path) -> RunFiles:
    """Read a ``<set>/<split column>_<part>/setattn`` run folder and reload its ensemble,
    after checking that its data file is the one it read."""
    metrics = json.loads((folder / "metrics.json").read_text())
    config = json.loads((folder / "config.json").read_text())
    split = json.loads((folder / "split.json").read_text())
    data = folder.parent.parent / split["data"]["file"]
    smiles, y = read_table(data, split["data"]["sha256"], config["smiles_column"],
                           metrics["targets"])
    models, _ = load_run(folder)
    column = config["split_column"]
    kind = column.rstrip("0123456789")
    return RunFiles(metrics, data, smiles, y, split, models, kind, int(column[len(kind):]))


def load_saved(folder: Path) -> SavedRun:
    """Reload a run folder's ensemble and predict its validation and test parts."""
    run = open_run(folder)
    kind = spread_of(run.metrics)
    return SavedRun(folder, folder.parent.parent.name, run.kind, run.seed, run.metrics,
                    _part(run.models, run.smiles, run.y, run.split["val"], folder, kind),
                    _part(run.models, run.smiles, run.y, run.split["test"], folder, kind))


def check_record(run: SavedRun) -> dict:
    """What the reload reproduces of the run's record: its test RMSE and its coverage with
    the guaranteed rank, which runs use. Raises SystemExit where the RMSE differs by more
    than 1e-5."""
    recorded = run.metrics["test"]["rmse"]
    names = [str(t) for t in range(run.test.y.shape[1])]
    again = regression_metrics(run.test.y, run.test.mean, names, "test part")["rmse"]
    if abs(again - recorded) > 1e-5 * max(1.0, abs(recorded)):
        raise SystemExit(f"{run.folder}: reloaded test RMSE {again:.6f}, the record has "
                         f"{recorded:.6f}: not the run's models or data")
    cal = conformal.calibrate(run.val.y, run.val.mean, run.val.std)
    return {"recorded": run.metrics["uncertainty"]["test"]["coverage"],
            "again": conformal.coverage(run.test.y, run.test.mean, run.test.std, cal)}


def _subset(part: Part, rows: np.ndarray) -> Part:
    index = torch.from_numpy(rows)
    return Part([part.smiles[i] for i in rows], part.y[index], part.mean[index],
                part.std[index])


def halves(part: Part, kind: str, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Two halves of the part's rows: molecule by molecule (random split) or by whole
    scaffold groups (scaffold split), each group to the half that has fewer so far."""
    if kind == "random":
        order = rng.permutation(len(part.smiles))
        return np.sort(order[: len(order) // 2]), np.sort(order[len(order) // 2:])
    groups: dict[str, list[int]] = defaultdict(list)
    for i, smi in enumerate(part.smiles):
        groups[splits.murcko_scaffold(smi)].append(i)
    members = list(groups.values())
    first: list[int] = []
    second: list[int] = []
    for g in rng.permutation(len(members)):
        (first if len(first) <= len(second) else second).extend(members[g])
    return np.sort(np.array(first)), np.sort(np.array(second))


def half_coverages(run: SavedRun, repeats: int, seed: int = 0) -> dict[str, list[float]]:
    """Coverage of each rule over ``repeats`` halvings of the validation part, both ways;
    under ``"exchangeable"`` what the guaranteed rank would cover in expectation on
    exchangeable molecules (``coverage_noise.expected_coverage``) for each calibrating
    half's n (its molecules: the regression sets here have one target)."""
    rng = np.random.default_rng(seed)
    out: dict[str, list[float]] = {name: [] for name in [*RULES, "exchangeable"]}
    for _ in range(repeats):
        a, b = halves(run.val, run.split, rng)
        for cal_rows, eval_rows in ((a, b), (b, a)):
            cal_part, eval_part = _subset(run.val, cal_rows), _subset(run.val, eval_rows)
            out["exchangeable"].append(expected_coverage([(len(cal_rows), len(eval_rows))]))
            for name, flag in RULES.items():
                cal = conformal.calibrate(cal_part.y, cal_part.mean, cal_part.std,
                                          guarantee=flag)
                out[name].append(conformal.coverage(eval_part.y, eval_part.mean,
                                                    eval_part.std, cal))
    return out


def _pct(value: float) -> str:
    return f"{100 * value:.1f}%"


def halves_table(runs: list[SavedRun], repeats: int) -> tuple[list[list[str]], dict]:
    """Rows of the development table (mean over seeds and halvings) and the rule's
    summary: mean |coverage - 90 %| per rule, the lowest candidate row, and each row's
    unrounded means."""
    grouped: dict[tuple[str, str], list[SavedRun]] = defaultdict(list)
    for run in runs:
        grouped[(run.dataset, run.split)].append(run)
    rows, gaps = [], {name: [] for name in RULES}
    unrounded: dict[str, dict[str, float]] = {}
    lowest = math.inf
    for (dataset, kind), members in sorted(grouped.items()):
        members.sort(key=lambda r: r.seed)
        pooled: dict[str, list[float]] = {name: [] for name in [*RULES, "exchangeable"]}
        sizes = []
        for r in members:
            for name, values in half_coverages(r, repeats).items():
                pooled[name].extend(values)
            sizes.append(len(r.val.smiles))
        means = {name: statistics.fmean(v) for name, v in pooled.items()}
        unrounded[f"{dataset} {kind}"] = means
        for name in RULES:
            gaps[name].append(abs(means[name] - conformal.LEVEL))
        lowest = min(lowest, means["interpolated"])
        rows.append([dataset, kind, " ".join(str(r.seed) for r in members),
                     " ".join(str(s) for s in sizes), _pct(means["exchangeable"]),
                     _pct(means["guarantee"]), _pct(means["interpolated"]),
                     _pct(statistics.pstdev(pooled["guarantee"])),
                     _pct(statistics.pstdev(pooled["interpolated"]))])
    summary = {name: statistics.fmean(v) for name, v in gaps.items()}
    summary["lowest interpolated row"] = lowest
    summary["rows"] = unrounded
    return rows, summary


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", nargs="+", type=Path, required=True,
                        help="benchmark --out folders holding saved setattn runs")
    parser.add_argument("--halves", type=int, default=500,
                        help="halvings of each validation part (default 500)")
    parser.add_argument("--save", type=Path, help="write the table and its summary here (JSON)")
    args = parser.parse_args(argv)
    if args.halves < 1:
        parser.error(f"argument --halves: must be >= 1, got {args.halves}")
    torch.set_num_threads(1)
    runs = []
    for folder in run_folders(args.runs):
        run = load_saved(folder)
        if run.metrics["task"] != "regression":
            continue
        check = check_record(run)
        if check["again"] != check["recorded"]:
            raise SystemExit(f"{folder}: reloaded coverage {check['again']}, the record has "
                             f"{check['recorded']}")
        runs.append(run)
        print(f"reloaded {folder}: its recorded RMSE and coverage reproduced", flush=True)
    rows, summary = halves_table(runs, args.halves)
    print_table(["set", "split", "seeds", "validation molecules", "guarantee if exchangeable",
                 "guarantee", "interpolated", "sd guarantee", "sd interpolated"], rows,
                markdown=True)
    print(f"\nmean |coverage - 90%| over rows: guarantee {100 * summary['guarantee']:.2f} "
          f"points, interpolated {100 * summary['interpolated']:.2f} points; lowest "
          f"interpolated row {100 * summary['lowest interpolated row']:.2f}%")
    if args.save:
        args.save.write_text(json.dumps({"rows": rows, "summary": summary}, indent=1))


if __name__ == "__main__":
    main()
