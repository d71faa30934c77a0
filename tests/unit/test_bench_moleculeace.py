"""The MoleculeACE benchmark's pure parts: the validation tenth inside the authors' train
rows, the validation report that never shows a test row, the scores, the paper's means."""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture()
def ace(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    import moleculeace

    return moleculeace


def test_the_validation_part_is_a_tenth_of_the_train_rows(ace):
    rows = ace.read_set("CHEMBL2835_Ki")
    labels = ace.split_column(rows)
    assert labels == ace.split_column(rows)  # seeded
    train = sum(r["split"] == "train" for r in rows)
    assert labels.count("val") == round(0.1 * train)
    assert all((label == "test") == (r["split"] == "test") for r, label in zip(rows, labels))


def test_a_validation_report_leaves_every_test_row_out(ace):
    rows = ace.read_set("CHEMBL2835_Ki")
    seen, labels = ace.report_rows(rows, "val")
    test_smiles = {r["smiles"] for r in rows if r["split"] == "test"}
    val = [r for r, label in zip(rows, ace.split_column(rows)) if label == "val"]
    scored = [r for r in seen if r["split"] == "test"]
    assert not test_smiles & {r["smiles"] for r in seen} - {r["smiles"] for r in val}
    assert [r["smiles"] for r in scored] == [r["smiles"] for r in val]
    assert labels.count("test") == len(val) and len(labels) == len(seen)


def test_scores_are_rmse_and_cliff_rmse(ace):
    rows = [{"smiles": "A", "y": 1.0, "cliff": True, "split": "test"},
            {"smiles": "B", "y": 2.0, "cliff": False, "split": "test"},
            {"smiles": "C", "y": 9.0, "cliff": True, "split": "train"}]
    out = ace.scores(rows, {"A": 2.0, "B": 2.0})
    assert out["cliff_rmse"] == 1.0 and abs(out["rmse"] - 0.5 ** 0.5) < 1e-12
    with pytest.raises(RuntimeError, match="no prediction for 1 test molecules"):
        ace.scores(rows, {"A": 2.0})


def test_the_paper_means_are_the_published_ones(ace):
    paper, names = ace.published(), ace.set_names()
    assert len(names) == 24

    def mean(method, key):
        return round(statistics.mean(paper[(s, method)][key] for s in names), 3)

    assert (mean("SVM + ECFP", "rmse"), mean("SVM + ECFP", "cliff_rmse")) == (0.671, 0.759)
    assert (mean("GAT", "rmse"), mean("AttentiveFP", "rmse")) == (0.956, 1.197)


def test_an_interrupted_run_starts_again_and_a_saved_one_is_skipped(ace, tmp_path,
                                                                     monkeypatch):
    seen = []

    def fake_setattn(rows, data, run_dir, flags):
        seen.append(sorted(p.name for p in run_dir.glob("*")))
        run_dir.mkdir(parents=True)
        (run_dir / "best.pt").write_text("")
        return {"seconds": 1.0, "rmse": 0.5, "cliff_rmse": 0.6}

    monkeypatch.setattr(ace, "run_setattn", fake_setattn)
    stale = tmp_path / "CHEMBL2835_Ki" / "val" / "setattn"
    stale.mkdir(parents=True)
    (stale / "half_written.pt").write_text("")
    args = argparse.Namespace(sets=["CHEMBL2835_Ki"], anchors=[], setattn_flags="",
                              report="val", out=tmp_path, store=tmp_path / "store",
                              tables_only=False)
    first = ace.run_all(args)
    assert seen == [[]]  # the stale folder was gone before the run started
    assert len(list((tmp_path / "store" / "moleculeace").glob("*.json"))) == 1
    assert ace.run_all(args) == first and len(seen) == 1  # stored: not run again
    args.setattn_flags = "--epochs 2"  # another key
    with pytest.raises(SystemExit, match="1 stored run"):
        ace.run_all(argparse.Namespace(**{**vars(args), "tables_only": True}))


def test_a_stored_chemprop_run_is_scored_without_training(ace, tmp_path, monkeypatch):
    import numpy as np

    calls = []

    def fake_chemprop(data, column, targets, task, run_dir, seed, threads, flags, members):
        calls.append(members)
        rows = [r for r in ace.read_set("CHEMBL2835_Ki") if r["split"] == "test"]
        for i in range(members):
            (run_dir / f"model_{i}").mkdir(parents=True)
            (run_dir / f"model_{i}" / "test_predictions.csv").write_text(
                "smiles,y\n" + "".join(f"{r['smiles']},{r['y'] + i}\n" for r in rows))
        fits = [{"fit_seconds": 1.0, "epochs": 2, "parameters": 5}] * members
        return ({"seconds": 3.0, "fit_seconds": members * 1.0, "epochs": 2 * members,
                 "parameters": 5, "members": members, "fits": fits},
                [r["smiles"] for r in rows], np.array([[r["y"] + 1.0] for r in rows]))

    monkeypatch.setattr(ace, "run_chemprop", fake_chemprop)
    monkeypatch.setattr(ace, "run_setattn", lambda *a: {"seconds": 1.0, "rmse": 0.5,
                                                        "cliff_rmse": 0.6})
    args = argparse.Namespace(sets=["CHEMBL2835_Ki"], anchors=["chemprop"], setattn_flags="",
                              report="test", out=tmp_path, store=tmp_path / "store",
                              tables_only=False)
    first = ace.run_all(args)
    assert calls == [3]
    assert first["CHEMBL2835_Ki test chemprop"]["rmse"] == pytest.approx(1.0)
    monkeypatch.setattr(ace, "run_chemprop", lambda *a, **k: pytest.fail("trained again"))
    monkeypatch.setattr(ace, "run_setattn", lambda *a, **k: pytest.fail("trained again"))
    args.tables_only = True
    assert ace.run_all(args) == first
