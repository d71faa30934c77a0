"""examples/seq2seq_attention.py runs end to end in --quick mode: metrics and heatmap."""

from __future__ import annotations

import importlib.util
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "examples" / "seq2seq_attention.py"


def _module():
    spec = importlib.util.spec_from_file_location("seq2seq_attention_example", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_seq2seq_quick(tmp_path):
    run = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--seed", "2", "--out",
                          str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    last = run.stdout.strip().splitlines()[-1]
    assert last.startswith("result: dates -> ISO exact match")
    assert "100%" in run.stderr  # the progress bar ran to the end

    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert 0.0 <= metrics["exact_match"] <= 1.0
    assert metrics["test_size"] == 200 and metrics["train_size"] == 1500
    assert metrics["config"]["quick"] is True and metrics["config"]["seed"] == 2
    for example in metrics["examples"]:
        assert len(example["target"]) == 10 and example["target"][4] == "-"
    assert metrics["pictures"] == ["alignment_0.png"]
    assert (tmp_path / "alignment_0.png").stat().st_size > 10_000


def test_seq2seq_data_and_help(capsys):
    module = _module()
    rng = random.Random(0)
    train = module.make_pairs(300, rng)
    test = module.make_pairs(50, rng, exclude={s for s, _ in train})
    assert len({s for s, _ in train}) == 300  # distinct sources
    assert not {s for s, _ in test} & {s for s, _ in train}  # held out
    for source, target in train:
        year, month, day = (int(part) for part in target.split("-"))
        assert 1950 <= year <= 2049 and 1 <= month <= 12 and 1 <= day <= 31
        assert str(day) in source  # the day is written somewhere in the source
    with pytest.raises(SystemExit) as exit_info:
        module.parse_args(["--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    for option in ("--seed", "--out", "--quick", "--epochs"):
        assert option in text
