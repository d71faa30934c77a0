"""``benchmarks/kernel_grid.py``: refits reproduce a saved run; the table and the rule."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from molecule_runs import saved_bench_run

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture()
def grid(monkeypatch):
    """``benchmarks/kernel_grid.py``, importable for this test only."""
    monkeypatch.syspath_prepend(str(BENCH))
    import kernel_grid

    return kernel_grid


def _record(dataset: str, split: str, seed: int, blend: dict, seconds: dict) -> dict:
    return {"set": dataset, "split": split, "seed": seed, "blend": blend, "seconds": seconds}


def test_the_table_averages_seeds_and_ratios_point_the_same_way(grid):
    names = ["today", "wider"]
    records = [
        _record("esol", "random", 20, {"today": 1.0, "wider": 0.9}, {"today": 1.0, "wider": 2.0}),
        _record("esol", "random", 21, {"today": 3.0, "wider": 2.7}, {"today": 2.0, "wider": 2.0}),
        _record("bace1_active", "random", 20, {"today": 0.90, "wider": 0.95},
                {"today": 1.0, "wider": 1.0}),
    ]
    lines, summaries = grid.table(records, names)
    assert lines[1][:4] == ["esol", "random", "rmse", "20 21"]
    assert lines[1][4:] == ["2.0000", "1.8000", "1.0000", "0.9000"]
    # ROC-AUC: today / candidate, so a higher ROC-AUC gives a ratio below 1
    assert float(lines[0][-1]) == pytest.approx(0.90 / 0.95, abs=1e-4)
    wider = summaries[1]
    assert wider["geomean"] == pytest.approx(math.sqrt(0.9 * 0.90 / 0.95))
    assert wider["worst"] == pytest.approx(0.90 / 0.95)
    assert wider["seconds"] == pytest.approx((2.0 * 1.0 * 1.0) ** (1 / 3))


def test_the_rule_needs_both_bounds_and_the_time_limit(grid):
    def s(name, g, worst, seconds=1.5):
        return {"grid": name, "geomean": g, "worst": worst, "seconds": seconds}

    base = s("today", 1.0, 1.0, 1.0)
    assert grid.verdict([base, s("wider", 0.99, 1.0), s("both", 0.995, 1.0)],
                        0.997, 1.005, 3.0)[0] == "wider"
    assert grid.verdict([base, s("wider", 0.998, 1.0)], 0.997, 1.005, 3.0)[0] == "today"
    worse = grid.verdict([base, s("wider", 0.99, 1.02)], 0.997, 1.005, 3.0)
    assert worse[0] == "today" and "a row above 1.005" in worse[1]
    # the fastest-gaining candidate is out when it costs too much; the next one is judged
    assert grid.verdict([base, s("both", 0.98, 1.0, 4.0), s("wider", 0.996, 1.0)],
                        0.997, 1.005, 3.0)[0] == "wider"


def test_a_refit_reproduces_the_saved_run_and_scores_every_grid(grid, tmp_path):
    run = saved_bench_run(tmp_path, "random20")
    record = grid.refit(run)
    assert (record["set"], record["split"], record["seed"]) == ("freesolv", "random", 20)
    metrics = json.loads((run / "metrics.json").read_text())
    # today's grid refits the saved kernel ridge, so its blend is the recorded metric
    assert record["blend"]["today"] == pytest.approx(metrics["val"]["rmse"], rel=1e-5)
    assert record["kernel_alone"]["today"] == pytest.approx(
        metrics["components"]["val"]["kernel_ridge"]["rmse"], rel=1e-5)
    assert set(record["blend"]) == set(grid.CANDIDATES)
    assert record["choice"]["today"].startswith("rbf ")


def test_a_changed_saved_kernel_is_named_by_folder(grid, tmp_path):
    from setattn.molprop.kernel import KernelRidge

    x, y = torch.randn(30, 8), torch.randn(30, 1)
    saved = KernelRidge(30, 8, 1)
    saved.fit(x, y)
    again = KernelRidge(30, 8, 1)
    again.load_state_dict(saved.state_dict())
    val = [SimpleNamespace(descriptors=torch.randn(5, 8)) for _ in range(2)]  # two batches
    grid._check_same(saved, again, val, tmp_path)
    again.alpha[0] += 0.1
    with pytest.raises(SystemExit, match="refitted with today's grid scores"):
        grid._check_same(saved, again, val, tmp_path)
    assert saved.alpha.dtype == torch.float32  # the check leaves both modules as they were


def test_report_seeds_are_refused(grid, tmp_path):
    with pytest.raises(SystemExit, match="split seed 10 is a report seed"):
        grid.refit(saved_bench_run(tmp_path, "random10"))
