"""``benchmarks/kernel_search_cap.py``: both fits of a split, and its refusals."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture()
def cap(monkeypatch):
    """``benchmarks/kernel_search_cap.py``, importable for this test only."""
    monkeypatch.syspath_prepend(str(BENCH))
    import kernel_search_cap

    return kernel_search_cap


def test_a_cap_above_the_training_part_fits_the_same_model_and_a_low_one_not(cap):
    table = cap.load_set("freesolv")
    smiles, cells = table.smiles[:160], table.cells[:160]
    x = cap.descriptors_of(smiles, {})  # (160, F)
    values = torch.tensor([[float(c[0])] for c in cells], dtype=torch.float64)  # (160, 1)
    same = cap.judge_split("freesolv", smiles, "random", 20, x, values, 1000)
    assert same["train"] == 128
    assert same["full"]["val"] == same["capped"]["val"] and not math.isnan(same["full"]["val"])
    assert (same["full"]["gamma"], same["full"]["ridge"]) == (same["capped"]["gamma"],
                                                              same["capped"]["ridge"])
    low = cap.judge_split("freesolv", smiles, "random", 20, x, values, 40)
    assert low["full"]["val"] == same["full"]["val"]  # the same full fit
    assert low["capped"]["loo_rmse"] != same["capped"]["loo_rmse"]  # searched on 40


def test_report_seeds_and_several_task_sets_are_refused(cap, capsys):
    with pytest.raises(SystemExit):
        cap.main(["--seeds", "11"])
    assert "[11] are report seeds" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cap.main(["--datasets", "tox21"])
    assert "one-task sets only" in capsys.readouterr().err
