"""Does a network weight stacked per task on the validation part beat the fixed 0.5?

A regression or single-task classification model blends its network with its kernel
part: ``w * network + (1 - w) * kernel`` in target units or probabilities, with
``w = NETWORK_WEIGHT`` (0.5). The candidate fits ``w`` per task as the least-squares weight
of the two parts' validation residuals, clipped to [0, 1]
(``stacking.stack_weight`` unshrunk), or with ``--shrink`` that weight's step from 0.5
shrunk by its standard error (``stack_weight`` shrunk, the default for regression).
This script reloads saved runs, predicts their
validation molecules with each part alone, checks that both reproduce the run's recorded
metrics, and scores the stacked weight by two-fold cross-fitting inside the validation
part: the part is halved at random (seed 0), the weight fitted on each half predicts the
other, and the pooled predictions are scored against the fixed weight's on the same
molecules. It trains nothing and reads no test molecule. The rule it serves is in
``docs/guide/defaults.rst`` ("The network's weight per task, stacked on the validation
part").

    PYTHONPATH=benchmarks python benchmarks/decisions/blend_stack.py \
        --runs runs/dev_stack --out x.json                         # least squares
    PYTHONPATH=benchmarks python benchmarks/decisions/blend_stack.py --shrink \
        --runs runs/dev_shrunk --moleculeace runs/ace_fp_a runs/ace_fp_b  # the record

The record is ``blend_stack.json`` beside this script, with the decision log it serves
(``DECISIONS.md``); ``PYTHONPATH=benchmarks`` finds the benchmarks' ``helpers``.

``--runs`` takes ``benchmarks/molecules.py --report val`` output folders, ``--moleculeace``
``benchmarks/moleculeace.py --report val`` ones.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch_geometric.data import Data

from setattn.molprop.batching import stacked_targets
from setattn.molprop.checkpoint import load_run
from setattn.molprop.ensemble import NETWORK_WEIGHT, task_weights
from setattn.molprop.featurize import featurize
from setattn.molprop.metrics import evaluate

from helpers.molecule_jobs import SETS
from helpers.record import finish, make_record, table

RECORD = Path(__file__).resolve().with_name("blend_stack.json")
"""The decision record this script writes, beside the decision log."""

FIXED = NETWORK_WEIGHT
TOLERANCE = 1e-5
"""Largest relative difference between a reloaded metric and the run's record."""


@dataclass
class Parts:
    """A saved run's validation molecules: targets y (M, T), the network's (the members'
    mean) and the kernel part's predictions (M, T), in target units or probabilities."""

    folder: Path
    task: str
    y: torch.Tensor
    network: torch.Tensor
    kernel: torch.Tensor
    smiles: list[str]


def validation_molecules(data: Path, smiles_column: str, targets: list[str], rows: list[int],
                         descriptor_dim: int) -> list[Data]:
    """The molecules of the file rows ``rows`` (0-based data rows, as ``split.json``
    lists them) of ``data``, featurised as the run's models read them, with ``y`` (1, T)."""
    with open(data, newline="") as handle:
        table = list(csv.DictReader(handle))
    molecules = []
    for r in rows:
        d = featurize(table[r][smiles_column], descriptor_dim, row=r, source=data.name)
        d.y = torch.tensor([[float(table[r][t]) if table[r][t] != "" else math.nan
                             for t in targets]])  # (1, T)
        molecules.append(d)
    return molecules


def load_parts(folder: Path) -> tuple[Parts, dict]:
    """Reload a run folder's ensemble and predict its validation part with each part of
    the blend; (parts, metrics.json). Raises SystemExit naming the folder where the run
    has no kernel part or the reload does not reproduce its record."""
    metrics = json.loads((folder / "metrics.json").read_text())
    config = json.loads((folder / "config.json").read_text())
    rows = json.loads((folder / "split.json").read_text())["val"]
    if "components" not in metrics:
        raise SystemExit(f"{folder}: the run has no kernel part, so no blend to weigh")
    ensemble, _ = load_run(folder)
    val = validation_molecules(Path(config["data"]), config["smiles_column"],
                               metrics["targets"], rows, ensemble.descriptor_dim)
    y = stacked_targets(val, ensemble.num_tasks)  # (M, T)
    network = ensemble.network_predictions(val)  # (M, T)
    kernel = ensemble.kernel_predictions(val)  # (M, T)
    parts = Parts(folder, metrics["task"], y, network.double(), kernel.double(),
                  [d.smiles for d in val])
    recorded = metrics["components"]["val"]
    for name, weight in (("attention", 1.0), ("kernel_ridge", 0.0)):
        for key, value in recorded[name].items():
            if not isinstance(value, float):  # per-task tables
                continue
            again = score(parts, blend(parts, weight), key)
            if abs(again - value) > TOLERANCE * max(1.0, abs(value)):
                raise SystemExit(f"{folder}: reloaded {name} {key} {again:.6f}, the record "
                                 f"has {value:.6f}: not the run's models or data")
    return parts, metrics


def blend(parts: Parts, weight: float | torch.Tensor) -> torch.Tensor:
    """(M, T) the blend with the network at ``weight`` (a number or one per task)."""
    return weight * parts.network + (1 - weight) * parts.kernel  # (M, T)


def score(parts: Parts, predicted: torch.Tensor, key: str) -> float:
    """One metric (``rmse``, ``roc_auc``, ...) of ``predicted`` on the validation part."""
    names = [str(t) for t in range(parts.y.shape[1])]
    return evaluate(parts.y, predicted, parts.task, names, "validation part")[key]


def fitted_weights(parts: Parts, rows: torch.Tensor, shrink: bool = False) -> torch.Tensor:
    """(T,) the stacked network weight of each task, fitted on ``rows`` (labelled only);
    with ``shrink``, shrunk toward 0.5 (the default model's rule); a task without labels
    keeps ``FIXED``."""
    return task_weights(parts.y[rows].double(), parts.network[rows], parts.kernel[rows],
                        FIXED if shrink else 1.0, shrink)


def cross_fitted(parts: Parts, shrink: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """(M, T) the stacked blend's predictions, each half predicted with the weight fitted
    on the other half, and (T,) the weight fitted on the whole part."""
    order = torch.randperm(len(parts.y), generator=torch.Generator().manual_seed(0))
    halves = order[: len(order) // 2], order[len(order) // 2:]
    predicted = torch.empty_like(parts.network)
    for fit, use in (halves, halves[::-1]):
        predicted[use] = blend(parts, fitted_weights(parts, fit, shrink))[use]
    return predicted, fitted_weights(parts, torch.arange(len(parts.y)), shrink)


def lower_is_better(key: str) -> bool:
    return key in ("rmse", "mae", "cliff_rmse")


def ratio(stacked: float, fixed: float, key: str) -> float:
    """Below 1: the stacked weight is better, for an error and a score alike."""
    return stacked / fixed if lower_is_better(key) else fixed / stacked


def run_folders(roots: list[Path]) -> list[Path]:
    """Every saved ``setattn`` run folder under ``roots`` (``metrics.json`` beside
    ``config.json``), in a fixed order."""
    return sorted(p.parent for root in roots for p in root.rglob("metrics.json")
                  if (p.parent / "config.json").exists())


def molecule_rows(roots: list[Path], shrink: bool = False) -> tuple[dict, str]:
    """The 10-row rule: per (set, split), the mean cross-fitted validation metric of each
    weight over the seeds, their ratio; (table, a line with the geometric mean and the
    worst row)."""
    rows: dict[tuple[str, str], list[tuple[float, float, float]]] = {}
    for folder in run_folders(roots):
        parts, metrics = load_parts(folder)
        dataset = folder.parent.parent.name
        kind = folder.parent.name.removesuffix("_val").rstrip("0123456789")
        key = SETS[dataset].metric
        predicted, weights = cross_fitted(parts, shrink)
        fixed, stacked = score(parts, blend(parts, FIXED), key), score(parts, predicted, key)
        rows.setdefault((dataset, kind), []).append((fixed, stacked, float(weights.mean())))
        print(f"{folder}: {key} fixed {fixed:.4f} stacked {stacked:.4f} "
              f"(whole-part weight {float(weights.mean()):.2f})", file=sys.stderr)
    rows_out, ratios = [], []
    for (dataset, kind), seeds in rows.items():
        key = SETS[dataset].metric
        fixed, stacked = (statistics.mean(s[i] for s in seeds) for i in (0, 1))
        ratios.append(ratio(stacked, fixed, key))
        rows_out.append([dataset, kind, str(len(seeds)), f"{fixed:.4f}", f"{stacked:.4f}",
                      f"{ratios[-1]:.4f}", f"{statistics.mean(s[2] for s in seeds):.2f}"])
    geo = math.exp(statistics.mean(math.log(r) for r in ratios))
    line = (f"{len(ratios)} rows: geometric mean of the ratios {geo:.5f}, worst row "
            f"{max(ratios):.4f}.")
    return table(
        "Mean validation metric over the seeds: fixed weight 0.5 and stacked (cross-fitted)",
        ["set", "split", "seeds", "fixed 0.5", "stacked", "ratio", "weight"], rows_out,
        "ratio below 1: stacked better; weight: the mean network weight fitted on whole "
        "parts"), line


def cliff_flags(data: Path, smiles: list[str]) -> np.ndarray:
    """(M,) whether each validation molecule is a cliff compound, from its MoleculeACE set
    (the run's ``data.csv`` lies in ``<out>/<set>/val/``)."""
    from moleculeace import read_set

    cliff = {r["smiles"]: r["cliff"] for r in read_set(data.parent.parent.name)}
    return np.array([cliff[s] for s in smiles])


def _rmse(y: np.ndarray, p: np.ndarray) -> float:
    return float(np.sqrt(np.mean((p - y) ** 2)))


def moleculeace_rows(roots: list[Path], shrink: bool = False) -> tuple[dict, str]:
    """The MoleculeACE rule: per set, RMSE and cliff RMSE of each weight on the validation
    tenth and their means; (table, a line with the ratio of the means)."""
    rows_out, sums = [], np.zeros(4)
    for folder in sorted((f for root in roots for f in root.glob("*/val/setattn")),
                         key=lambda f: f.parent.parent.name):
        parts, _ = load_parts(folder)
        predicted, weights = cross_fitted(parts, shrink)
        cliff = cliff_flags(folder.parent / "data.csv", parts.smiles)
        y = parts.y[:, 0].numpy()
        values = []
        for p in (blend(parts, FIXED)[:, 0].numpy(), predicted[:, 0].numpy()):
            values += [_rmse(y, p), _rmse(y[cliff], p[cliff])]
        sums += np.array(values)
        rows_out.append([folder.parent.parent.name, *(f"{v:.3f}" for v in values),
                      f"{float(weights[0]):.2f}"])
    n = len(rows_out)
    means = sums / n
    rows_out.append(["mean", *(f"{v:.4f}" for v in means), ""])
    better = sum(float(r[3]) < float(r[1]) for r in rows_out[:-1])
    line = (f"MoleculeACE, {n} sets: mean RMSE {means[0]:.4f} fixed, {means[2]:.4f} stacked "
            f"(ratio {means[2] / means[0]:.4f}), mean cliff RMSE {means[1]:.4f} fixed, "
            f"{means[3]:.4f} stacked; stacked better on {better} of {n}.")
    return table(
        "MoleculeACE validation tenths: fixed weight 0.5 and stacked (cross-fitted)",
        ["set", "fixed RMSE", "fixed cliff", "stacked RMSE", "stacked cliff", "weight"],
        rows_out, "weight: the network weight fitted on the whole validation tenth"), line


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", nargs="+", type=Path, default=[],
                        help="benchmarks/molecules.py --report val output folders")
    parser.add_argument("--moleculeace", nargs="+", type=Path, default=[],
                        help="benchmarks/moleculeace.py --report val output folders")
    parser.add_argument("--shrink", action="store_true",
                        help="the weight shrunk toward 0.5 by its standard error")
    parser.add_argument("--out", type=Path, default=RECORD,
                        help="the record (default benchmarks/decisions/blend_stack.json)")
    args = parser.parse_args(argv)
    if not args.runs and not args.moleculeace:
        parser.error("give --runs, --moleculeace or both")
    torch.set_num_threads(1)
    parts = ([molecule_rows(args.runs, args.shrink)] if args.runs else []) + (
        [moleculeace_rows(args.moleculeace, args.shrink)] if args.moleculeace else [])
    kind = "shrunk toward 0.5 by its standard error" if args.shrink else "least squares"
    summary = (f"The network's blend weight fitted per task on the validation part ({kind}), "
               "scored by two-fold cross-fitting against the fixed 0.5: "
               + " ".join(line for _, line in parts))
    finish(make_record("blend_stack", "A network weight fitted per task against the fixed 0.5",
                       summary, [t for t, _ in parts], 1), args.out)


if __name__ == "__main__":
    main()
