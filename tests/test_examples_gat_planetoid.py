"""examples/gat_planetoid.py runs end to end in --quick mode: metrics and pictures."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from setattn.data import DATASETS_DIR

SCRIPT = Path(__file__).resolve().parents[1] / "examples" / "gat_planetoid.py"


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True,
                          text=True, timeout=300)


def test_gat_planetoid_quick(tmp_path):
    # a copy of the bundled Cora in a folder of its own exercises --root / --name
    root = tmp_path / "data"
    root.mkdir()
    shutil.copy(DATASETS_DIR / "planetoid" / "cora.npz", root / "cora.npz")
    out = tmp_path / "out"
    run = _run("--quick", "--seed", "3", "--root", str(root), "--name", "Cora",
               "--out", str(out))
    assert run.returncode == 0, run.stderr[-2000:]
    last = run.stdout.strip().splitlines()[-1]
    assert last.startswith("result: GAT on Cora test accuracy") and "over 2 seeds" in last
    assert "100%" in run.stderr  # the progress bar ran to the end

    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["nodes"] == 2708 and metrics["edges"] == 10556
    assert [r["seed"] for r in metrics["runs"]] == [3, 4]
    for r in metrics["runs"]:
        assert 0.0 <= r["test_accuracy"] <= 1.0 and 1 <= r["best_epoch"] <= r["epochs"] <= 15
    # even 15 epochs beat the 7-class chance level by far
    assert 0.3 < metrics["test_accuracy_mean"] <= 1.0 and metrics["test_accuracy_std"] >= 0.0
    assert metrics["config"]["quick"] is True and metrics["config"]["seed"] == 3
    assert len(metrics["pictures"]) == 2
    for name in metrics["pictures"]:
        assert name.endswith(".png") and (out / name).stat().st_size > 10_000


def test_gat_planetoid_help(capsys):
    # in-process: a subprocess would spend its time importing torch again
    spec = importlib.util.spec_from_file_location("gat_planetoid_example", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with pytest.raises(SystemExit) as exit_info:
        module.parse_args(["--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    for option in ("--root", "--name", "--seed", "--out", "--quick"):
        assert option in text
