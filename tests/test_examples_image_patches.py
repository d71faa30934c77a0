"""examples/image_patches.py runs end to end in --quick mode: metrics and overlays."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[1] / "examples" / "image_patches.py"


def _module():
    spec = importlib.util.spec_from_file_location("image_patches_example", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_image_patches_quick(tmp_path):
    run = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--seed", "1", "--out",
                          str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    last = run.stdout.strip().splitlines()[-1]
    assert last.startswith("result: patch-set test accuracy digits")
    assert "mnist5k" in last and "100%" in run.stderr

    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert set(metrics["test_accuracy"]) == {"digits", "mnist5k"}
    digits, mnist = metrics["datasets"]["digits"], metrics["datasets"]["mnist5k"]
    assert digits["test"] == 359 and digits["patches_per_image"] == 16
    assert mnist["test"] == 1000 and mnist["patches_per_image"] == 49
    for result in (digits, mnist):
        assert 0.0 <= result["test_accuracy"] <= 1.0 and result["train"] == 300
        assert (tmp_path / result["picture"]).stat().st_size > 10_000
    assert metrics["config"]["quick"] is True and metrics["config"]["seed"] == 1


def test_random_shift_and_help(capsys):
    module = _module()
    images = torch.zeros(5, 1, 8, 8)
    images[:, :, 3:5, 3:5] = 1.0
    shifted = module.random_shift(images, 2, torch.Generator().manual_seed(0))
    assert shifted.shape == images.shape
    assert torch.equal(shifted.sum((1, 2, 3)), images.sum((1, 2, 3)))  # nothing cut off
    with pytest.raises(SystemExit) as exit_info:
        module.parse_args(["--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    for option in ("--datasets", "--seed", "--out", "--quick"):
        assert option in text
