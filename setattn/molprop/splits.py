"""Train / validation / test splits of a data set, as lists of indices.

Every function is pure and deterministic given its ``seed``: the same inputs give
the same three index lists, on any machine.

- ``random(n, sizes, seed)``: a seeded permutation cut into three parts.
- ``scaffold(smiles, sizes, seed)``: molecules grouped by Bemis-Murcko scaffold,
  whole groups assigned to one part, balanced like chemprop's
  ``scaffold_balanced``: groups too big for the validation or test part go to
  training first, the rest follow in seeded random order.
- ``kfold(n, sizes, seed, fold)``: ``round(1 / test_fraction)`` seeded folds; fold
  ``fold`` is the test part and the validation part is drawn from the others.
- ``column(labels, rows, source)``: the parts a column of the data names, row by row
  (train, val or test); the test part may be empty.

``sizes`` are the three fractions (train, validation, test), e.g. (0.8, 0.1, 0.1).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np
from rdkit import Chem, rdBase
from rdkit.Chem.Scaffolds import MurckoScaffold

from setattn.molprop.config import SettingError, check_sizes

__all__ = ["PARTS", "column", "kfold", "murcko_scaffold", "num_folds", "random", "scaffold"]


Split = tuple[list[int], list[int], list[int]]

PARTS = ("train", "val", "test")
"""The labels of ``column``'s parts."""




def _counts(n: int, sizes: Sequence[float]) -> tuple[int, int]:
    """Train and validation counts for n items (test takes the rest)."""
    train, val, _ = check_sizes(sizes)
    n_train = int(round(train * n))
    n_val = int(round(val * n))
    return n_train, min(n_val, n - n_train)


def random(n: int, sizes: Sequence[float], seed: int) -> Split:
    """Seeded random split.

    Args:
        n: number of items.
        sizes: (train, validation, test) fractions.
        seed: random seed.

    Returns:
        (train, val, test) index lists, disjoint, covering ``range(n)``.
    """
    n_train, n_val = _counts(n, sizes)
    order = np.random.default_rng(seed).permutation(n).tolist()
    return order[:n_train], order[n_train : n_train + n_val], order[n_train + n_val :]


def murcko_scaffold(smiles: str) -> str:
    """The Bemis-Murcko scaffold SMILES of a molecule (chirality ignored).

    Acyclic molecules have the empty scaffold ``""``; an unparsable SMILES is its
    own group (its text is returned), so that it never merges with others.
    """
    with rdBase.BlockLogs():
        mol = Chem.MolFromSmiles(smiles)
    if mol is None:
        return smiles
    return MurckoScaffold.MurckoScaffoldSmiles(mol=mol, includeChirality=False)


def scaffold(smiles: Sequence[str], sizes: Sequence[float], seed: int) -> Split:
    """Balanced scaffold split (chemprop's ``scaffold_balanced``).

    Molecules sharing a Bemis-Murcko scaffold always land in the same part, so the
    test set holds scaffolds never seen in training. Groups larger than half the
    validation or the test part go first (in seeded order) and are put in training
    when they fit; the smaller groups follow in seeded random order, each going to
    training if it fits, else to validation if it fits, else to test.

    Args:
        smiles: one SMILES per item.
        sizes: (train, validation, test) fractions.
        seed: random seed (orders the groups).

    Returns:
        (train, val, test) index lists, disjoint, covering ``range(len(smiles))``.
    """
    n = len(smiles)
    n_train, n_val = _counts(n, sizes)
    n_test = n - n_train - n_val
    groups: dict[str, list[int]] = defaultdict(list)
    for index, text in enumerate(smiles):
        groups[murcko_scaffold(text)].append(index)
    sets = list(groups.values())  # first-seen order: deterministic before shuffling
    big = [s for s in sets if len(s) > n_val / 2 or len(s) > n_test / 2]
    small = [s for s in sets if not (len(s) > n_val / 2 or len(s) > n_test / 2)]
    rng = np.random.default_rng(seed)
    big = [big[k] for k in rng.permutation(len(big))]
    small = [small[k] for k in rng.permutation(len(small))]
    train: list[int] = []
    val: list[int] = []
    test: list[int] = []
    for group in big + small:
        if len(train) + len(group) <= n_train:
            train += group
        elif len(val) + len(group) <= n_val:
            val += group
        else:
            test += group
    return train, val, test


def num_folds(sizes: Sequence[float]) -> int:
    """Folds of a k-fold split: ``round(1 / test_fraction)``, at least 2."""
    _, _, test = check_sizes(sizes)
    return max(2, int(round(1.0 / test)))


def kfold(n: int, sizes: Sequence[float], seed: int, fold: int = 0) -> Split:
    """One fold of a seeded k-fold split, k = ``num_folds(sizes)``.

    The items are shuffled once (by ``seed``) and cut into k near-equal folds;
    fold ``fold`` is the test part. The validation part is taken from the other
    folds in proportion ``val / (train + val)``. Running folds 0 .. k - 1 with the
    same seed gives test parts that partition the data.

    Args:
        n: number of items.
        sizes: (train, validation, test) fractions; test sets k.
        seed: random seed.
        fold: which fold is the test part, 0 <= fold < k.

    Returns:
        (train, val, test) index lists, disjoint, covering ``range(n)``.

    Raises:
        ValueError: naming ``--fold`` if it is out of range.
    """
    k = num_folds(sizes)
    if not 0 <= fold < k:
        raise SettingError("fold", f"must be in 0..{k - 1} for {k} folds, got {fold}")
    train_frac, val_frac, _ = check_sizes(sizes)
    order = np.random.default_rng(seed).permutation(n)
    folds = np.array_split(order, k)
    test = folds[fold].tolist()
    rest = np.concatenate([f for j, f in enumerate(folds) if j != fold]).tolist()
    n_val = int(round(len(rest) * val_frac / (train_frac + val_frac)))
    return rest[n_val:], rest[:n_val], test


def column(labels: Sequence[str], rows: Sequence[int], source: str) -> Split:
    """The split a column of the data gives: item i goes to the part ``labels[i]`` names.

    Args:
        labels: one of "train", "val", "test" per item (case and surrounding spaces
            ignored).
        rows: each item's file row, for errors.
        source: what to name in errors, e.g. the file and column.

    Returns:
        (train, val, test) index lists in item order, disjoint, covering
        ``range(len(labels))``; any part may be empty.

    Raises:
        ValueError: naming ``source`` and the row of a label that is none of the three.
    """
    parts: Split = ([], [], [])
    for index, (label, row) in enumerate(zip(labels, rows)):
        name = label.strip().lower()
        if name not in PARTS:
            raise ValueError(f"{source}: row {row}: {label!r} is not train, val or test")
        parts[PARTS.index(name)].append(index)
    return parts
