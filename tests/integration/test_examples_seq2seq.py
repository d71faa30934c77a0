"""examples/seq2seq_attention.py runs end to end in --quick mode: metrics and heatmap."""

from __future__ import annotations

import random

import pytest
from example_runs import check_help, check_pictures, load_example, quick_run

pytestmark = pytest.mark.slow  # make test-fast leaves these out


def test_seq2seq_quick(tmp_path):
    last, stderr, metrics = quick_run("seq2seq_attention.py", tmp_path, 2)
    assert last.startswith("result: dates -> ISO exact match")
    assert "100%" in stderr  # the progress bar ran to the end

    assert 0.0 <= metrics["exact_match"] <= 1.0
    assert metrics["test_size"] == 200 and metrics["train_size"] == 1500
    for example in metrics["examples"]:
        assert len(example["target"]) == 10 and example["target"][4] == "-"
    assert metrics["pictures"] == ["alignment_0.png"]
    check_pictures(tmp_path, metrics["pictures"])


def test_seq2seq_data_and_help(capsys):
    module = load_example("seq2seq_attention.py")
    rng = random.Random(0)
    train = module.make_pairs(300, rng)
    test = module.make_pairs(50, rng, exclude={s for s, _ in train})
    assert len({s for s, _ in train}) == 300  # distinct sources
    assert not {s for s, _ in test} & {s for s, _ in train}  # held out
    for source, target in train:
        year, month, day = (int(part) for part in target.split("-"))
        assert 1950 <= year <= 2049 and 1 <= month <= 12 and 1 <= day <= 31
        assert str(day) in source  # the day is written somewhere in the source
    check_help(capsys, module.parse_args, ["--seed", "--out", "--quick", "--epochs"])
