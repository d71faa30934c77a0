"""The molecule benchmark's pure parts: its data sets, the split columns both tools read,
the validation-report CSV, the resumable results file and the table's win marks."""

from __future__ import annotations

import csv
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from setattn.datasets.files import read_column
from setattn.molprop import splits

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture()
def bench(monkeypatch):
    """The benchmark's modules, importable from benchmarks/ for this test only."""
    monkeypatch.syspath_prepend(str(BENCH))
    import molecule_jobs
    import molecule_sets
    import molecule_tables

    return molecule_sets, molecule_jobs, molecule_tables


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
    molecule_sets, _, _ = bench
    table = molecule_sets.load_set("freesolv")
    n = len(table.smiles)
    columns = {molecule_sets.column_name(kind, s): molecule_sets.split_labels(kind, table.smiles, s)
               for s in (20, 21)}
    path = molecule_sets.write_csv(tmp_path / "data.csv", table, ("expt",), columns)
    for seed in (20, 21):
        column = molecule_sets.column_name(kind, seed)
        labels = read_column(path, column)  # what setattn train --split column reads
        ours = splits.column(labels, list(range(n)), column)
        assert ours == _chemprop_parts(path, column)
        assert sorted(i for part in ours for i in part) == list(range(n))  # disjoint, covering
        made = (splits.random(n, molecule_sets.SIZES, seed) if kind == "random"
                else splits.scaffold(table.smiles, molecule_sets.SIZES, seed))
        assert ours == tuple(sorted(part) for part in made)
    assert columns["random20" if kind == "random" else "scaffold20"] != columns[
        f"{kind}21"]


def test_scaffold_split_keeps_each_scaffold_in_one_part(bench):
    molecule_sets, _, _ = bench
    table = molecule_sets.load_set("esol")
    labels = molecule_sets.split_labels("scaffold", table.smiles, 20)
    parts_of = defaultdict(set)
    for smi, label in zip(table.smiles, labels):
        parts_of[splits.murcko_scaffold(smi)].add(label)
    assert all(len(p) == 1 for p in parts_of.values())
    counts = {p: labels.count(p) for p in ("train", "val", "test")}
    assert counts["train"] == round(0.8 * len(labels)) and counts["val"] > 0 < counts["test"]
    with pytest.raises(ValueError, match="--splits"):
        molecule_sets.split_labels("kfold", table.smiles, 20)


def test_huuskonen_merges_train_and_test_files(bench):
    molecule_sets, _, _ = bench
    table = molecule_sets.load_set("huuskonen")
    assert len(table.smiles) == 1025 + 257
    y = table.targets()
    assert y.shape == (1282, 1) and not np.isnan(y).any()
    assert table.smiles[0] == "CCCCC" and y[0, 0] == pytest.approx(-3.18)  # train's first
    assert table.smiles[1025] == "CCC(C)CC" and y[1025, 0] == pytest.approx(-3.68)  # test's


def test_bace1_sets_read_one_file_and_drop_unparsable_rows(bench, tmp_path):
    molecule_sets, _, _ = bench
    (tmp_path / "molecules").mkdir()
    (tmp_path / "molecules" / "bace1_chembl.csv").write_text(
        "chembl_id,smiles,pIC50,active\nA,CCO,6.5,1\nB,C1CC,7.0,1\nC,c1ccccc1,4.25,0\n"
        "D,,5.0,0\n")
    reg = molecule_sets.load_set("bace1", tmp_path)
    cls = molecule_sets.load_set("bace1_active", tmp_path)
    assert reg.smiles == cls.smiles == ["CCO", "c1ccccc1"]  # unclosed ring and empty dropped
    assert reg.targets().tolist() == [[6.5], [4.25]] and cls.targets().tolist() == [[1.0], [0.0]]
    (tmp_path / "molecules" / "bace1_chembl.csv").write_text("smiles,pIC50\nCCO,1\n")
    with pytest.raises(ValueError, match="bace1_chembl.csv: no column 'active'"):
        molecule_sets.load_set("bace1_active", tmp_path)


def test_validation_report_leaves_the_test_part_out(bench):
    molecule_sets, _, _ = bench
    table = molecule_sets.MoleculeTable(["C", "CC", "CCC", "CCCC", "CCO"],
                                        [["1"], ["2"], ["3"], [""], ["5"]])
    labels = ["train", "test", "val", "train", "val"]
    sub, new = molecule_sets.val_table(table, labels)
    assert sub.smiles == ["C", "CCC", "CCCC", "CCO", "CCC", "CCO"]
    assert new == ["train", "val", "train", "val", "test", "test"]
    assert "CC" not in sub.smiles  # the test molecule is in no CSV
    assert np.isnan(sub.targets()[2, 0]) and sub.targets()[4, 0] == 3.0


def _record(tool: str, seed: int, metric: float, dataset: str = "freesolv") -> dict:
    return {"dataset": dataset, "split": "random", "seed": seed, "report": "val", "tool": tool,
            "flags": "", "result": {"metric": metric, "parameters": 10, "seconds": 1.0,
                                    "mol_per_s": 5.0}}


def test_results_file_replaces_a_rerun_and_keeps_the_others(bench, tmp_path):
    _, molecule_jobs, _ = bench
    molecule_jobs.save_result(tmp_path, _record("setattn", 20, 1.0))
    molecule_jobs.save_result(tmp_path, _record("chemprop", 20, 2.0))
    molecule_jobs.save_result(tmp_path, _record("setattn", 20, 0.5))
    saved = molecule_jobs.load_results(tmp_path)
    assert [(r["tool"], r["result"]["metric"]) for r in saved] == [("chemprop", 2.0),
                                                                   ("setattn", 0.5)]


def test_importing_slices_adds_only_runs_the_folder_lacks(bench, tmp_path):
    _, molecule_jobs, _ = bench
    molecule_jobs.save_result(tmp_path / "a", _record("setattn", 10, 1.0))
    molecule_jobs.save_result(tmp_path / "b", _record("setattn", 10, 9.0))
    molecule_jobs.save_result(tmp_path / "b", _record("chemprop", 11, 2.0))
    added = molecule_jobs.import_results(tmp_path / "a", [tmp_path / "b" / "results.json"])
    saved = molecule_jobs.load_results(tmp_path / "a")
    assert added == 1
    assert sorted((r["tool"], r["seed"], r["result"]["metric"]) for r in saved) == [
        ("chemprop", 11, 2.0), ("setattn", 10, 1.0)]
    (tmp_path / "bad.json").write_text('{"not": "a list"}')
    with pytest.raises(ValueError, match="bad.json"):
        molecule_jobs.import_results(tmp_path / "a", [tmp_path / "bad.json"])


def test_an_ensembles_shared_kernel_ridge_is_counted_once(bench, monkeypatch):
    _, molecule_jobs, _ = bench
    import torch

    kernel = torch.nn.Module()
    kernel.centres, kernel.alpha = torch.zeros(50, 8), torch.zeros(50, 1)
    members = []
    for _ in range(3):
        member = torch.nn.Linear(4, 1)  # 5 trainable numbers
        member.kernel = kernel
        members.append(member)
    monkeypatch.setattr(molecule_jobs, "load_run", lambda run_dir: (members, None))
    metrics = {"test": {"rmse": 1.0}, "models": [{"epochs_run": 7}] * 3,
               "train_seconds": 2.0}
    record = molecule_jobs.setattn_result(metrics, Path("unused"), "rmse")
    assert record["kernel_numbers"] == 50 * 8 + 50
    assert record["parameters"] == 3 * 5
    assert record["epochs"] == 21


def test_quality_table_marks_the_best_mean_and_the_seed_wins(bench):
    _, _, molecule_tables = bench
    records = [_record("setattn", 20, 1.0), _record("setattn", 21, 3.0),
               _record("chemprop", 20, 1.5), _record("chemprop", 21, 2.0),
               _record("chemprop_rdkit", 20, 1.8), _record("chemprop_rdkit", 21, 2.5)]
    row = molecule_tables.quality_table(records)[2].split(" | ")
    assert row[4] == "2.000 +- 1.414" and row[7] == "**1.750 +- 0.354**"
    assert row[9:11] == ["no", "1/2"]
    auc = [_record(t, 20, m, "tox21") for t, m in (("setattn", 0.9), ("chemprop", 0.8))]
    row = molecule_tables.quality_table(auc)[2].split(" | ")
    assert row[4] == "**0.900**" and row[9:11] == ["yes", "1/1"]


def test_runs_of_other_extra_flags_keep_their_own_folders(bench, tmp_path):
    _, molecule_jobs, _ = bench
    plain = molecule_jobs.RunSettings(tmp_path, "val", 1, (), ())
    fast = molecule_jobs.RunSettings(tmp_path, "val", 1, ("--compile",), ("--epochs", "3"))
    other = molecule_jobs.RunSettings(tmp_path, "val", 1, ("--epochs", "3"), ("--epochs", "3"))
    # the report's runs (no extra flags) keep the folders of the tool's name
    assert [molecule_jobs.run_name(t, plain) for t in ("setattn", "chemprop_rdkit")] == \
        ["setattn", "chemprop_rdkit"]
    names = {molecule_jobs.run_name("setattn", s) for s in (plain, fast, other)}
    assert len(names) == 3 and all(n.startswith("setattn") for n in names)
    # an anchor's folder follows the chemprop flags only
    assert molecule_jobs.run_name("chemprop", fast) == molecule_jobs.run_name("chemprop", other)


def test_setattn_featurises_with_the_tools_thread_count(monkeypatch, tmp_path):
    """The benchmark's setattn runs featurise in as many processes as each tool has
    threads (setattn's default pool would take every core on large sets)."""
    monkeypatch.syspath_prepend(str(BENCH))
    import chemprop_anchor
    import molecule_jobs

    seen = {}

    def fake_timed(cmd, log, threads, **env):
        seen.update(env, threads=threads)
        raise RuntimeError("stop before training")

    monkeypatch.setattr(chemprop_anchor, "timed", fake_timed)
    settings = molecule_jobs.RunSettings(tmp_path, "test", threads=1)
    job = molecule_jobs.Job("esol", "random", 10, tmp_path / "data.csv", "random10", [],
                            table=None)
    with pytest.raises(RuntimeError, match="stop before training"):
        molecule_jobs._run_setattn(job, tmp_path / "run", settings)
    assert seen == {"threads": 1, "SETATTN_CACHE_DIR": "off", "SETATTN_FEATURIZE_WORKERS": "1"}
