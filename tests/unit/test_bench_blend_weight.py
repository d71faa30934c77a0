"""``benchmarks/blend_weight.py``: the blend at any weight, the record check, the rule."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from molecule_runs import saved_bench_run

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture()
def blend(monkeypatch):
    """``benchmarks/blend_weight.py``, importable for this test only."""
    monkeypatch.syspath_prepend(str(BENCH))
    import blend_weight

    return blend_weight


def _parts(blend, dataset: str, seed: int, y, network, kernel, task="regression"):
    t = lambda v: torch.tensor(v, dtype=torch.float64)[:, None]  # noqa: E731  (M, 1)
    return blend.Parts(dataset, "random", seed, task, t(y), t(network), t(kernel))


def test_the_metric_at_a_weight_is_the_weighted_blend(blend):
    parts = _parts(blend, "esol", 20, [0.0, 1.0, 2.0, 4.0], [1.0, 1.0, 1.0, 1.0],
                   [-1.0, 1.0, 3.0, 5.0])
    # w = 0.25: 0.25 * network + 0.75 * kernel = [-0.5, 1, 2.5, 4]: errors -0.5, 0, 0.5, 0
    assert blend.metric(parts, 0.25) == pytest.approx(math.sqrt(0.125))
    assert blend.metric(parts, 1.0) == pytest.approx(math.sqrt((1 + 0 + 1 + 9) / 4))
    assert blend.metric(parts, 0.0) == pytest.approx(math.sqrt(0.75))


def test_ratios_are_below_one_when_better_for_rmse_and_roc_auc(blend):
    weights = (0.3, 0.5, 0.7)
    rows = {("esol", "random"): {"means": [0.9, 1.0, 1.2]},
            ("bace1_active", "random"): {"means": [0.80, 0.90, 0.95]}}
    by_row = blend.ratios(rows, weights)
    assert by_row[("esol", "random")] == pytest.approx([0.9, 1.0, 1.2])
    assert by_row[("bace1_active", "random")] == pytest.approx([0.9 / 0.8, 1.0, 0.9 / 0.95])
    summaries = blend.summary(by_row, weights)
    assert summaries[0]["geomean"] == pytest.approx(math.sqrt(0.9 * 0.9 / 0.8))
    assert summaries[2]["worst"] == pytest.approx(1.2)


def test_the_rule_keeps_the_baseline_unless_a_weight_clears_both_bounds(blend):
    def s(w, g, worst):
        return {"weight": w, "geomean": g, "worst": worst}

    clear = [s(0.4, 0.990, 1.005), s(0.5, 1.0, 1.0), s(0.6, 1.001, 1.02)]
    assert blend.verdict(clear, 0.995, 1.01)[0] == 0.4
    assert blend.verdict([s(0.4, 0.997, 1.0), s(0.5, 1.0, 1.0)], 0.995, 1.01)[0] == 0.5
    too_bad = blend.verdict([s(0.4, 0.99, 1.02), s(0.5, 1.0, 1.0)], 0.995, 1.01)
    assert too_bad[0] == 0.5 and "a row at 1.0200" in too_bad[1]
    assert blend.verdict([s(0.4, 1.01, 1.0), s(0.5, 1.0, 1.0)], 0.995, 1.01)[0] == 0.5


def test_row_means_average_the_seeds_at_each_weight(blend):
    runs = [_parts(blend, "esol", 20, [0.0, 0.0], [1.0, 1.0], [0.0, 0.0]),
            _parts(blend, "esol", 21, [0.0, 0.0], [3.0, 3.0], [0.0, 0.0])]
    rows = blend.row_means(runs, (0.5, 1.0))
    assert rows[("esol", "random")]["seeds"] == [20, 21]
    assert rows[("esol", "random")]["means"] == pytest.approx([1.0, 2.0])


def test_a_saved_run_reloads_and_reproduces_its_record(blend, tmp_path):
    run = saved_bench_run(tmp_path, "random20")
    parts, metrics = blend.load_parts(run)
    assert (parts.dataset, parts.split, parts.seed) == ("freesolv", "random", 20)
    assert parts.y.shape == parts.network.shape == parts.kernel.shape == (12, 1)
    blend.check_record(parts, metrics, run)  # raises unless all three metrics reproduce
    metrics["val"]["rmse"] += 1e-3
    with pytest.raises(SystemExit, match=r"random20_val/setattn: reloaded validation rmse"):
        blend.check_record(parts, metrics, run)


def test_report_seeds_and_runs_without_a_kernel_ridge_are_refused(blend, tmp_path):
    with pytest.raises(SystemExit, match="split seed 10 is a report seed"):
        blend.load_parts(saved_bench_run(tmp_path / "a", "random10"))
    with pytest.raises(SystemExit, match="the run has no kernel ridge"):
        blend.load_parts(saved_bench_run(tmp_path / "b", "random21", kernel="off"))
