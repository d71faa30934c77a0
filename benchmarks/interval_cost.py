"""What the kernel ridge's posterior std adds to the time of a prediction.

A regression run that blends a kernel ridge scales its prediction intervals by the
kernel ridge's posterior std (``KernelRidge.posterior_std``): per chunk of molecules, a
kernel against at most 2,000 training centres and one triangular solve, after one
Cholesky factor per run (of the first member's kernel ridge, which all members share),
computed once per process and kept. This script loads saved runs, takes
``--molecules`` SMILES from each run's data file and predicts them in one chunk as
``setattn predict`` does (featurisation, the ensemble's forward passes), once with the
ensemble's spread only and once with the posterior std too, alternating over
``--rounds`` rounds (the factor is computed before the first round, as a ``predict``
command computes it before its first chunk, and timed on its own). It prints per run the
median seconds of each and their ratio, and the median seconds of the posterior std
alone on the same molecules' descriptors (what the difference should be, without the
noise of two whole predictions).

    python benchmarks/interval_cost.py --runs runs/report9_a/bace1/random10/setattn \\
        runs/report9_a/freesolv/random10/setattn
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch
from recalibrate import open_run
from util import print_table

from setattn.molprop.conformal import ENSEMBLE, KERNEL
from setattn.molprop.featurize import featurize
from setattn.molprop.predict import predict_spread


def _seconds(models: list, smiles: list[str], kind: str) -> float:
    start = time.perf_counter()
    predict_spread(models, smiles, kind)
    return time.perf_counter() - start


def measure(folder: Path, molecules: int, rounds: int) -> list[object]:
    """One table row: the run, its kernel ridge's centres, the factor's seconds, the
    median seconds with the ensemble's spread and with the posterior std, their ratio."""
    run = open_run(folder)
    if run.models[0].kernel is None:
        raise SystemExit(f"{folder}: the run has no kernel ridge")
    smiles = [run.smiles[i] for i in range(min(molecules, len(run.smiles)))]
    kernel = run.models[0].kernel
    start = time.perf_counter()
    kernel.posterior_factor()
    factor = time.perf_counter() - start
    times: dict[str, list[float]] = {ENSEMBLE: [], KERNEL: [], "alone": []}
    descriptors = torch.cat([featurize(s, run.models[0].config.descriptor_dim).descriptors
                             for s in smiles])  # (M, F)
    for r in range(rounds):
        for kind in ((ENSEMBLE, KERNEL) if r % 2 == 0 else (KERNEL, ENSEMBLE)):
            times[kind].append(_seconds(run.models, smiles, kind))
        start = time.perf_counter()
        kernel.posterior_std(descriptors)
        times["alone"].append(time.perf_counter() - start)
    plain, scaled, alone = (statistics.median(times[k]) for k in (ENSEMBLE, KERNEL, "alone"))
    return [f"{folder.parent.parent.name}/{folder.parent.name}", len(kernel.centres),
            len(smiles), f"{factor:.2f}", f"{plain:.2f}", f"{scaled:.2f}",
            f"{scaled / plain:.3f}x", f"{alone:.3f}"]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", nargs="+", type=Path, required=True,
                        help="saved setattn run folders with a kernel ridge")
    parser.add_argument("--molecules", type=int, default=2000,
                        help="SMILES per prediction (one chunk of setattn predict)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    rows = [measure(folder, args.molecules, args.rounds) for folder in args.runs]
    print_table(["run", "kernel centres", "molecules", "factor s (once)", "spread only s",
                 "with posterior std s", "ratio", "posterior std alone s"], rows)


if __name__ == "__main__":
    main()
