"""Does capping the kernel ridge's leave-one-out search keep its validation quality?

``KernelRidge.fit(..., search_size=S)`` searches gamma and the ridge on at most S
labelled training molecules per task (drawn at random) and solves the chosen pair on all
of them; without it every molecule enters one eigendecomposition per gamma. This script
fits both ways on the training parts of development splits (the report's seeds 10-14
are refused), as ``setattn train`` fits its kernel ridge (standardised targets for
regression, 0/1 labels for classification, 1 thread), and prints per split the
validation metric of the kernel ridge alone (RMSE in the target's units, or ROC-AUC),
the choice and the fit seconds of each, and their ratios. The attention network does
not depend on the kernel ridge, so the kernel ridge is judged alone. The development
rule it serves: ``results/molecules_dev.md``, "The kernel ridge's search on at most
2,000 molecules".

    python benchmarks/kernel_search_cap.py --datasets bace1 bace1_active --save FILE
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from pathlib import Path

import torch
from molecule_sets import SETS, descriptors_of, load_set, report_seeds_among, split_labels
from util import print_table

from setattn.molprop.kernel import KernelRidge
from setattn.molprop.metrics import evaluate
from setattn.molprop.model import target_scaling


def fit_once(x: torch.Tensor, y: torch.Tensor, search_size: int | None
             ) -> tuple[KernelRidge, dict]:
    """A kernel ridge fitted to (M, F) descriptors and (M, 1) targets, and its choice
    with the fit's seconds."""
    kernel = KernelRidge(len(x), x.shape[1], 1)
    start = time.perf_counter()
    info = kernel.fit(x, y, search_size=search_size)
    return kernel, {**info, "seconds": time.perf_counter() - start}


def judge_split(name: str, smiles: list[str], kind: str, seed: int, x: torch.Tensor,
                values: torch.Tensor, cap: int) -> dict:
    """Both fits of one split and the validation metric of each.

    Args:
        smiles: the set's N molecules; x: (N, F) their descriptors; values: (N, 1) their
            targets (NaN: none).
    """
    labels = split_labels(kind, smiles, seed)
    labelled = [not math.isnan(v) for v in values[:, 0].tolist()]
    part = {p: torch.tensor([i for i, lab in enumerate(labels) if lab == p and labelled[i]])
            for p in ("train", "val")}
    task = SETS[name].task
    y = values[part["train"]]  # (M, 1)
    mean, std = target_scaling(y) if task == "regression" else (torch.zeros(1), torch.ones(1))
    record = {"set": name, "split": kind, "seed": seed, "train": len(y),
              "metric": SETS[name].metric}
    for label, size in (("full", None), ("capped", cap)):
        kernel, info = fit_once(x[part["train"]], (y - mean) / std, size)
        with torch.no_grad():
            pred = kernel(x[part["val"]]).double() * std + mean  # (V, 1) in target units
        metrics = evaluate(values[part["val"]], pred, task, [name], "validation part")
        record[label] = {**info, "val": metrics[SETS[name].metric]}
    return record


def rows_of(records: list[dict]) -> list[list[str]]:
    """One table row per split."""
    out = []
    for r in records:
        full, capped = r["full"], r["capped"]
        out.append([r["set"], r["split"], str(r["seed"]), f"{r['train']:,}", r["metric"],
                    f"{full['val']:.4f}", f"{capped['val']:.4f}",
                    f"{capped['val'] / full['val']:.4f}",
                    f"{full['gamma']:g} / {full['ridge']:g}",
                    f"{capped['gamma']:g} / {capped['ridge']:g}",
                    f"{full['seconds']:.1f}", f"{capped['seconds']:.1f}",
                    f"{capped['seconds'] / full['seconds']:.3f}"])
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--datasets", nargs="+", choices=sorted(SETS),
                        default=["bace1", "bace1_active"])
    parser.add_argument("--splits", nargs="+", choices=("random", "scaffold"),
                        default=["random", "scaffold"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[20, 21, 22])
    parser.add_argument("--search-size", type=int, default=2000, help="S of the capped fit")
    parser.add_argument("--save", type=Path, help="write the records as JSON")
    args = parser.parse_args(argv)
    refusal = report_seeds_among(args.seeds)
    if refusal:
        parser.error(refusal)
    if len({len(SETS[n].targets) for n in args.datasets} - {1}):
        parser.error("argument --datasets: one-task sets only (the kernel ridge of a "
                     "several-task run is off by default)")
    torch.set_num_threads(1)
    cache: dict[str, torch.Tensor] = {}
    records = []
    for name in args.datasets:
        table = load_set(name)
        x = descriptors_of(table.smiles, cache)  # (N, F)
        values = torch.tensor([[float(c[0]) if c[0] else math.nan] for c in table.cells],
                              dtype=torch.float64)  # (N, 1)
        for kind in args.splits:
            for seed in args.seeds:
                records.append(judge_split(name, table.smiles, kind, seed, x, values,
                                           args.search_size))
                print(" | ".join(rows_of(records[-1:])[0]), flush=True)
    header = ["set", "split", "seed", "training molecules", "metric", "full search",
              f"search on {args.search_size:,}", "ratio", "full: gamma / ridge",
              "capped: gamma / ridge", "full s", "capped s", "seconds ratio"]
    print_table(header, rows_of(records), markdown=True)
    for name in args.datasets:
        ratios = [r["capped"]["val"] / r["full"]["val"] for r in records if r["set"] == name]
        print(f"{name}: metric ratio geometric mean {statistics.geometric_mean(ratios):.4f}, "
              f"range {min(ratios):.4f}-{max(ratios):.4f}")
    seconds = [r["capped"]["seconds"] / r["full"]["seconds"] for r in records]
    print(f"fit seconds ratio, geometric mean over {len(seconds)} fits: "
          f"{statistics.geometric_mean(seconds):.3f}")
    if args.save:
        args.save.write_text(json.dumps(records, indent=1))


if __name__ == "__main__":
    main()
