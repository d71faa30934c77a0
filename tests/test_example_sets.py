"""examples/sets.py runs end to end in --quick mode and writes metrics.json."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "examples" / "sets.py"


def test_sets_example_quick(tmp_path):
    run = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--seed", "1",
                          "--out", str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    lines = run.stdout.strip().splitlines()
    assert lines[-1].startswith("result:")
    assert "set transformer" in lines[-1] and "sum pooling" in lines[-1]
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert set(metrics["accuracy"]) == {"max", "distinct"}
    for task in metrics["accuracy"].values():
        assert set(task) == {"set_transformer", "sum_pooling"}
        assert all(0.0 <= acc <= 1.0 for acc in task.values())
    assert metrics["config"]["seed"] == 1 and metrics["config"]["quick"] is True


def test_sets_example_help(capsys):
    """--help, in this process (the quick test above already pays for one interpreter)."""
    spec = importlib.util.spec_from_file_location("sets_example", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with pytest.raises(SystemExit) as stop:
        module.main(["--help"])
    assert stop.value.code == 0
    out = capsys.readouterr().out
    assert "--quick" in out and "--out" in out and "--seed" in out
