"""``benchmarks/interval_rescore.py``: a saved run's intervals scored again at today's
interval step, everything else carried over; runs that are not the record's refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from molecule_runs import saved_bench_run

from setattn.molprop.checkpoint import load_run

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture()
def rescore(monkeypatch):
    """``benchmarks/interval_rescore.py``, importable for this test only."""
    monkeypatch.syspath_prepend(str(BENCH))
    import interval_rescore

    return interval_rescore


def _with_record(run: Path) -> dict:
    """The benchmark's record of ``run`` in ``results.json`` of its ``--out`` folder, with
    interval numbers that today's step does not give."""
    record = {"dataset": "freesolv", "split": "random", "seed": 20, "report": "val",
              "tool": "setattn", "flags": "", "metric_name": "rmse", "train": 36,
              "result": {"seconds": 50.0, "metric": 1.0, "coverage": 0.5, "spearman": -0.5,
                         "mean_width": 99.0, "mol_per_s": 7.0}}
    (run.parents[2] / "results.json").write_text(json.dumps([record]))
    return record


def test_the_intervals_are_scored_again_and_the_rest_carried_over(rescore, tmp_path):
    run = saved_bench_run(tmp_path, "random20")
    today = json.loads((run / "metrics.json").read_text())
    _with_record(run)
    old = {**today, "uncertainty": {"method": "an older interval step"}}
    (run / "metrics.json").write_text(json.dumps(old))
    record = rescore.rescore(run, tmp_path / "again")
    target = tmp_path / "again" / "freesolv" / "random20_val" / "setattn"
    new = json.loads((target / "metrics.json").read_text())
    assert new["uncertainty"] == today["uncertainty"]
    assert new["uncertainty"]["calibration"]["spread"] == "kernel"
    assert {k: new[k] for k in new if k != "uncertainty"} == \
        {k: old[k] for k in old if k != "uncertainty"}
    result = record["result"]
    assert result["coverage"] == today["uncertainty"]["test"]["coverage"]
    assert result["mean_width"] == pytest.approx(today["uncertainty"]["test"]["mean_width"])
    assert (result["seconds"], result["metric"], result["mol_per_s"]) == (50.0, 1.0, 7.0)
    assert record["interval_rescore"]["before"] == {"coverage": 0.5, "spearman": -0.5,
                                                    "mean_width": 99.0}
    models, _ = load_run(target)
    assert len(models) == 2 and models[0].kernel is not None


def test_a_run_whose_metric_differs_or_a_classification_run_is_refused(rescore, tmp_path):
    run = saved_bench_run(tmp_path, "random21")
    metrics = json.loads((run / "metrics.json").read_text())
    metrics["test"]["rmse"] += 0.01
    (run / "metrics.json").write_text(json.dumps(metrics))
    with pytest.raises(SystemExit, match="not the run's models or data"):
        rescore.rescore(run, tmp_path / "again")
    metrics["task"] = "classification"
    (run / "metrics.json").write_text(json.dumps(metrics))
    with pytest.raises(SystemExit, match="classification run has no prediction intervals"):
        rescore.rescore(run, tmp_path / "again")


def test_a_run_without_a_kernel_ridge_is_copied_as_saved(rescore, tmp_path):
    run = saved_bench_run(tmp_path, "random20", kernel="off")
    _with_record(run)
    record = rescore.rescore(run, tmp_path / "again")
    target = tmp_path / "again" / "freesolv" / "random20_val" / "setattn"
    assert record["interval_rescore"]["spread"] == "ensemble"
    for name in ("config.json", "split.json", "model_0/best.pt", "model_1/best.pt"):
        assert (target / name).read_bytes() == (run / name).read_bytes()
    assert json.loads((target / "metrics.json").read_text()) == \
        json.loads((run / "metrics.json").read_text())  # the same step: the same numbers
