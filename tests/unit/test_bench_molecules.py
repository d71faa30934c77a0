"""The molecule benchmark's pure parts: the split columns both tools read, the
validation-report CSV, the resumable results, the tables and the cost rounds in turn."""

from __future__ import annotations

import csv
import json
import multiprocessing
from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from setattn.datasets.files import read_column
from setattn.molprop import splits

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def store_run(*args, **kwargs):
    """``stored_runs.store_run``, imported from benchmarks/ when called."""
    import sys

    sys.path.insert(0, str(BENCH))
    try:
        from helpers import record as stored_runs
    finally:
        sys.path.remove(str(BENCH))
    return stored_runs.store_run(*args, **kwargs)


@pytest.fixture()
def bench(monkeypatch):
    """The benchmark's modules, importable from benchmarks/ for this test only."""
    monkeypatch.syspath_prepend(str(BENCH))
    import molecules
    from helpers import molecule_jobs

    return molecule_jobs, molecules


@pytest.fixture()
def cp(monkeypatch):
    """The chemprop runner, importable from benchmarks/ for this test only."""
    monkeypatch.syspath_prepend(str(BENCH))
    from helpers import chemprop_runs
    return chemprop_runs


def _chemprop_parts(path: Path, column: str) -> tuple[list[int], list[int], list[int]]:
    """The row indices chemprop 2.3.1 takes for each part: rows grouped by the lower-cased
    label of ``--splits-column`` (``chemprop/cli/train.py``)."""
    groups = defaultdict(list)
    with open(path, newline="") as handle:
        for i, row in enumerate(csv.DictReader(handle)):
            groups[row[column].lower()].append(i)
    return groups["train"], groups["val"], groups["test"]


@pytest.mark.parametrize("kind", ["random", "scaffold"])
def test_split_column_gives_both_tools_the_same_disjoint_covering_parts(bench, tmp_path, kind):
    jobs, _ = bench
    table = jobs.load_set("freesolv")
    n = len(table.smiles)
    columns = {jobs.column_name(kind, s): jobs.split_labels(kind, table.smiles, s)
               for s in (20, 21)}
    path = jobs.write_csv(tmp_path / "data.csv", table, ("expt",), columns)
    for seed in (20, 21):
        column = jobs.column_name(kind, seed)
        ours = splits.column(read_column(path, column), list(range(n)), column)
        assert ours == _chemprop_parts(path, column)
        assert sorted(i for part in ours for i in part) == list(range(n))
        made = (splits.random(n, jobs.SIZES, seed) if kind == "random"
                else splits.scaffold(table.smiles, jobs.SIZES, seed))
        assert ours == tuple(sorted(part) for part in made)
    assert columns[f"{kind}20"] != columns[f"{kind}21"]
    with pytest.raises(ValueError, match="--splits"):
        jobs.split_labels("kfold", table.smiles, 20)


def test_huuskonen_merges_train_and_test_files(bench):
    jobs, _ = bench
    table = jobs.load_set("huuskonen")
    y = table.targets()
    assert y.shape == (1282, 1) and not np.isnan(y).any()
    assert table.smiles[0] == "CCCCC" and y[0, 0] == pytest.approx(-3.18)
    assert table.smiles[1025] == "CCC(C)CC" and y[1025, 0] == pytest.approx(-3.68)


def test_validation_report_leaves_the_test_part_out(bench):
    jobs, _ = bench
    table = jobs.MoleculeTable(["C", "CC", "CCC", "CCCC", "CCO"],
                               [["1"], ["2"], ["3"], [""], ["5"]])
    sub, new = jobs.val_table(table, ["train", "test", "val", "train", "val"])
    assert sub.smiles == ["C", "CCC", "CCCC", "CCO", "CCC", "CCO"]
    assert new == ["train", "val", "train", "val", "test", "test"]
    assert np.isnan(sub.targets()[2, 0]) and sub.targets()[4, 0] == 3.0


def _record(tool: str, seed: int, metric: float, dataset: str = "freesolv", **more) -> dict:
    return {"dataset": dataset, "split": "random", "seed": seed, "report": "test", "tool": tool,
            "flags": "", "result": {"metric": metric, "parameters": 10, "seconds": 1.0,
                                    "mol_per_s": 5.0, **more}}


def _save_many(store: str, dataset: str, seeds: list[int]) -> None:
    for seed in seeds:
        store_run("molecules", {"dataset": dataset, "seed": seed},
                  {"record": _record("setattn", seed, 1.0, dataset)}, Path(store))


def test_processes_storing_runs_at_once_keep_each_others_runs(bench, tmp_path):
    ctx = multiprocessing.get_context("fork")
    workers = [ctx.Process(target=_save_many, args=(str(tmp_path), name, list(range(40))))
               for name in ("freesolv", "esol", "tox21")]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=60)
    assert [w.exitcode for w in workers] == [0, 0, 0]
    runs = [json.loads(p.read_text()) for p in (tmp_path / "molecules").iterdir()]
    assert {(r["record"]["dataset"], r["record"]["seed"]) for r in runs} == {
        (name, seed) for name in ("freesolv", "esol", "tox21") for seed in range(40)}


def test_quality_table_names_the_best_mean_and_the_seed_wins(bench):
    _, molecules = bench
    records = [_record("setattn", 20, 1.0), _record("setattn", 21, 3.0),
               _record("chemprop", 20, 1.5), _record("chemprop", 21, 2.0),
               _record("chemprop_rdkit", 20, 1.8), _record("chemprop_rdkit", 21, 2.5)]
    (row,) = molecules.quality_table(records, "test")["rows"]
    assert row[4] == "2.000 +- 1.414" and row[7] == "1.750 +- 0.354"
    assert row[9:] == ["chemprop 2.3.1", "1/2"]
    auc = [_record(t, 20, m, "tox21") for t, m in (("setattn", 0.9), ("chemprop", 0.8))]
    (row,) = molecules.quality_table(auc, "test")["rows"]
    assert row[4] == "0.900" and row[9:] == ["setattn", "1/1"]


def test_interval_table_keeps_the_rows_with_intervals(bench):
    _, molecules = bench
    records = [_record("setattn", s, 1.0, coverage=c, spearman=0.5, mean_width=2.0,
                       test_molecules=n) for s, c, n in ((10, 0.875, 40), (11, 0.95, 60))]
    records.append(_record("setattn", 10, 0.9, "tox21"))
    row, pooled = molecules.interval_table(records)["rows"]
    # 35 + 57 of 100 molecules covered; an exact 90 % interval covers 84-95 of 100
    assert row == ["freesolv", "random", "92.0 %", "100", "84.0-95.0 %, in", "0.500", "2.000"]
    assert pooled[:5] == ["all rows", "", "92.0 %", "100", "84.0-95.0 %, in"]
    records[1]["result"]["coverage"] = 0.1
    assert molecules.interval_table(records)["rows"][0][4].endswith("OUT")
    del records[0]["result"]["test_molecules"]
    assert molecules.interval_table(records)["rows"][0][3:5] == ["-", "-"]


def test_each_tool_goes_first_in_turn(bench):
    _, molecules = bench
    assert [molecules._order(r)[0] for r in range(4)] == [
        "setattn", "chemprop_w96", "chemprop", "setattn"]
    assert all(sorted(molecules._order(r)) == sorted(molecules.ROUND_TOOLS) for r in range(4))


@pytest.mark.parametrize("stored", [False, True])
def test_an_untimed_warm_up_comes_before_the_first_timed_run(bench, monkeypatch, tmp_path,
                                                            stored):
    """The kernels' first compilation is never timed: one warm-up run precedes a call's
    first round run, and none is made when every round is stored already."""
    _, molecules = bench
    calls = []
    monkeypatch.setattr(molecules, "_columns", lambda name, kinds, seeds: ([], {}))
    monkeypatch.setattr(molecules, "write_csv", lambda *args: None)
    monkeypatch.setattr(molecules, "split_data",
                        lambda name, data, kind, seed, settings, columns: settings.round)
    monkeypatch.setattr(molecules, "stored_record",
                        lambda job, tool, settings: {"result": {"mol_per_s": 1.0}}
                        if stored or calls.count(("run", job, tool)) else None)
    monkeypatch.setattr(molecules, "warm_up",
                        lambda job, settings: calls.append(("warm", job)) or 1.0)
    monkeypatch.setattr(molecules, "run_job",
                        lambda job, tool, settings: None if stored
                        else calls.append(("run", job, tool)) or {})
    args = SimpleNamespace(rounds=2, out=tmp_path, threads=1, store=tmp_path)
    molecules.run_rounds("esol", "random", 10, args)
    if stored:
        assert calls == []
    else:
        assert calls[0] == ("warm", 0)
        assert [c for c in calls[1:] if c[0] == "warm"] == []
        assert len(calls) == 1 + 2 * len(molecules.ROUND_TOOLS)


def _round(ours: float, theirs: float, ours_s: float, default_s: float) -> dict:
    return {"setattn": {"result": {"mol_per_s": ours, "seconds": ours_s, "parameters": 7}},
            "chemprop_w96": {"result": {"mol_per_s": theirs, "seconds": 1.0}},
            "chemprop": {"result": {"mol_per_s": 1.0, "seconds": default_s}}}


def test_cost_ratios_are_medians_of_the_rounds_ratios(bench):
    _, molecules = bench
    # throughput ratios 3.0, 1.0, 2.0: median 2.0, where the ratio of the medians is
    # 3000 / 1000 = 3.0; wall-time ratios 2.0, 0.5, 1.5: median 1.5
    rounds = [_round(3000.0, 1000.0, 10.0, 20.0), _round(1000.0, 1000.0, 40.0, 20.0),
              _round(6000.0, 3000.0, 20.0, 30.0)]
    row = molecules.round_row("esol", "random", 10, rounds)
    assert row[:5] == ["esol", "random", "10", "3", "7"]
    assert row[5:10] == ["3000", "1000", "2.00x", "1.00x to 3.00x", "-"]
    assert row[10:] == ["20", "20", "1.50x", "0.50x to 2.00x"]
    for r in rounds:  # the whole run, featurising counted: setattn 2x, 0.5x, 1x as fast
        for tool, s in (("setattn", r["setattn"]["result"]["seconds"]), ("chemprop_w96", 20.0)):
            r[tool]["result"]["mol_per_s_all"] = 1000.0 / s
    assert molecules.round_row("esol", "random", 10, rounds)[9] == "1.00x"
    rounds[1]["setattn"]["result"]["mol_per_s_all"] = 200.0  # 4x: ratios 2, 4, 1
    assert molecules.round_row("esol", "random", 10, rounds)[9] == "2.00x"


def test_saved_rounds_need_all_three_tools_at_their_own_flags(bench, cp, tmp_path):
    _, molecules = bench
    wide = " ".join(cp.ANCHORS["chemprop_w96"])
    full = [dict(_record("setattn", 10, 1.0)),
            {**_record("chemprop", 10, 2.0), "flags": "--ensemble-size 3"},
            {**_record("chemprop_w96", 10, 2.0), "flags": wide + " --ensemble-size 3"}]
    partial = full[:2] + [_record("chemprop_w96", 10, 2.0)]  # w96 without its flags
    for r, records in enumerate([full, partial, full]):
        for record in records:
            store_run("molecules_rounds", {"round": r, "tool": record["tool"],
                                           "flags": record["flags"], "setattn": "lib1"},
                      {"record": record}, tmp_path)
    rounds = molecules.load_rounds(tmp_path, library="lib1")
    assert list(rounds) == [("freesolv", "random", 10)]
    assert len(rounds["freesolv", "random", 10]) == 2
    assert molecules.load_rounds(tmp_path, ["esol"], library="lib1") == {}


def test_rounds_of_another_setattn_library_are_left_out(bench, cp, tmp_path):
    """A round times the three tools together: rounds timed at another library (or
    stored without one) are not this library's cost."""
    _, molecules = bench
    wide = " ".join(cp.ANCHORS["chemprop_w96"])
    records = [dict(_record("setattn", 10, 1.0)),
               {**_record("chemprop", 10, 2.0), "flags": "--ensemble-size 3"},
               {**_record("chemprop_w96", 10, 2.0), "flags": wide + " --ensemble-size 3"}]
    for r, library in enumerate(["old", None, "new"]):
        for record in records:
            material = {"round": r, "tool": record["tool"], "flags": record["flags"]}
            if library is not None:
                material["setattn"] = library
            store_run("molecules_rounds", material, {"record": record}, tmp_path)
    assert len(molecules.load_rounds(tmp_path, library="new")["freesolv", "random", 10]) == 1
    assert molecules.load_rounds(tmp_path, library="other") == {}


def test_a_rounds_key_names_the_setattn_library_for_every_tool(bench, monkeypatch, tmp_path):
    """Every tool's run in a cost round is keyed with the setattn library it was timed
    beside, so that a new library times the anchors anew instead of reusing them."""
    jobs, _ = bench
    monkeypatch.setattr(jobs, "_set_digest", lambda name: "data")
    monkeypatch.setattr(jobs, "rows_digest", lambda smiles, labels: "rows")
    job = jobs.Job("esol", "random", 10, tmp_path / "data.csv", "random10", [],
                   table=SimpleNamespace(smiles=[]))
    keys = set()
    for tool in ("setattn", "chemprop", "chemprop_w96"):
        for library in ("a", "b"):
            settings = jobs.RunSettings(tmp_path, "test", 1, anchor_ensemble=3, round=0,
                                        library=library)
            kind, material = jobs.run_material(job, tool, settings)
            assert kind == "molecules_rounds" and material["setattn"] == library
            keys.add(json.dumps(material, sort_keys=True))
    assert len(keys) == 6  # no tool's round run is shared between the two libraries


def test_an_ensembles_one_kernel_part_is_counted_once(bench, monkeypatch):
    jobs, _ = bench
    import torch

    kernel = torch.nn.Module()
    kernel.descriptor = torch.nn.Module()
    kernel.descriptor.centres = torch.zeros(50, 8)
    kernel.descriptor.alpha = torch.zeros(50, 1)
    ensemble = torch.nn.Module()
    ensemble.kernel = kernel
    ensemble.networks = torch.nn.ModuleList([torch.nn.Linear(4, 1) for _ in range(3)])  # 5 each
    monkeypatch.setattr(jobs, "load_run", lambda run_dir: (ensemble, None))
    metrics = {"test": {"rmse": 1.0}, "models": [{"epochs_run": 7}] * 3, "train_seconds": 2.0,
               "split": {"train": 80, "val": 10, "test": 10}}
    result = jobs.setattn_result(metrics, Path("unused"), "rmse")
    assert result["kernel_numbers"] == 50 * 8 + 50
    assert result["parameters"] == 3 * 5 and result["epochs"] == 21


def test_setattn_featurises_with_the_tools_thread_count(bench, monkeypatch, tmp_path):
    """setattn's runs featurise in as many processes as each tool has threads, cache off."""
    jobs, _ = bench
    seen = {}

    def fake_timed(cmd, log, threads, **env):
        seen.update(env, threads=threads)
        raise RuntimeError("stop before training")

    monkeypatch.setattr(jobs, "timed", fake_timed)
    settings = jobs.RunSettings(tmp_path, "test", threads=1)
    job = jobs.Job("esol", "random", 10, tmp_path / "data.csv", "random10", [], table=None)
    with pytest.raises(RuntimeError, match="stop before training"):
        jobs._run_setattn(job, tmp_path / "run", settings)
    assert seen == {"threads": 1, "SETATTN_CACHE_DIR": "off", "SETATTN_FEATURIZE_WORKERS": "1"}


def test_the_warm_up_is_one_model_of_one_epoch_in_its_own_folder(bench, monkeypatch,
                                                                 tmp_path):
    jobs, _ = bench
    seen = {}

    def fake_timed(cmd, log, threads, **env):
        seen.update(cmd=cmd, log=log, env=env)
        return 2.0

    monkeypatch.setattr(jobs, "timed", fake_timed)
    settings = jobs.RunSettings(tmp_path, "test", threads=1, round=0,
                                setattn_flags=("--ensemble-size", "5"))
    job = jobs.Job("esol", "random", 10, tmp_path / "data.csv", "random10", [], table=None)
    assert jobs.warm_up(job, settings) == 2.0
    cmd = seen["cmd"]
    assert cmd[-4:] == ["--epochs", "1", "--ensemble-size", "1"]  # the last flag wins
    assert cmd[cmd.index("--output-dir") + 1] == str(tmp_path / "warm-up" / "esol")
    assert seen["env"]["SETATTN_CACHE_DIR"] == "off"


def test_only_the_whole_benchmark_writes_the_maintained_record(bench, tmp_path):
    bench = bench[1]
    whole = bench.parse_args(["--out", str(tmp_path)])
    assert bench.record_path(whole) is None  # benchmarks/results/molecules.json
    for part in (["--datasets", "freesolv"], ["--seeds", "10"], ["--skip-chemprop"],
                 ["--splits", "random"], ["--setattn-flags", "--layers 2"]):
        args = bench.parse_args(["--out", str(tmp_path), *part])
        assert bench.record_path(args) == tmp_path / "molecules.json", part
    chosen = bench.parse_args(["--seeds", "10", "--record", str(tmp_path / "r.json")])
    assert bench.record_path(chosen) == tmp_path / "r.json"


def test_an_anchor_ensemble_is_the_mean_of_its_members(cp, tmp_path):
    jobs = cp
    for k, values in enumerate([(1.0, 3.0), (2.0, 5.0), (3.0, 10.0)]):
        folder = tmp_path / f"model_{k}"
        folder.mkdir()
        (folder / "test_predictions.csv").write_text(
            f"smiles,y\nCCO,{values[0]}\nCCN,{values[1]}\n")
    smiles, preds = jobs.read_predictions(tmp_path, ("y",), members=3)
    assert smiles == ["CCO", "CCN"] and preds.tolist() == [[2.0], [6.0]]
    with pytest.raises(FileNotFoundError, match="expected 1 test_predictions.csv, found 3"):
        jobs.read_predictions(tmp_path, ("y",))
    (tmp_path / "model_2" / "test_predictions.csv").write_text("smiles,y\nCCN,1\nCCO,2\n")
    with pytest.raises(ValueError, match="different molecules"):
        jobs.read_predictions(tmp_path, ("y",), members=3)


def test_anchors_train_as_many_models_as_setattn(bench, cp, monkeypatch, tmp_path):
    jobs, molecules = bench
    for flags, size in (("", 3), ("--ensemble-size 1", 1), ("--layers 2 --ensemble-size=5", 5)):
        settings = molecules.settings_of(molecules.parse_args(["--setattn-flags", flags]))
        assert settings.anchor_ensemble == size
        assert jobs.tool_flags("chemprop", settings).endswith(
            f"--ensemble-size {size}" if size > 1 else "")
    args = molecules.parse_args(["--anchor-ensemble-size", "2"])
    assert molecules.settings_of(args).anchor_ensemble == 2
    seen = {}

    def fake_timed(cmd, log, threads, **env):
        seen["cmd"] = cmd
        raise RuntimeError("stop before training")

    monkeypatch.setattr(cp, "timed", fake_timed)
    monkeypatch.setattr(cp, "ensure_chemprop", lambda: tmp_path / "python")
    with pytest.raises(RuntimeError, match="stop before training"):
        cp.run_chemprop(tmp_path / "d.csv", "random10", ("y",), "regression",
                          tmp_path / "run", 10, 1, [], members=3)
    assert seen["cmd"][-2:] == ["--ensemble-size", "3"]


def test_paired_comparison_counts_seeds_and_tests_the_differences(bench):
    _, molecules = bench

    def runs(values):
        return [{"seed": s, "result": {"metric": v}} for s, v in zip(range(10, 15), values)]

    ours, theirs = runs([0.5, 0.6, 0.7, 0.8, 0.9]), runs([0.6, 0.8, 0.6, 1.2, 1.4])
    mean, won, p = molecules.paired(ours, theirs, "rmse")
    assert (mean, won) == ("+0.220", "4/5") and 0.06 < float(p) < 0.2
    mean, won, _ = molecules.paired(ours, theirs, "roc_auc")
    assert (mean, won) == ("-0.220", "1/5")
    assert molecules.paired(ours, [], "rmse") == ["-", "-", "-"]


def test_the_chemprop_timing_wrapper_compiles_and_appends_a_line_per_member(cp, tmp_path):
    jobs = cp
    code = compile(jobs.CHEMPROP_TIMED, "chemprop_timed", "exec")  # a syntax error fails here
    assert "timed_fit" in code.co_names
    body = jobs.CHEMPROP_TIMED.split("def timed_fit")[1].split("return out")[0]
    assert 'open(os.environ["CHEMPROP_FIT_JSON"], "a")' in body and '"\\n"' in body


def test_summary_reads_the_cost_ratios_by_column(bench):
    _, molecules = bench
    cost = molecules.cost_table({})  # the columns, no rows
    row = ["freesolv", "random", "696", "2", "1", "10", "8", "1.25x", "-", "1.2x", "20", "82",
           "4.07x", "-"]
    cost = {**cost, "rows": [row, [*row[:7], "1.37x", *row[8:12], "7.20x", "-"]]}
    quality = {"columns": ["data set", "best mean"], "rows": [["freesolv", "setattn"]]}
    text = molecules.summary(quality, cost)
    assert "1.25x to 1.37x chemprop's" in text and "4.07x to 7.20x setattn's" in text
    assert "runs took" not in text  # no run given, no total


def test_summary_sums_setattns_run_seconds_alone(bench):
    _, molecules = bench
    records = [{"tool": "setattn", "result": {"seconds": 600.0}},
               {"tool": "setattn", "result": {"seconds": 300.0}},
               {"tool": "chemprop", "result": {"seconds": 9000.0}}]
    assert molecules.setattn_seconds(records) == (2, 900.0)
    quality = {"columns": ["data set", "best mean"], "rows": [["freesolv", "setattn"]]}
    text = molecules.summary(quality, molecules.cost_table({}), records)
    assert "setattn's 2 runs took 15 min on one core in all" in text
    rounds = [{"tool": "chemprop", "result": {"seconds": 1200.0}},
              {"tool": "setattn", "result": {"seconds": 60.0}}]
    text = molecules.summary(quality, molecules.cost_table({}), records, rounds)
    assert "The cost rounds' 2 runs (every tool's) took 21 min." in text
