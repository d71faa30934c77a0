"""examples/seq2seq_attention.py: a quick run learns; test dates are never training dates."""

from __future__ import annotations

import random

import pytest
from example_runs import check_help, check_pictures, load_example, quick_run

pytestmark = pytest.mark.slow  # make test-fast leaves these out


def test_seq2seq_quick_run_learns(tmp_path):
    last, stderr, metrics = quick_run("seq2seq_attention.py", tmp_path, 2)
    assert last.startswith("result: dates -> ISO exact match")
    assert "never seen in training" in last and "chosen on validation" in last
    assert "100%" in stderr  # the progress bar ran to the end

    assert (metrics["train_size"], metrics["val_size"], metrics["test_size"]) == (2000, 200, 200)
    assert metrics["test_dates_in_train"] == 0
    assert len(metrics["val_curve"]) == 2
    assert metrics["val_curve"][metrics["best_epoch"] - 1] == max(metrics["val_curve"])
    # it reads its input: per-character accuracy well above the best input-blind guess
    # (the most common training character at every position, about 0.46; quick runs
    # reach about 0.76)
    blind = metrics["input_blind_char_accuracy"]
    assert 0.3 < blind < 0.6 and metrics["char_accuracy"] > blind + 0.15, metrics
    for example in metrics["examples"]:
        assert len(example["target"]) == 10 and example["target"][4] == "-"
    assert metrics["pictures"] == ["alignment_0.png"]
    check_pictures(tmp_path, metrics["pictures"])


def test_train_validation_and_test_share_no_iso_date():
    module = load_example("seq2seq_attention.py")
    args = module.parse_args(["--train-size", "3000", "--val-size", "300", "--test-size", "500"])
    data = module.make_data(args, random.Random(0))
    iso = {part: {t for _, t in pairs} for part, pairs in data.items()}
    assert not iso["test"] & iso["train"] and not iso["val"] & iso["train"]
    assert not iso["test"] & iso["val"]
    assert len(iso["test"]) == 500 and len(iso["val"]) == 300  # one wording per date
    assert len({s for s, _ in data["train"]}) == 3000  # distinct training sources
    for source, target in data["train"]:
        year, month, day = (int(part) for part in target.split("-"))
        assert 1950 <= year <= 2049 and 1 <= month <= 12 and 1 <= day <= 31
        assert str(day) in source  # the day is written somewhere in the source


def test_split_days_is_a_partition_and_metrics_have_known_answers(capsys):
    module = load_example("seq2seq_attention.py")
    train, val, test = module.split_days(10, 20, random.Random(1))
    assert (len(val), len(test)) == (10, 20)
    assert sorted(train + val + test) == list(range(module.NUM_DAYS))
    assert module.char_accuracy(["1999-01-01", "2000-12-3"], ["1999-01-02", "2000-12-31"]) == 0.9
    # the blind guess takes the most common character of every position
    assert module.majority_baseline(["1999", "1998", "2998"], ["1998"]) == 1.0
    with pytest.raises(ValueError, match="cannot draw 5 pairs from 3 days"):
        module.make_pairs(5, [0, 1, 2], random.Random(0), distinct_dates=True)
    check_help(capsys, module.parse_args, ["--seed", "--out", "--quick", "--epochs",
                                           "--val-size"])
