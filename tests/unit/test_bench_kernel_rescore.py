"""``benchmarks/kernel_rescore.py``: a saved run scored again with its kernel ridge fitted
anew reproduces the run where nothing changed, and its folder reloads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from molecule_runs import saved_bench_run

from setattn.molprop.checkpoint import load_run

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture()
def rescore(monkeypatch):
    """``benchmarks/kernel_rescore.py``, importable for this test only."""
    monkeypatch.syspath_prepend(str(BENCH))
    import kernel_rescore

    return kernel_rescore


def _with_record(run: Path, seconds: float) -> dict:
    """The benchmark's record of ``run`` in ``results.json`` of its ``--out`` folder."""
    record = {"dataset": "freesolv", "split": "random", "seed": 20, "report": "val",
              "tool": "setattn", "flags": "", "metric_name": "rmse", "train": 36,
              "result": {"seconds": seconds}}
    (run.parents[2] / "results.json").write_text(json.dumps([record]))
    return record


def test_a_refit_at_todays_grid_reproduces_the_saved_run(rescore, tmp_path):
    run = saved_bench_run(tmp_path, "random20")
    _with_record(run, seconds=50.0)
    old = json.loads((run / "metrics.json").read_text())
    record = rescore.rescore(run, tmp_path / "again")
    target = tmp_path / "again" / "freesolv" / "random20_val" / "setattn"
    new = json.loads((target / "metrics.json").read_text())
    for key in ("test", "val"):
        assert new[key]["rmse"] == pytest.approx(old[key]["rmse"], rel=1e-5)
    for part in ("val", "test"):
        for name in ("attention", "kernel_ridge"):
            assert new["components"][part][name]["rmse"] == pytest.approx(
                old["components"][part][name]["rmse"], rel=1e-5)
    assert new["uncertainty"]["test"]["coverage"] == old["uncertainty"]["test"]["coverage"]
    assert [m["test"]["rmse"] for m in new["models"]] == pytest.approx(
        [m["test"]["rmse"] for m in old["models"]], rel=1e-5)
    assert new["models"][0]["epochs_run"] == old["models"][0]["epochs_run"]
    # the times: the saved ones with the kernel ridge's fit seconds replaced
    before = old["components"]["kernel"]["seconds"]
    after = new["components"]["kernel"]["seconds"]
    assert new["train_seconds"] == pytest.approx(old["train_seconds"] - before + after)
    assert record["result"]["seconds"] == pytest.approx(50.0 - before + after)
    assert record["result"]["metric"] == pytest.approx(new["test"]["rmse"])
    assert record["result"]["mol_per_s"] == pytest.approx(
        36 * record["result"]["epochs"] / new["train_seconds"])
    assert record["kernel_refit"]["choice"]["kernel"] == "rbf"
    # the written folder is a run that reloads, with its data file beside it
    models, _ = load_run(target)
    assert len(models) == 2 and models[0].kernel is not None
    assert (tmp_path / "again" / "freesolv" / "val_random20.csv").is_file()


def test_runs_without_a_kernel_ridge_or_a_record_are_refused(rescore, tmp_path):
    no_kernel = saved_bench_run(tmp_path / "a", "random21", kernel="off")
    with pytest.raises(SystemExit, match="no kernel ridge to fit again"):
        rescore.rescore(no_kernel, tmp_path / "a" / "again")
    unrecorded = saved_bench_run(tmp_path / "b", "random20")
    with pytest.raises(SystemExit, match="0 setattn records of it"):
        rescore.rescore(unrecorded, tmp_path / "b" / "again")
