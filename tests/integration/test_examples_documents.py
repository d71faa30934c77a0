"""examples/documents.py runs end to end in --quick mode, on MR and on any CSV."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch
from example_runs import check_help, check_pictures, load_example, quick_run

pytestmark = pytest.mark.slow  # make test-fast leaves these out


def _module():
    return load_example("documents.py")


def _check_pictures(out: Path, metrics: dict) -> None:
    assert metrics["pictures"] == ["sentences.html", "sentences.png"]
    check_pictures(out, ["sentences.png"])
    page = (out / "sentences.html").read_text(encoding="utf-8")
    assert page.count("<span") >= 10 and "background: rgba" in page


def test_documents_quick_mr(tmp_path):
    last, stderr, metrics = quick_run("documents.py", tmp_path, 4)
    assert last.startswith("result: MR (rt-polarity) test accuracy")
    assert "100%" in stderr

    assert metrics["classes"] == ["negative", "positive"]
    assert 0.0 <= metrics["test_accuracy_mean"] <= 1.0 and metrics["test_accuracy_std"] == 0.0
    (fold,) = metrics["folds"]
    assert fold["test"] == 150 and fold["val"] == 135 and fold["train"] == 1215
    assert metrics["ensemble"] == 2 and len(fold["members"]) == 2
    for member in fold["members"]:
        assert 0.0 <= member["test_accuracy"] <= 1.0 and 1 <= member["best_epoch"] <= 2
    assert 0.0 <= metrics["single_model_mean"] <= 1.0
    assert metrics["protocol"] == "first 1 of 10 folds (test 10 %)"
    _check_pictures(tmp_path, metrics)


@pytest.mark.parametrize("extra", [[], ["--no-ratios"]])
def test_documents_any_csv(tmp_path, extra):
    # in-process, on a small CSV of our own with string labels and a cross-validation
    data = tmp_path / "reviews.csv"
    with data.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["review", "verdict"])
        for k in range(60):
            good = k % 2 == 0
            words = ["a", "truly", "great" if good else "awful", "film", "with", "a",
                     "fine" if good else "dull", "cast", "and", "plot", str(k % 7)]
            writer.writerow([" ".join(words), "good" if good else "bad"])
    out = tmp_path / "out"
    metrics = _module().main(["--data", str(data), "--text-column", "review",
                              "--label-column", "verdict", "--folds", "3", "--epochs", "2",
                              "--ensemble", "1", "--dim", "16", "--heads", "2", "--out", str(out),
                              *extra])
    assert metrics["classes"] == ["bad", "good"]
    assert metrics["protocol"] == "3-fold cross-validation" and len(metrics["folds"]) == 3
    assert sum(f["test"] for f in metrics["folds"]) == 60
    assert json.loads((out / "metrics.json").read_text())["data"] == str(data)
    _check_pictures(out, metrics)


def test_documents_help(capsys):
    check_help(capsys, _module().parse_args, ["--data", "--text-column", "--label-column",
                                              "--folds", "--seed", "--out", "--quick"])


def test_log_count_ratios_leave_one_out():
    doc = _module()
    tokens = [["good", "film"], ["good", "plot"], ["dull", "film"], ["rare", "film"]]
    labels = torch.tensor([1, 1, 0, 1])
    vocabs = doc.build_vocabularies(tokens[:3], 2, 1, 1)  # "rare" is unknown
    data = doc.encode(tokens, labels, vocabs)
    assert data.ids.shape == (8, 2) and data.ptr.tolist() == [0, 2, 4, 6, 8]
    train = torch.tensor([True, True, True, False])
    r = doc.log_count_ratios(data, train, 2)  # (8, 2 features * 2 classes)
    assert r.shape == (8, 4)
    # word columns 0 (class 0) and 1 (class 1) are opposite for two classes
    torch.testing.assert_close(r[:, 0], -r[:, 1])
    # "good" in sentence 0 counts only sentence 1 (positive): positive evidence
    assert r[0, 1] > 0
    # "plot" occurs in sentence 1 alone: left out there, so no evidence at all
    assert r[3, 1] == 0
    # the test sentence sees every training sentence: "film" occurs once per class
    # among positives (1 of 2) and negatives (1 of 1), so it leans negative
    assert r[7, 1] < 0
    # unknown word and unknown bigram give 0
    assert r[6].abs().sum() == 0
    # a subset keeps rows and offsets consistent
    sub = data.select(torch.tensor([3, 1]))
    assert sub.ptr.tolist() == [0, 2, 4] and sub.y.tolist() == [1, 1]
    assert torch.equal(sub.ids, torch.cat([data.ids[6:8], data.ids[2:4]]))
