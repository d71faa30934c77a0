"""Which weight of the attention network in the blend with the kernel ridge validates best?

``setattn train`` blends its descriptor kernel ridge into regression and single-task
classification models: the prediction is ``w * network + (1 - w) * kernel ridge`` (target
units, or probabilities), with ``w = KERNEL_BLEND`` (0.5). The blend is linear in ``w``,
so one reload of a saved run gives its validation metric at every weight: this script
reloads the ensembles that ``benchmarks/molecules.py --report val`` saved in its
``--out`` folders, predicts their validation molecules with the network alone (the
members' mean) and the kernel ridge alone, checks that the run's weight reproduces the
recorded validation metric (and each part its recorded part), and prints per (set,
split) the mean validation metric over seeds at each weight, the ratio of each to the
baseline weight's (below 1 is better, for RMSE and ROC-AUC alike), and over the rows
the geometric mean and the worst ratio of each weight. Trains nothing; reads no test
molecule. The development rule it serves: ``results/molecules_dev.md``, "The blend
weight on validation parts".

    python benchmarks/blend_weight.py --runs runs/dev_cov_a runs/dev_cov_b runs/dev_blend_a \\
        runs/dev_blend_b --save benchmarks/results/molecules_dev_blend.json
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from dataclasses import dataclass
from pathlib import Path

import torch
from molecule_sets import REPORT_SEEDS, SETS
from recalibrate import open_run, run_folders
from util import print_table

from setattn.molprop.batching import batches
from setattn.molprop.featurize import featurize
from setattn.molprop.metrics import evaluate
from setattn.molprop.predict import kernel_outputs, outputs

WEIGHTS = (0.3, 0.4, 0.5, 0.6, 0.7)
"""Weights of the network the rule compares; 0.5 is today's ``KERNEL_BLEND``."""
BASELINE = 0.5
TOLERANCE = 1e-5
"""Largest relative difference between a reloaded metric and the run's record."""


@dataclass
class Parts:
    """A saved run's validation molecules: (M, T) targets, and the network's (the
    members' mean) and the kernel ridge's predictions, in target units or probabilities."""

    dataset: str
    split: str
    seed: int
    task: str
    y: torch.Tensor
    network: torch.Tensor
    kernel: torch.Tensor


def blended(parts: Parts, weight: float) -> torch.Tensor:
    """(M, T) the blend with the network at ``weight``, as ``MoleculeModel.combine`` makes
    it and ``to_units`` reads it (both are linear in the weight)."""
    return weight * parts.network + (1 - weight) * parts.kernel  # (M, T)


def metric(parts: Parts, weight: float) -> float:
    """The set's validation metric (RMSE or ROC-AUC) of the blend at ``weight``."""
    names = [str(t) for t in range(parts.y.shape[1])]
    scores = evaluate(parts.y, blended(parts, weight), parts.task, names, "validation part")
    return scores[SETS[parts.dataset].metric]


def _check(recorded: float, again: float, what: str, folder: Path) -> None:
    if abs(again - recorded) > TOLERANCE * max(1.0, abs(recorded)):
        raise SystemExit(f"{folder}: reloaded {what} {again:.6f}, the record has "
                         f"{recorded:.6f}: not the run's models or data")


def check_record(parts: Parts, metrics: dict, folder: Path) -> None:
    """Raises SystemExit naming ``folder`` unless the reload reproduces the recorded
    validation metric of the blend at the run's weight and of each part alone."""
    name = SETS[parts.dataset].metric
    components = metrics["components"]
    _check(metrics["val"][name], metric(parts, components["blend"]), f"validation {name}",
           folder)
    _check(components["val"]["attention"][name], metric(parts, 1.0), "network-alone " + name,
           folder)
    _check(components["val"]["kernel_ridge"][name], metric(parts, 0.0),
           "kernel-ridge-alone " + name, folder)


def load_parts(folder: Path) -> tuple[Parts, dict]:
    """Reload a ``--report val`` run folder's ensemble and predict its validation part.

    Returns its ``Parts`` and its ``metrics.json``. Raises SystemExit naming the folder for
    a run with no kernel ridge or a run of a report seed.
    """
    run = open_run(folder)
    if "components" not in run.metrics:
        raise SystemExit(f"{folder}: the run has no kernel ridge, so no blend to weigh")
    if run.seed in REPORT_SEEDS:
        raise SystemExit(f"{folder}: split seed {run.seed} is a report seed; choices look at "
                         "development seeds only")
    models, rows = run.models, run.split["val"]
    first = models[0]
    molecules = [featurize(run.smiles[i], first.config.descriptor_dim, row=i,
                           source=str(run.data)) for i in rows]
    batched = batches(molecules)
    with torch.no_grad():
        network = torch.stack([m.to_units(outputs(m, batched)) for m in models]).mean(0)
        kernel = first.to_units(first.kernel_as_outputs(kernel_outputs(first, batched)))
    targets = torch.from_numpy(run.y[rows]).to(network.dtype)  # (M, T)
    return Parts(folder.parent.parent.name, run.kind, run.seed, run.metrics["task"], targets,
                 network, kernel), run.metrics


def row_means(runs: list[Parts], weights: tuple[float, ...]
              ) -> dict[tuple[str, str], dict]:
    """Per (set, split): its seeds and the mean validation metric over them at each weight."""
    out: dict[tuple[str, str], dict] = {}
    for parts in runs:
        row = out.setdefault((parts.dataset, parts.split), {"seeds": [], "values": []})
        row["seeds"].append(parts.seed)
        row["values"].append([metric(parts, w) for w in weights])
    for row in out.values():
        row["means"] = [statistics.fmean(v) for v in zip(*row["values"], strict=True)]
    return out


def ratios(rows: dict[tuple[str, str], dict], weights: tuple[float, ...],
           baseline: float = BASELINE) -> dict[tuple[str, str], list[float]]:
    """Per row, each weight's mean over the baseline weight's, below 1 better: RMSE
    weight / baseline, ROC-AUC baseline / weight."""
    b = weights.index(baseline)
    out = {}
    for (name, split), row in rows.items():
        means = row["means"]
        if SETS[name].metric == "roc_auc":
            out[(name, split)] = [means[b] / m for m in means]
        else:
            out[(name, split)] = [m / means[b] for m in means]
    return out


def summary(by_row: dict[tuple[str, str], list[float]], weights: tuple[float, ...]
            ) -> list[dict]:
    """Per weight: the geometric mean of its row ratios and its worst ratio."""
    out = []
    for k, w in enumerate(weights):
        values = [r[k] for r in by_row.values()]
        out.append({"weight": w, "geomean": math.exp(statistics.fmean(map(math.log, values))),
                    "worst": max(values)})
    return out


def verdict(summaries: list[dict], max_geomean: float, max_worse: float,
            baseline: float = BASELINE) -> tuple[float, str]:
    """The weight the rule picks: the least geometric mean's, if it is at most
    ``max_geomean`` and no row of it is above ``max_worse``; else the baseline."""
    best = min(summaries, key=lambda s: s["geomean"])
    if best["weight"] == baseline:
        return baseline, f"the baseline {baseline:g} has the least geometric mean"
    if best["geomean"] > max_geomean:
        return baseline, (f"{best['weight']:g} has the least geometric mean, "
                          f"{best['geomean']:.4f}, above the bound {max_geomean:g}")
    if best["worst"] > max_worse:
        return baseline, (f"{best['weight']:g} has the least geometric mean, "
                          f"{best['geomean']:.4f}, but a row at {best['worst']:.4f}, above "
                          f"{max_worse:g}")
    return best["weight"], (f"{best['weight']:g}: geometric mean {best['geomean']:.4f} (at "
                            f"most {max_geomean:g}), worst row {best['worst']:.4f} (at most "
                            f"{max_worse:g})")


def table_rows(rows: dict, by_row: dict, weights: tuple[float, ...]) -> list[list[str]]:
    """One line per (set, split): seeds, the mean at each weight, and each ratio."""
    out = []
    for key in sorted(rows):
        row = rows[key]
        out.append([*key, SETS[key[0]].metric, " ".join(map(str, sorted(row["seeds"]))),
                    *(f"{m:.4f}" for m in row["means"]), *(f"{r:.4f}" for r in by_row[key])])
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", nargs="+", type=Path, required=True,
                        help="molecules.py --report val --out folders holding saved runs")
    parser.add_argument("--max-geomean", type=float, default=0.995,
                        help="the rule's bound on the chosen weight's geometric mean ratio")
    parser.add_argument("--max-worse", type=float, default=1.01,
                        help="the rule's bound on the chosen weight's worst row ratio")
    parser.add_argument("--save", type=Path, help="write the per-run metrics and table (JSON)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    runs, records = [], []
    for folder in run_folders(args.runs):
        parts, metrics = load_parts(folder)
        check_record(parts, metrics, folder)
        runs.append(parts)
        records.append({"folder": str(folder), "set": parts.dataset, "split": parts.split,
                        "seed": parts.seed, "metrics": [metric(parts, w) for w in WEIGHTS]})
        print(f"reloaded {folder}: its recorded validation metrics reproduced", flush=True)
    rows = row_means(runs, WEIGHTS)
    by_row = ratios(rows, WEIGHTS)
    summaries = summary(by_row, WEIGHTS)
    header = ["set", "split", "metric", "seeds", *(f"w={w:g}" for w in WEIGHTS),
              *(f"ratio w={w:g}" for w in WEIGHTS)]
    print_table(header, table_rows(rows, by_row, WEIGHTS), markdown=True)
    print()
    print_table(["weight of the network", "geometric mean ratio", "worst row ratio"],
                [[f"{s['weight']:g}", f"{s['geomean']:.4f}", f"{s['worst']:.4f}"]
                 for s in summaries], markdown=True)
    chosen, why = verdict(summaries, args.max_geomean, args.max_worse)
    print(f"\nthe rule picks {chosen:g}: {why}")
    if args.save:
        args.save.write_text(json.dumps({"weights": WEIGHTS, "runs": records,
                                         "summary": summaries, "chosen": chosen}, indent=1))


if __name__ == "__main__":
    main()
