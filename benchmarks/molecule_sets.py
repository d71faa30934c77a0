"""The data sets of the molecule benchmark and the split files both tools are given.

Each set is read from ``datasets/`` (provenance in ``datasets/README.md``); rows whose
SMILES RDKit cannot parse are dropped (chemprop stops at the first such row; Tox21 has
8). Huuskonen's two SD files (train + test) are merged into one set: the canonical
SMILES of each record and its ``SOL`` property.

A split is a column of ``train`` / ``val`` / ``test`` labels made by
``setattn.molprop.splits.random`` or ``.scaffold`` (80/10/10), and every tool reads the
same CSV with that column (setattn ``--split column``, chemprop ``--splits-column``).
With ``report="test"`` one CSV per set holds all rows and one column per (split kind,
seed). With ``report="val"`` each (split kind, seed) has its own CSV that leaves the test
part out entirely and holds the validation rows twice, once labelled ``val`` and once
``test``: each tool's "test" predictions are then its predictions on the validation
molecules, and no tool ever sees a test molecule.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from rdkit import Chem, rdBase
from tqdm import tqdm

from setattn.domains.descriptors import descriptor_count
from setattn.molprop import splits
from setattn.molprop.featurize import featurize

__all__ = ["SETS", "SIZES", "SPLIT_KINDS", "DataSet", "MoleculeTable", "column_name",
           "huuskonen", "load_set", "split_labels", "val_table", "write_csv"]

ROOT = Path(__file__).resolve().parents[1]
SIZES = (0.8, 0.1, 0.1)
SPLIT_KINDS = ("random", "scaffold")

TOX21_TASKS = ("NR-AR", "NR-AR-LBD", "NR-AhR", "NR-Aromatase", "NR-ER", "NR-ER-LBD",
               "NR-PPAR-gamma", "SR-ARE", "SR-ATAD5", "SR-HSE", "SR-MMP", "SR-p53")


@dataclass(frozen=True)
class DataSet:
    """One benchmark set: where it is, its targets, task and reported metric."""

    file: str  # under datasets/ ("" for huuskonen, read from its two SD files)
    targets: tuple[str, ...]
    task: str  # "regression" or "classification"
    metric: str  # "rmse" (lower is better) or "roc_auc" (higher is better)
    label: str  # the metric as the table names it


SETS: dict[str, DataSet] = {
    "freesolv": DataSet("molecules/freesolv.csv", ("expt",), "regression", "rmse",
                        "RMSE (kcal/mol)"),
    "esol": DataSet("molecules/delaney-processed.csv",
                    ("measured log solubility in mols per litre",), "regression", "rmse",
                    "RMSE (log mol/L)"),
    "tox21": DataSet("molecules/tox21.csv", TOX21_TASKS, "classification", "roc_auc",
                     "mean ROC-AUC"),
    "huuskonen": DataSet("", ("SOL",), "regression", "rmse", "RMSE (log mol/L)"),
    "bace1": DataSet("molecules/bace1_chembl.csv", ("pIC50",), "regression", "rmse",
                     "RMSE (pIC50)"),
    "bace1_active": DataSet("molecules/bace1_chembl.csv", ("active",), "classification",
                            "roc_auc", "ROC-AUC"),
}


@dataclass
class MoleculeTable:
    """Parsable rows of a set: SMILES and target cells (text, "" if missing)."""

    smiles: list[str]
    cells: list[list[str]]  # (M, T) as written in the source

    def targets(self) -> np.ndarray:
        """The (M, T) targets as floats, NaN where missing."""
        return np.array([[float(c) if c != "" else np.nan for c in row] for row in self.cells],
                        dtype=np.float64).reshape(len(self.cells), -1)


def huuskonen(root: Path = ROOT / "datasets") -> MoleculeTable:
    """Huuskonen's train and test SD files merged (train first): SMILES and ``SOL``."""
    smiles, cells = [], []
    for part in ("train", "test"):
        path = root / "molecules" / f"solubility.{part}.sdf"
        with rdBase.BlockLogs():
            for mol in Chem.SDMolSupplier(str(path)):
                if mol is None or not mol.HasProp("SOL"):
                    continue
                smiles.append(Chem.MolToSmiles(mol))
                cells.append([mol.GetProp("SOL").strip()])
    return MoleculeTable(smiles, cells)


def load_set(name: str, root: Path = ROOT / "datasets") -> MoleculeTable:
    """The rows of set ``name`` whose SMILES RDKit parses.

    Raises:
        KeyError: naming a set that is not in ``SETS``.
        ValueError: naming the file if a target column is missing.
    """
    spec = SETS[name]
    if not spec.file:
        return huuskonen(root)
    path = root / spec.file
    with open(path, newline="") as handle:
        reader = csv.DictReader(handle)
        missing = [c for c in ("smiles", *spec.targets) if c not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(f"{path}: no column {missing[0]!r}")
        rows = list(reader)
    with rdBase.BlockLogs():
        kept = [r for r in rows if r["smiles"] and Chem.MolFromSmiles(r["smiles"]) is not None]
    return MoleculeTable([r["smiles"] for r in kept],
                         [[r[t].strip() for t in spec.targets] for r in kept])


def split_labels(kind: str, smiles: list[str], seed: int) -> list[str]:
    """One of ``train`` / ``val`` / ``test`` per molecule, for split ``kind`` and ``seed``.

    Raises:
        ValueError: naming ``--splits`` for a kind other than random or scaffold.
    """
    if kind == "random":
        parts = splits.random(len(smiles), SIZES, seed)
    elif kind == "scaffold":
        parts = splits.scaffold(smiles, SIZES, seed)
    else:
        raise ValueError(f"argument --splits: {kind!r} is not one of {list(SPLIT_KINDS)}")
    labels = [""] * len(smiles)
    for name, part in zip(splits.PARTS, parts):
        for i in part:
            labels[i] = name
    return labels


REPORT_SEEDS = range(10, 15)  # the report's split seeds, which no choice may look at


def report_seeds_among(seeds: list[int]) -> str | None:
    """An argument error naming the report seeds among ``seeds`` (None: there are none),
    for scripts that serve development choices."""
    report = sorted(set(seeds) & set(REPORT_SEEDS))
    return (f"argument --seeds: {report} are report seeds, which no choice may look at; use "
            f"development seeds (20-22)") if report else None


def descriptors_of(smiles: list[str], cache: dict[str, torch.Tensor]) -> torch.Tensor:
    """(N, F) RDKit descriptors of the molecules, each computed once per process."""
    width = descriptor_count()
    for s in tqdm([s for s in smiles if s not in cache], desc="descriptors", unit="mol",
                  leave=False, disable=None):
        cache[s] = featurize(s, width).descriptors
    return torch.cat([cache[s] for s in smiles])  # (N, F)


def column_name(kind: str, seed: int) -> str:
    """The split column of (kind, seed), e.g. ``random10``."""
    return f"{kind}{seed}"


def val_table(table: MoleculeTable, labels: list[str]) -> tuple[MoleculeTable, list[str]]:
    """The validation-report table of one split: its training and validation rows in
    file order, then the validation rows again; and their labels (the copies ``test``).
    The test rows are left out."""
    keep = [i for i, label in enumerate(labels) if label in ("train", "val")]
    again = [i for i, label in enumerate(labels) if label == "val"]
    order = keep + again
    new = MoleculeTable([table.smiles[i] for i in order], [table.cells[i] for i in order])
    return new, [labels[i] for i in keep] + ["test"] * len(again)


def write_csv(path: Path, table: MoleculeTable, targets: tuple[str, ...],
              columns: dict[str, list[str]]) -> Path:
    """Write ``smiles``, the target columns and the split ``columns`` (name -> labels)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["smiles", *targets, *columns])
        for i, (smi, cells) in enumerate(zip(table.smiles, table.cells)):
            writer.writerow([smi, *cells, *[labels[i] for labels in columns.values()]])
    return path
