"""examples/documents.py learns in --quick mode on TREC and runs on any CSV; its data
helpers (examples/documents_data.py, documents_linear.py) on known answers."""

from __future__ import annotations

import csv
import json
import sys
import time
from pathlib import Path

import pytest
import torch
from example_runs import check_help, check_pictures, load_example, quick_run

from setattn.datasets import load_trec

pytestmark = pytest.mark.slow  # make test-fast leaves these out


def _module():
    return load_example("documents.py")


def _check_pictures(out: Path, metrics: dict) -> None:
    assert metrics["pictures"] == ["sentences.html", "words_attention.png",
                                   "words_integrated_gradients.png"]
    check_pictures(out, metrics["pictures"][1:])
    page = (out / "sentences.html").read_text(encoding="utf-8")
    assert page.count("<span") >= 20 and "background: rgb(" in page
    assert "integrated gradients" in page and "(1 = uniform)" in page


def test_documents_quick_trec_learns(tmp_path):
    # TREC, 6 classes: the largest class is 23 % of the questions; a model that did not
    # learn (shuffled labels, a broken pooling) stays near that, far below chance + 30
    started = time.perf_counter()
    last, stderr, metrics = quick_run("documents.py", tmp_path, 4, "--corpus", "trec")
    elapsed = time.perf_counter() - started
    assert last.startswith("result: TREC test accuracy") and "TF-IDF + LR baseline" in last
    assert "100%" in stderr
    assert metrics["protocol"] == "fixed test split" and metrics["classes"][0] == "description"
    (round_,) = metrics["rounds"]
    assert round_["test"] + round_["val"] + round_["train"] == 1500
    chance = 0.23
    assert round_["attention_test_accuracy"] > chance + 0.3  # the attention models alone
    assert metrics["test_accuracy_mean"] > chance + 0.4
    assert 0.0 <= round_["attention_weight"] <= 1.0 and round_["baseline_c"] > 0
    # the run's own clock in seconds (benchmarks/examples.py records it): positive and
    # inside the wall time this test saw, which milliseconds or a stale value would not be
    assert 0 < metrics["seconds"] <= elapsed
    _check_pictures(tmp_path, metrics)


@pytest.mark.parametrize("extra", [[], ["--no-ratios", "--char-buckets", "512"]])
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
    assert metrics["protocol"] == "3-fold cross-validation" and len(metrics["rounds"]) == 3
    assert sum(r["test"] for r in metrics["rounds"]) == 60
    # one word tells the classes apart: the linear models learn it exactly
    assert metrics["baseline_test_accuracy_mean"] == 1.0
    assert json.loads((out / "metrics.json").read_text())["data"] == str(data)
    _check_pictures(out, metrics)


def test_documents_inner_folds_never_load_the_test_split(tmp_path, monkeypatch):
    # model selection on TREC: K-fold inside the training questions; the spy records
    # which splits are loaded, so a run that read the test questions would fail here
    module = _module()
    data = sys.modules["documents_data"]
    loaded = []

    def spy(split="train", **kwargs):
        loaded.append(split)
        return load_trec(split, **kwargs)

    monkeypatch.setattr(data, "load_trec", spy)
    corpus = data.load_corpus(module.parse_args(["--corpus", "trec"]))
    assert loaded == ["train", "test"] and corpus.fixed_test is not None  # the spy sees
    loaded.clear()
    metrics = module.main(["--corpus", "trec", "--inner-folds", "3", "--run-folds", "1",
                           "--limit", "300", "--epochs", "1", "--ensemble", "1", "--dim", "16",
                           "--heads", "2", "--pictures", "2", "--out", str(tmp_path)])
    assert loaded == ["train"]
    assert metrics["data"] == "TREC training questions"
    assert metrics["protocol"] == ("first 1 of 3 folds of the training questions, test split "
                                   "not loaded (held out 33 %)")
    (round_,) = metrics["rounds"]
    assert round_["test"] == 100 and round_["train"] + round_["val"] == 200
    with pytest.raises(SystemExit):
        module.parse_args(["--corpus", "cr", "--inner-folds", "3"])


def test_documents_help(capsys):
    check_help(capsys, _module().parse_args, ["--corpus", "--data", "--text-column",
                                              "--label-column", "--folds", "--seed", "--out",
                                              "--quick", "--char-buckets",
                                              "--inner-folds", "--start-token",
                                              "--partner-ngrams"])


def test_log_count_ratios_leave_one_out():
    doc = load_example("documents_data.py")
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


def test_char_ngrams_and_fixed_split():
    data = load_example("documents_data.py")
    ids = data.char_ngram_ids([["ab", "ab"], ["abc"]], buckets=64, length=6)
    assert ids.shape == (3, 6) and torch.equal(ids[0], ids[1])
    assert (ids[0] > 0).sum() == 3 and (ids[2] > 0).sum() == 6  # <ab>: 2+1+0; <abc>: 3+2+1
    assert int(ids.max()) < 64
    train, val, test = data.fixed_split(10, torch.tensor([7, 8, 9]), 0.3, seed=0)
    assert test.tolist() == [7, 8, 9] and len(val) == 2 and len(train) == 5
    assert sorted(torch.cat([train, val]).tolist()) == list(range(7))


def test_choose_weight_prefers_the_better_model():
    linear = load_example("documents_linear.py")
    y = torch.tensor([0, 1, 1, 0])
    right = torch.nn.functional.one_hot(y, 2).float()
    wrong = 1 - right
    # every w above 0.5 follows the right model; of those ties the closest to 0.5 wins
    assert linear.choose_weight(right, wrong, y) == (0.6, 1.0)
    assert linear.choose_weight(wrong, right, y) == (0.4, 1.0)
    half = torch.tensor([[0.6, 0.4], [0.4, 0.6], [0.6, 0.4], [0.6, 0.4]])  # 3 of 4 right
    assert linear.choose_weight(half, wrong, y) == (0.9, 0.75)  # w = 0.8 tips row 0
    assert linear.choose_weight(right, right, y) == (0.5, 1.0)  # ties: the middle


def test_start_token_marks_the_opening_words():
    doc = load_example("documents_data.py")
    tokens = doc.mark_start([["how", "many", "cats"], ["what", "is", "how"]])
    assert tokens == [["<s>", "how", "many", "cats"], ["<s>", "what", "is", "how"]]
    vocabs = doc.build_vocabularies(tokens, 3, 1, 1)
    assert "<s> how" in vocabs[1] and "<s> how many" in vocabs[2]
    data = doc.encode(tokens, torch.tensor([0, 1]), vocabs)
    first = data.ids[data.ptr[:-1]]  # (2, 3): the <s> nodes
    assert first[0, 0] == first[1, 0] == vocabs[0]["<s>"]
    # the opening bigram tells the texts apart; "how" at the start differs from "how" last
    assert first[0, 1] != first[1, 1] and first[0, 1] == vocabs[1]["<s> how"]
    linear = load_example("documents_linear.py")
    texts = [" ".join(t) for t in tokens]
    names = set(linear._features(True, 3).fit(texts).get_feature_names_out())
    assert "words__<s> how many" in names and "words__what is how" in names
    assert not any(n.count(" ") == 2 for n in linear._features(False).fit(texts)
                   .get_feature_names_out())  # the baseline: 1-2-grams only
