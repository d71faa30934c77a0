"""``benchmarks/interval_cost.py``: its row describes the run it timed; runs without a
kernel ridge are refused. (The seconds themselves are not tested.)"""

from __future__ import annotations

from pathlib import Path

import pytest
from molecule_runs import saved_bench_run

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture()
def cost(monkeypatch):
    """``benchmarks/interval_cost.py``, importable for this test only."""
    monkeypatch.syspath_prepend(str(BENCH))
    import interval_cost

    return interval_cost


def test_the_row_names_the_run_its_centres_and_molecules(cost, tmp_path):
    run = saved_bench_run(tmp_path, "random20")
    row = cost.measure(run, molecules=25, rounds=2)
    # 60 rows in the saved run, every fifth of them val or test: 36 training centres
    assert row[:3] == ["freesolv/random20_val", 36, 25]
    assert float(row[3]) >= 0 and row[6].endswith("x") and float(row[7]) >= 0
    with pytest.raises(SystemExit, match="no kernel ridge"):
        cost.measure(saved_bench_run(tmp_path / "off", "random21", kernel="off"), 5, 1)
