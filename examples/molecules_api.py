"""Molecule property prediction from Python: FreeSolv with ``MoleculePredictor``.

    python examples/molecules_api.py --epochs 60 --out runs/freesolv-api

Trains with the command line's defaults (the run of ``setattn train --data
datasets/molecules/freesolv.csv --target-columns expt``: random 80/10/10 split, seed 0,
``--epochs`` as given), predicts three molecules (one of them unparsable), reads which
atoms the readout attended to in one, saves the run where ``setattn predict --model``
reads it (with ``--out``) and prints the test RMSE last.
"""

from __future__ import annotations

import argparse
import csv
from collections.abc import Sequence

from setattn.datasets import DATASETS_DIR
from setattn.molprop import MoleculePredictor

QUERIES = ["CCO", "c1ccccc1O", "not a molecule"]


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=60, help="training epochs (default: 60)")
    parser.add_argument("--seed", type=int, default=0, help="split and model seed (default: 0)")
    parser.add_argument("--out", help="save the run directory here")
    parser.add_argument("--quiet", action="store_true", help="no epoch lines")
    return parser.parse_args(argv)


def read_freesolv() -> tuple[list[str], list[float]]:
    """The SMILES and measured hydration free energies (kcal/mol) of FreeSolv."""
    with open(DATASETS_DIR / "molecules" / "freesolv.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    return [r["smiles"] for r in rows], [float(r["expt"]) for r in rows]


def main(argv: Sequence[str] | None = None) -> MoleculePredictor:
    args = parse_args(argv)
    smiles, y = read_freesolv()
    model = MoleculePredictor(epochs=args.epochs, seed=args.seed, verbose=not args.quiet)
    model.fit(smiles, y)
    for text, (value,) in zip(QUERIES, model.predict(QUERIES)):  # (3, 1), NaN row for the last
        print(f"{text}: predicted {value:.2f} kcal/mol")
    for index, text, reason in model.errors:
        print(f"query {index} ({text!r}) was not predicted: {reason}")
    contributions = model.explain("c1ccccc1O")  # (N,) kcal/mol per atom
    print(f"phenol: atom contributions {[round(float(c), 3) for c in contributions]} "
          f"kcal/mol (integrated gradients)")
    if args.out:
        print(f"run saved in {model.save(args.out)} (setattn predict --model {args.out} ...)")
    test = model.metrics["test"]
    print(f"FreeSolv test RMSE {test['rmse']:.3f} kcal/mol (MAE {test['mae']:.3f}, "
          f"{args.epochs} epochs, seed {args.seed})")
    return model


if __name__ == "__main__":
    main()
