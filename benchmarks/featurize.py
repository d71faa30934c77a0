"""Molecule featurisation throughput: setattn ``mol_to_data`` vs PyG ``from_smiles``.

Run:  .venv/bin/python benchmarks/featurize.py [--repeats 5]

All 7831 Tox21 SMILES (datasets/molecules/tox21.csv), SMILES string -> ``Data``, one
molecule at a time, in this one process. The cases run in interleaved rounds (one
pass of each case per round, after a warm-up round) so that drifting load on a
shared machine hits them alike; the table gives the median pass time, molecules
per second, and the speed ratio against PyG (> 1: faster than PyG).

What each case builds:
  setattn bonds     59 one-hot atom + 14 one-hot bond features (float), bond edges
  setattn complete  59 atom features + (N*N,) topological distances, no edge list
  PyG from_smiles   9 integer atom + 3 integer bond columns (long), bond edges sorted
  RDKit parse only  Chem.MolFromSmiles alone: the floor both featurisers pay

The 8 Tox21 SMILES RDKit cannot parse raise ``InvalidSmilesError`` in setattn
(caught, as ``load_molecule_csv`` does) and give an empty graph in PyG.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

from rdkit import Chem, RDLogger
from torch_geometric.utils import from_smiles

sys.path.insert(0, str(Path(__file__).resolve().parent))
from util import print_table  # noqa: E402

from setattn.datasets import DATASETS_DIR  # noqa: E402
from setattn.domains.molecules import InvalidSmilesError, mol_to_data  # noqa: E402


def read_smiles() -> list[str]:
    with open(DATASETS_DIR / "molecules" / "tox21.csv", newline="") as handle:
        return [row["smiles"] for row in csv.DictReader(handle)]


def setattn_pass(smiles: list[str], graph: str) -> int:
    """Featurise every molecule; return how many gave a graph."""
    built = 0
    for s in smiles:
        try:
            mol_to_data(s, graph=graph)
        except InvalidSmilesError:
            continue
        built += 1
    return built


def pyg_pass(smiles: list[str]) -> int:
    return sum(1 for s in smiles if from_smiles(s).num_nodes > 0)


def parse_pass(smiles: list[str]) -> int:
    return sum(1 for s in smiles if Chem.MolFromSmiles(s) is not None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="timed rounds (median)")
    args = parser.parse_args()
    RDLogger.DisableLog("rdApp.*")  # PyG's from_smiles does the same; keep stderr quiet

    smiles = read_smiles()
    cases: dict[str, Callable[[], int]] = {
        "setattn bonds": lambda: setattn_pass(smiles, "bonds"),
        "setattn complete": lambda: setattn_pass(smiles, "complete"),
        "PyG from_smiles": lambda: pyg_pass(smiles),
        "RDKit parse only": lambda: parse_pass(smiles),
    }
    times: dict[str, list[float]] = {name: [] for name in cases}
    built: dict[str, int] = {name: fn() for name, fn in cases.items()}  # warm-up round
    for _ in range(args.repeats):
        for name, fn in cases.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)

    median = {name: statistics.median(t) for name, t in times.items()}
    pyg = median["PyG from_smiles"]
    rows = [
        [
            name,
            len(smiles),
            built[name],
            median[name],
            f"{len(smiles) / median[name]:,.0f}",
            f"{pyg / median[name]:.2f}x",
        ]
        for name in cases
    ]
    print(f"Tox21, {len(smiles)} SMILES, median of {args.repeats} interleaved rounds\n")
    print_table(["case", "molecules", "graphs", "seconds", "mol/s", "vs PyG"], rows)


if __name__ == "__main__":
    main()
