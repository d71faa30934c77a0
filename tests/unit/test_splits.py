"""Splits: deterministic, disjoint, covering, sized as asked; scaffolds never cross parts."""

from __future__ import annotations

import csv

import pytest

from setattn.datasets import DATASETS_DIR
from setattn.molprop import splits

SIZES = (0.8, 0.1, 0.1)


@pytest.fixture(scope="module")
def esol_smiles() -> list[str]:
    with open(DATASETS_DIR / "molecules" / "delaney-processed.csv", newline="") as handle:
        return [row["smiles"].strip() for row in csv.DictReader(handle)][:300]


def _check_partition(parts, n):
    flat = [i for part in parts for i in part]
    assert sorted(flat) == list(range(n))  # disjoint and covering
    assert all(isinstance(i, int) for i in flat)


@pytest.mark.parametrize("n", [10, 37, 101])
def test_random_sizes_partition_and_determinism(n):
    train, val, test = splits.random(n, SIZES, seed=3)
    _check_partition((train, val, test), n)
    assert len(train) == round(0.8 * n) and len(val) == round(0.1 * n)
    assert splits.random(n, SIZES, seed=3) == (train, val, test)
    assert splits.random(n, SIZES, seed=4) != (train, val, test)


def test_scaffold_groups_stay_together_and_big_groups_train(esol_smiles):
    n = len(esol_smiles)
    parts = splits.scaffold(esol_smiles, SIZES, seed=0)
    _check_partition(parts, n)
    assert parts == splits.scaffold(esol_smiles, SIZES, seed=0)
    scaffold_of = [splits.murcko_scaffold(s) for s in esol_smiles]
    owner = {}
    for p, part in enumerate(parts):
        for i in part:
            assert owner.setdefault(scaffold_of[i], p) == p  # one part per scaffold
    # groups bigger than half the validation part (here benzene and acyclic) go to train
    counts = {s: scaffold_of.count(s) for s in set(scaffold_of)}
    big = [s for s, c in counts.items() if c > 0.1 * n / 2]
    assert big and all(owner[s] == 0 for s in big)
    assert abs(len(parts[0]) - 0.8 * n) <= max(counts.values())


def test_scaffold_seed_changes_assignment(esol_smiles):
    assert splits.scaffold(esol_smiles, SIZES, 0) != splits.scaffold(esol_smiles, SIZES, 1)


def test_murcko_scaffold():
    assert splits.murcko_scaffold("CCc1ccccc1O") == "c1ccccc1"
    assert splits.murcko_scaffold("CCO") == ""
    assert splits.murcko_scaffold("not a smiles") == "not a smiles"


def test_kfold_test_parts_partition_the_data():
    n, sizes = 53, (0.6, 0.2, 0.2)
    k = splits.num_folds(sizes)
    assert k == 5
    tests = []
    for fold in range(k):
        train, val, test = splits.kfold(n, sizes, seed=7, fold=fold)
        _check_partition((train, val, test), n)
        assert abs(len(val) - len(train) / 3) <= 1  # val : train = 0.2 : 0.6
        tests += test
    assert sorted(tests) == list(range(n))
    assert splits.kfold(n, sizes, 7, 2) == splits.kfold(n, sizes, 7, 2)


@pytest.mark.parametrize("sizes", [(0.8, 0.2), (0.9, 0.2, 0.1), (1.0, 0.0, 0.0), (0.9, -0.1, 0.2)])
def test_bad_sizes_name_the_argument(sizes):
    with pytest.raises(ValueError, match="^split_sizes"):
        splits.random(10, sizes, 0)


def test_fold_out_of_range_names_the_argument():
    with pytest.raises(ValueError, match="^fold must be in"):
        splits.kfold(20, SIZES, 0, fold=10)


def test_column_split_follows_the_labels_and_names_a_bad_one():
    labels = ["train", " Val ", "TEST", "train", "val"]
    assert splits.column(labels, [0, 1, 2, 3, 4], "f.csv: column 'split'") == \
        ([0, 3], [1, 4], [2])
    assert splits.column(["train", "val"], [0, 1], "x") == ([0], [1], [])
    with pytest.raises(ValueError, match=r"^f.csv: column 'split': row 7: 'valid' is not "
                                         r"train, val or test$"):
        splits.column(["train", "valid"], [3, 7], "f.csv: column 'split'")
