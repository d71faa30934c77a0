"""Recalibrate the 90 % intervals of saved benchmark runs, with either conformal quantile.

The interval step comes after training (``setattn.molprop.conformal``): the validation
molecules' normalised errors give the scale of each interval. This script reloads the
ensembles that ``benchmarks/molecules.py`` saved in its ``--out`` folders
(``<set>/<split column>_<part>/setattn/``), predicts their validation and test
molecules again, and calibrates both ways: ``guarantee`` (the ``ceil((n + 1) * 0.9)``-th
score, coverage at least 90 %) and ``interpolated`` (position ``(n + 1) * 0.9``, 90 % in
expectation). Trains nothing.

* Default: each run's test coverage with both quantiles, per set and split as the mean
  over seeds. It first checks that the folder reproduces the run's record: its test
  metric and its coverage with the quantile runs use (``guarantee``).
* ``--halves N`` (development runs, ``--report val``): the validation molecules only,
  split N times at random into two halves (a random split molecule by molecule, a
  scaffold split by whole Bemis-Murcko scaffold groups); each half calibrates and the
  other is scored, both ways. A row's coverage is the mean of all its evaluations.

    python benchmarks/recalibrate.py --runs runs/report7_a_small runs/report7_b_small
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
from util import print_table

from setattn.molprop import conformal, splits
from setattn.molprop.checkpoint import load_run
from setattn.molprop.predict import predict_smiles

RULES = {"guarantee": True, "interpolated": False}  # name -> conformal's guarantee flag
BAND = (0.88, 0.92)


@dataclass
class Part:
    """One part of a run's split: SMILES, (M, T) targets, and the ensemble's mean and std."""

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


def _read_table(path: Path, digest: str, smiles_column: str, targets: list[str]
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


def _part(models: list, smiles: list[str], y: np.ndarray, rows: list[int], folder: Path
          ) -> Part:
    chosen = [smiles[i] for i in rows]
    mean, std, errors = predict_smiles(models, chosen)  # (M, T) each
    if any(errors):
        raise SystemExit(f"{folder}: its split holds SMILES that no longer parse: "
                         f"{[e for e in errors if e]}")
    return Part(chosen, torch.from_numpy(y[rows]).to(mean.dtype), mean, std)


def load_saved(folder: Path) -> SavedRun:
    """Reload a run folder's ensemble and predict its validation and test parts."""
    metrics = json.loads((folder / "metrics.json").read_text())
    config = json.loads((folder / "config.json").read_text())
    split = json.loads((folder / "split.json").read_text())
    data = folder.parent.parent / split["data"]["file"]
    smiles, y = _read_table(data, split["data"]["sha256"], config["smiles_column"],
                            metrics["targets"])
    models, _ = load_run(folder)
    column = config["split_column"]
    kind = column.rstrip("0123456789")
    return SavedRun(folder, folder.parent.parent.name, kind, int(column[len(kind):]), metrics,
                    _part(models, smiles, y, split["val"], folder),
                    _part(models, smiles, y, split["test"], folder))


def coverage(cal: conformal.Calibration, part: Part) -> float:
    """Share of the part's labels inside their interval."""
    lower, upper = conformal.bounds(part.mean, part.std, cal)  # (M, T) each
    ok = ~torch.isnan(part.y)  # (M, T)
    hit = (part.y >= lower) & (part.y <= upper) & ok  # (M, T)
    return float(hit.sum()) / max(int(ok.sum()), 1)


def _rmse(part: Part) -> float:
    """RMSE over the part's labels (the benchmark's regression sets have one target)."""
    ok = ~torch.isnan(part.y)  # (M, T)
    return float(((part.y - part.mean)[ok].double().square().mean()).sqrt())


def check_record(run: SavedRun) -> dict:
    """What the reload reproduces of the run's record: its test RMSE and its coverage with
    the guaranteed rank, which runs use. Raises SystemExit where the RMSE differs by more
    than 1e-5."""
    recorded = run.metrics["test"]["rmse"]
    again = _rmse(run.test)
    if abs(again - recorded) > 1e-5 * max(1.0, abs(recorded)):
        raise SystemExit(f"{run.folder}: reloaded test RMSE {again:.6f}, the record has "
                         f"{recorded:.6f}: not the run's models or data")
    cal = conformal.calibrate(run.val.y, run.val.mean, run.val.std)
    return {"recorded": run.metrics["uncertainty"]["test"]["coverage"],
            "again": coverage(cal, run.test)}


def test_coverages(run: SavedRun) -> dict[str, float]:
    """Test coverage with each rule, calibrated on the whole validation part."""
    return {name: coverage(conformal.calibrate(run.val.y, run.val.mean, run.val.std,
                                               guarantee=flag), run.test)
            for name, flag in RULES.items()}


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
    exchangeable molecules, ``ceil((n + 1) * 0.9) / (n + 1)`` for each calibrating half's
    n (its molecules: the regression sets here have one target)."""
    rng = np.random.default_rng(seed)
    out: dict[str, list[float]] = {name: [] for name in [*RULES, "exchangeable"]}
    for _ in range(repeats):
        a, b = halves(run.val, run.split, rng)
        for cal_rows, eval_rows in ((a, b), (b, a)):
            cal_part, eval_part = _subset(run.val, cal_rows), _subset(run.val, eval_rows)
            n = len(cal_rows)
            out["exchangeable"].append(math.ceil((n + 1) * conformal.LEVEL) / (n + 1))
            for name, flag in RULES.items():
                cal = conformal.calibrate(cal_part.y, cal_part.mean, cal_part.std,
                                          guarantee=flag)
                out[name].append(coverage(cal, eval_part))
    return out


def _pct(value: float) -> str:
    return f"{100 * value:.1f}%"


def report_table(runs: list[SavedRun]) -> tuple[list[list[str]], dict]:
    """Rows of the test-coverage table (mean over seeds per set and split) and the
    per-run numbers."""
    per_run, rows = {}, []
    grouped: dict[tuple[str, str], list[SavedRun]] = defaultdict(list)
    for run in runs:
        grouped[(run.dataset, run.split)].append(run)
    for (dataset, kind), members in sorted(grouped.items()):
        members.sort(key=lambda r: r.seed)
        checks = [check_record(r) for r in members]
        cover = [test_coverages(r) for r in members]
        for r, c, ch in zip(members, cover, checks, strict=True):
            per_run[f"{dataset} {kind} {r.seed}"] = {**c, "check": ch}
        means = {name: statistics.fmean(c[name] for c in cover) for name in RULES}
        same = sum(abs(ch["again"] - ch["recorded"]) < 1e-9 for ch in checks)
        rows.append([dataset, kind, " ".join(str(r.seed) for r in members),
                     _pct(statistics.fmean(ch["recorded"] for ch in checks)),
                     f"{same}/{len(checks)}", _pct(means["guarantee"]),
                     _pct(means["interpolated"]),
                     "yes" if BAND[0] <= round(means["interpolated"], 3) <= BAND[1] else "no"])
    return rows, per_run


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
    parser.add_argument("--halves", type=int, default=0,
                        help="development mode: this many halvings of each validation part")
    parser.add_argument("--save", type=Path, help="write the per-run numbers here (JSON)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    runs = []
    for folder in run_folders(args.runs):
        run = load_saved(folder)
        if run.metrics["task"] != "regression":
            continue
        runs.append(run)
        print(f"reloaded {folder}", flush=True)
    if args.halves:
        rows, summary = halves_table(runs, args.halves)
        print_table(["set", "split", "seeds", "validation molecules",
                     "guarantee if exchangeable", "guarantee", "interpolated", "sd guarantee",
                     "sd interpolated"], rows, markdown=True)
        print(f"\nmean |coverage - 90%| over rows: guarantee {100 * summary['guarantee']:.2f} "
              f"points, interpolated {100 * summary['interpolated']:.2f} points; lowest "
              f"interpolated row {100 * summary['lowest interpolated row']:.2f}%")
        saved = {"rows": rows, "summary": summary}
    else:
        rows, saved = report_table(runs)
        print_table(["set", "split", "seeds", "recorded coverage", "reproduced",
                     "guarantee", "interpolated", "interpolated in 88-92%"], rows,
                    markdown=True)
    if args.save:
        args.save.write_text(json.dumps(saved, indent=1))


if __name__ == "__main__":
    main()
