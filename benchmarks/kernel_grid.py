"""Which search grid of the kernel ridge makes the best blend on validation parts?

``KernelRidge.fit`` chooses its kernel's width and its ridge by exact leave-one-out
error over a grid (``setattn.molprop.kernel.GRID`` and ``RIDGES``). This script reloads
the ensembles that ``benchmarks/molecules.py --report val`` saved in its ``--out``
folders, fits the kernel ridge again on each run's training part with every candidate
grid (as ``setattn train`` fits it: standardised targets for regression, 0/1 labels for
classification, the capped search, 1 thread), and blends each with the run's own saved
networks at the run's weight. It checks that the refit with the saved runs' grid
("today") reproduces the saved kernel ridge's validation scores and that the saved
blend reproduces the recorded validation metric. The attention network does not
depend on the kernel ridge (it trains on its own outputs), so the networks need no
retraining.

It prints per (set, split) the mean validation metric of the blend over seeds for each
grid, the ratio of each to today's (below 1 is better, for RMSE and ROC-AUC alike), and
per grid the geometric mean and worst ratio over the rows and the geometric mean ratio
of the fit's seconds. Reads no test molecule; report seeds are refused. The
development rule it serves: ``results/molecules_dev.md``, "The kernel ridge's grid on
validation parts".

    python benchmarks/kernel_grid.py --runs runs/dev_cov_a runs/dev_cov_b --save a.json
    python benchmarks/kernel_grid.py --load a.json b.json     # the table of both
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import statistics
from dataclasses import replace
from pathlib import Path

import torch
from blend_weight import check_record, load_parts, metric
from kernel_rescore import part_data
from molecule_sets import SETS
from recalibrate import open_run, run_folders
from util import print_table

from setattn.molprop.batching import batches
from setattn.molprop.kernel import GAMMAS, LAPLACIAN, LAPLACIAN_GAMMAS, RBF, RIDGES, KernelRidge
from setattn.molprop.run import fit_kernel

WIDER_GAMMAS = (*GAMMAS, 2.0)
WIDER_RIDGES = (*RIDGES, 0.3, 1.0)
CANDIDATES = {
    "today": (((RBF, GAMMAS),), RIDGES),
    "wider": (((RBF, WIDER_GAMMAS),), WIDER_RIDGES),
    "rbf or laplacian": (((RBF, GAMMAS), (LAPLACIAN, LAPLACIAN_GAMMAS)), RIDGES),
    "both": (((RBF, WIDER_GAMMAS), (LAPLACIAN, LAPLACIAN_GAMMAS)), WIDER_RIDGES),
}
"""Name -> (grid, ridges) of ``KernelRidge.fit``. "today" is the grid the saved
development runs were fitted with (the default before session 25, RBF only); the rule
made "rbf or laplacian" the library's default."""
BASELINE = "today"
TOLERANCE = 1e-5
"""Largest difference (relative to the largest score, at least 1) between the float64
forward passes of the saved kernel ridge and of today's grid's refit on the validation
part. (A refit's buffers differ from the saved ones in the last float32 bit, which the
float32 forward pass, a sum over thousands of weighted kernel values, turns into up to
1e-4 on BACE1; the float64 pass keeps them about 2.5e-7 apart.)"""


def refit(folder: Path, candidates: dict = CANDIDATES) -> dict:
    """One saved run's record: per candidate grid, the validation metric of the blend and
    of the kernel ridge alone, the choice and the fit's seconds.

    Raises:
        SystemExit: naming the folder where the saved blend or today's refit does not
            reproduce the run (see ``TOLERANCE``), or for a report seed (``load_parts``).
    """
    parts, metrics = load_parts(folder)
    check_record(parts, metrics, folder)
    run = open_run(folder)
    first = run.models[0]
    train = part_data(run, run.split["train"])
    val = batches(part_data(run, run.split["val"]))
    weight = float(metrics["components"]["blend"])
    out = {"folder": str(folder), "set": parts.dataset, "split": parts.split,
           "seed": parts.seed, "blend": {}, "kernel_alone": {}, "choice": {}, "seconds": {}}
    for name, (grid, ridges) in candidates.items():
        kernel, info = fit_kernel(train, first.config, metrics["targets"], grid=grid,
                                  ridges=ridges)
        with torch.no_grad():
            scores = torch.cat([kernel(b.descriptors) for b in val])  # (M_val, T)
            alone = first.to_units(first.kernel_as_outputs(scores))  # (M_val, T)
        if name == BASELINE:
            _check_same(first.kernel, kernel, val, folder)
        swapped = replace(parts, kernel=alone.to(parts.kernel.dtype))
        out["blend"][name] = metric(swapped, weight)
        out["kernel_alone"][name] = metric(swapped, 0.0)
        out["choice"][name] = f"{info['kernel']} {info['gamma']:g} / {info['ridge']:g}"
        out["seconds"][name] = info["seconds"]
    return out


def _check_same(saved: KernelRidge, again: KernelRidge, val: list, folder: Path) -> None:
    """Raises SystemExit naming ``folder`` unless the two kernel ridges' float64 scores on
    the batches ``val`` agree within ``TOLERANCE``."""
    with torch.no_grad():
        a, b = (torch.cat([copy.deepcopy(k).double()(v.descriptors.double()) for v in val])
                for k in (saved, again))  # (M_val, T) each
    gap = float((a - b).abs().max())
    if gap > TOLERANCE * max(1.0, float(a.abs().max())):
        raise SystemExit(f"{folder}: the kernel ridge refitted with today's grid scores "
                         f"the validation part up to {gap:.3g} away from the saved one "
                         f"(float64)")


def _geomean(values: list[float]) -> float:
    return math.exp(statistics.fmean(map(math.log, values)))


def table(records: list[dict], names: list[str]) -> tuple[list[list[str]], list[dict]]:
    """Per (set, split): the mean validation metric of the blend over its seeds for each
    grid and each one's ratio to the baseline's (below 1 better). Per grid: the geometric
    mean and worst row ratio, and the geometric mean ratio of its fit seconds."""
    rows: dict[tuple[str, str], list[dict]] = {}
    for r in records:
        rows.setdefault((r["set"], r["split"]), []).append(r)
    lines, ratios = [], {n: [] for n in names}
    for key in sorted(rows):
        means = {n: statistics.fmean(r["blend"][n] for r in rows[key]) for n in names}
        higher = SETS[key[0]].metric == "roc_auc"
        row = {n: (means[BASELINE] / means[n] if higher else means[n] / means[BASELINE])
               for n in names}
        for n in names:
            ratios[n].append(row[n])
        seeds = " ".join(str(r["seed"]) for r in sorted(rows[key], key=lambda r: r["seed"]))
        lines.append([*key, SETS[key[0]].metric, seeds, *(f"{means[n]:.4f}" for n in names),
                      *(f"{row[n]:.4f}" for n in names)])
    summaries = [{"grid": n, "geomean": _geomean(ratios[n]), "worst": max(ratios[n]),
                  "seconds": _geomean([r["seconds"][n] / r["seconds"][BASELINE]
                                       for r in records])} for n in names]
    return lines, summaries


def verdict(summaries: list[dict], max_geomean: float, max_worse: float,
            max_seconds: float) -> tuple[str, str]:
    """The grid the rule picks: among the candidates whose fit seconds stay within
    ``max_seconds`` times today's, the least geometric mean's, if it is at most
    ``max_geomean`` and no row of it is above ``max_worse``; else today's."""
    allowed = [s for s in summaries if s["grid"] != BASELINE and s["seconds"] <= max_seconds]
    if not allowed:
        return BASELINE, f"no candidate fits within {max_seconds:g} times today's seconds"
    best = min(allowed, key=lambda s: s["geomean"])
    said = (f"{best['grid']!r} has the least geometric mean, {best['geomean']:.4f}, worst "
            f"row {best['worst']:.4f}")
    if best["geomean"] > max_geomean:
        return BASELINE, f"{said}: above the bound {max_geomean:g}"
    if best["worst"] > max_worse:
        return BASELINE, f"{said}: a row above {max_worse:g}"
    return best["grid"], f"{said} (bounds {max_geomean:g}, {max_worse:g})"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", nargs="+", type=Path, default=[],
                        help="molecules.py --report val --out folders holding saved runs")
    parser.add_argument("--load", nargs="+", type=Path, default=[],
                        help="records saved by earlier calls (--save), judged with --runs'")
    parser.add_argument("--save", type=Path, help="write this call's per-run records (JSON)")
    parser.add_argument("--max-geomean", type=float, default=0.997)
    parser.add_argument("--max-worse", type=float, default=1.005)
    parser.add_argument("--max-seconds", type=float, default=3.0)
    args = parser.parse_args(argv)
    if not args.runs and not args.load:
        parser.error("give --runs, --load or both")
    torch.set_num_threads(1)
    records = [r for path in args.load for r in json.loads(path.read_text())]
    fresh = []
    for folder in run_folders(args.runs) if args.runs else []:
        fresh.append(refit(folder))
        print(f"{folder}: saved blend reproduced; "
              + ", ".join(f"{n} {v:.4f} ({fresh[-1]['choice'][n]})"
                          for n, v in fresh[-1]["blend"].items()), flush=True)
        if args.save:  # after every run: nothing computed is lost
            args.save.write_text(json.dumps(fresh, indent=1))
    names = list(CANDIDATES)
    lines, summaries = table(records + fresh, names)
    print_table(["set", "split", "metric", "seeds", *names, *(f"ratio {n}" for n in names)],
                lines, markdown=True)
    print()
    print_table(["grid", "geometric mean ratio", "worst row ratio", "fit seconds ratio"],
                [[s["grid"], f"{s['geomean']:.4f}", f"{s['worst']:.4f}",
                  f"{s['seconds']:.2f}"] for s in summaries], markdown=True)
    chosen, why = verdict(summaries, args.max_geomean, args.max_worse, args.max_seconds)
    print(f"\nthe rule picks {chosen!r}: {why}")


if __name__ == "__main__":
    main()
