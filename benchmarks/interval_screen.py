"""Screen: what else could scale the 90 % intervals than the ensemble's spread?

Today's split conformal intervals are ``mean +- q * (std + floor)`` with ``std`` the
spread of the ensemble's members (``setattn.molprop.conformal``). The members share one
kernel ridge, so ``std`` sees only the networks' disagreement. This screen reloads saved
development runs (``benchmarks/molecules.py --report val``; validation molecules only,
report seeds refused) and compares other scales ``u`` in place of ``std`` (the floor stays
the mean of ``u``, so only the shape of ``u`` matters):

- ``std``: today's;
- ``disagree``: |network mean - kernel ridge|, the blend's two halves disagreeing;
- ``std+disagree``: both, each divided by its mean over the calibrating molecules;
- ``gp``: the kernel ridge's Gaussian-process posterior standard deviation
  ``sqrt(1 - k_x^T (K + lam I)^-1 k_x)`` on the standardised descriptors;
- ``std+gp``: both, each divided by its mean;
- ``kernel``: ``gp`` from at most ``CENTRES`` (2,000) of the kernel ridge's centres drawn
  at random (generator seed 0), the candidate of the development rule "What scales the
  90 % interval" (``results/molecules_dev.md``), which judges it against ``std`` alone
  (the other scales are printed for information).

For each it prints per (set, split) the Spearman correlation of |error| with ``u`` on
the validation part, and over ``--halves`` random halvings of the validation part (whole
scaffold groups on a scaffold split, as ``recalibrate.py``) the coverage of the
guaranteed rank and the mean interval width against today's. Trains nothing.

    python benchmarks/interval_screen.py --halves 200 --runs runs/dev_k9_small runs/dev_k9_bace1
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from collections import defaultdict
from pathlib import Path

import numpy as np
import torch
from molecule_sets import REPORT_SEEDS
from recalibrate import Part, _subset, halves, open_run, run_folders
from scipy.stats import spearmanr
from util import print_table

from setattn.molprop import conformal
from setattn.molprop.batching import batches
from setattn.molprop.featurize import featurize
from setattn.molprop.kernel import _distances
from setattn.molprop.predict import kernel_outputs, outputs

SCALES = ("std", "disagree", "std+disagree", "gp", "std+gp", "kernel")
CENTRES = 2000  # the candidate's most kernel ridge centres
BASELINE, CANDIDATE = "std", "kernel"
MIN_GAIN = 0.05  # the least gain of the mean Spearman correlation over the rows
MAX_WIDTH, MAX_ROW_WIDTH = 0.97, 1.03  # width ratios: geometric mean, worst row
MIN_COVER, MAX_EXTRA_MISS = 0.88, 0.002  # each row's coverage; mean |coverage - 90 %|


def _unit(values: torch.Tensor) -> torch.Tensor:
    return values / values.mean().clamp_min(1e-12)


def gp_std(kernel, descriptors: torch.Tensor, size: int | None = None) -> torch.Tensor:
    """(M,) the kernel ridge's GP posterior std at ``descriptors`` (M, F), from its saved
    centres (at most ``size`` of them drawn at random), kernel and ridge (one Cholesky
    factorisation of the training kernel)."""
    z = kernel._standardise(descriptors).double()  # (M, F)
    centres = kernel.centres.double()  # (N, F)
    if size is not None and len(centres) > size:
        pick = torch.randperm(len(centres), generator=torch.Generator().manual_seed(0))[:size]
        centres = centres[pick.sort().values]  # (size, F)
    f = centres.shape[1]
    gamma, ridge, norm = float(kernel.gamma), float(kernel.ridge), int(kernel.norm)
    train = torch.exp(-gamma / f * _distances(centres, centres, norm))  # (N, N)
    train += ridge * torch.eye(len(centres), dtype=train.dtype)
    chol = torch.linalg.cholesky(train)  # (N, N)
    cross = torch.exp(-gamma / f * _distances(z, centres, norm))  # (M, N)
    v = torch.linalg.solve_triangular(chol, cross.T, upper=False)  # (N, M)
    return (1 - v.square().sum(0)).clamp_min(1e-12).sqrt()  # (M,)


def screen_run(folder: Path) -> dict:
    """The validation part's targets, blend mean and every scale of one saved run."""
    run = open_run(folder)
    if run.seed in REPORT_SEEDS:
        raise SystemExit(f"{folder}: split seed {run.seed} is a report seed")
    rows = run.split["val"]
    first = run.models[0]
    data = [featurize(run.smiles[i], first.config.descriptor_dim, row=i, source=str(run.data))
            for i in rows]
    batched = batches(data)
    with torch.no_grad():
        nets = torch.stack([m.to_units(outputs(m, batched)) for m in run.models])  # (K, M, 1)
        kern = first.to_units(first.kernel_as_outputs(kernel_outputs(first, batched)))
        w = float(first.blend)
        members = w * nets + (1 - w) * kern  # (K, M, 1)
        mean, std = members.mean(0), members.std(0, correction=0)  # (M, 1) each
        descriptors = torch.cat([d.descriptors for d in data])  # (M, F)
        gp = gp_std(first.kernel, descriptors)[:, None].to(mean.dtype)  # (M, 1)
        capped = gp_std(first.kernel, descriptors, CENTRES)[:, None].to(mean.dtype)  # (M, 1)
    y = torch.from_numpy(run.y[rows]).to(mean.dtype)  # (M, 1)
    rmse = float((mean - y).square().mean().sqrt())
    recorded = run.metrics["val"]["rmse"]
    if abs(rmse - recorded) > 1e-5 * max(1.0, recorded):
        raise SystemExit(f"{folder}: reloaded validation RMSE {rmse:.6f}, record {recorded:.6f}")
    disagree = (nets.mean(0) - kern).abs()  # (M, 1)
    scales = {"std": std, "disagree": disagree, "std+disagree": _unit(std) + _unit(disagree),
              "gp": gp, "std+gp": _unit(std) + _unit(gp), "kernel": capped}
    return {"dataset": folder.parent.parent.name, "split": run.kind, "seed": run.seed,
            "smiles": [run.smiles[i] for i in rows], "y": y, "mean": mean, "scales": scales}


def evaluate(run: dict, repeats: int) -> dict:
    error = (run["y"] - run["mean"]).abs()[:, 0].numpy()
    out = {"spearman": {}, "coverage": {}, "width": {}}
    for name, u in run["scales"].items():
        out["spearman"][name] = float(spearmanr(error, u[:, 0].numpy()).statistic)
    rng = np.random.default_rng(0)
    covers: dict[str, list[float]] = defaultdict(list)
    widths: dict[str, list[float]] = defaultdict(list)
    for _ in range(repeats):
        probe = Part(run["smiles"], run["y"], run["mean"], run["scales"]["std"])
        a, b = halves(probe, run["split"], rng)
        for cal_rows, eval_rows in ((a, b), (b, a)):
            for name, u in run["scales"].items():
                part = Part(run["smiles"], run["y"], run["mean"], u)
                cal_part, eval_part = _subset(part, cal_rows), _subset(part, eval_rows)
                cal = conformal.calibrate(cal_part.y, cal_part.mean, cal_part.std)
                covers[name].append(conformal.coverage(eval_part.y, eval_part.mean,
                                                       eval_part.std, cal))
                lo, hi = conformal.bounds(eval_part.mean, eval_part.std, cal)
                widths[name].append(float((hi - lo).mean()))
    for name in run["scales"]:
        out["coverage"][name] = statistics.fmean(covers[name])
        out["width"][name] = statistics.fmean(w / s for w, s in zip(widths[name], widths["std"]))
    return out


def row_means(records: list[dict]) -> dict[tuple[str, str], dict]:
    """Per (set, split): its seeds, and the mean over them of each measure of each scale."""
    by_row: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in records:
        by_row[(r["dataset"], r["split"])].append(r)
    return {key: {"seeds": sorted(r["seed"] for r in rs),
                  **{what: {n: statistics.fmean(r[what][n] for r in rs) for n in SCALES}
                     for what in ("spearman", "coverage", "width")}}
            for key, rs in sorted(by_row.items())}


def verdict(rows: dict[tuple[str, str], dict]) -> tuple[bool, list[str]]:
    """The development rule's three conditions for ``CANDIDATE`` against ``BASELINE``."""
    def mean_of(what: str, name: str) -> float:
        return statistics.fmean(row[what][name] for row in rows.values())

    before, after = mean_of("spearman", BASELINE), mean_of("spearman", CANDIDATE)
    gain = after - before
    widths = [row["width"][CANDIDATE] for row in rows.values()]
    geomean = math.exp(statistics.fmean(math.log(w) for w in widths))
    covers = [row["coverage"][CANDIDATE] for row in rows.values()]
    miss = {n: statistics.fmean(abs(row["coverage"][n] - 0.9) for row in rows.values())
            for n in (BASELINE, CANDIDATE)}
    checks = [
        (gain >= MIN_GAIN, f"mean Spearman {before:.3f} -> {after:.3f}, gain {gain:+.3f} "
                           f"(at least {MIN_GAIN})"),
        (geomean <= MAX_WIDTH and max(widths) <= MAX_ROW_WIDTH,
         f"width ratio geometric mean {geomean:.3f} (at most {MAX_WIDTH}), worst row "
         f"{max(widths):.3f} (at most {MAX_ROW_WIDTH})"),
        (min(covers) >= MIN_COVER and miss[CANDIDATE] <= miss[BASELINE] + MAX_EXTRA_MISS,
         f"least row coverage {100 * min(covers):.1f}% (at least {100 * MIN_COVER:.0f}%), "
         f"mean |coverage - 90%| {100 * miss[CANDIDATE]:.2f} points against "
         f"{100 * miss[BASELINE]:.2f} (at most {100 * MAX_EXTRA_MISS:.1f} more)")]
    return all(ok for ok, _ in checks), [("holds: " if ok else "fails: ") + text
                                         for ok, text in checks]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", nargs="+", type=Path, default=[],
                        help="molecules.py --report val --out folders holding saved runs")
    parser.add_argument("--load", nargs="+", type=Path, default=[],
                        help="records saved by --save, read in place of (or beside) --runs")
    parser.add_argument("--halves", type=int, default=200)
    parser.add_argument("--save", type=Path)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    records = [r for path in args.load for r in json.loads(path.read_text())]
    for folder in run_folders(args.runs) if args.runs else []:
        run = screen_run(folder)
        result = evaluate(run, args.halves)
        records.append({"folder": str(folder), **{k: run[k] for k in ("dataset", "split", "seed")},
                        **result})
        print(folder, {k: round(v, 3) for k, v in result["spearman"].items()}, flush=True)
        if args.save:  # after every run: nothing computed is lost
            args.save.write_text(json.dumps(records, indent=1))
    if not records:
        raise SystemExit("nothing to judge: give --runs or --load")
    rows = row_means(records)
    for what in ("spearman", "coverage", "width"):
        print(f"\n{what}")
        print_table(["set", "split", "seeds", *SCALES],
                    [[s, k, " ".join(map(str, row["seeds"])),
                      *[f"{row[what][n]:.3f}" for n in SCALES]] for (s, k), row in rows.items()])
    adopted, lines = verdict(rows)
    print(f"\n{CANDIDATE} against {BASELINE}: " + ("the rule holds" if adopted else
                                                   "the rule does not hold"))
    for line in lines:
        print("  " + line)


if __name__ == "__main__":
    main()
