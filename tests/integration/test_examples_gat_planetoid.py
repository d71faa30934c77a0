"""examples/gat_planetoid.py runs end to end in --quick mode: metrics and pictures."""

from __future__ import annotations

import shutil

import pytest
from example_runs import check_help, check_pictures, load_example, quick_run

from setattn.datasets import DATASETS_DIR

pytestmark = pytest.mark.slow  # make test-fast leaves these out


def test_gat_planetoid_quick(tmp_path):
    # a copy of the bundled Cora in a folder of its own exercises --root / --name
    root = tmp_path / "data"
    root.mkdir()
    shutil.copy(DATASETS_DIR / "planetoid" / "cora.npz", root / "cora.npz")
    out = tmp_path / "out"
    last, stderr, metrics = quick_run("gat_planetoid.py", out, 3, "--root", str(root),
                                      "--name", "Cora")
    assert last.startswith("result: GAT on Cora test accuracy") and "over 2 seeds" in last
    assert "100%" in stderr  # the progress bar ran to the end

    assert metrics["nodes"] == 2708 and metrics["edges"] == 10556
    assert [r["seed"] for r in metrics["runs"]] == [3, 4]
    for r in metrics["runs"]:
        assert 0.0 <= r["test_accuracy"] <= 1.0 and 1 <= r["best_epoch"] <= r["epochs"] <= 15
    # even 15 epochs beat the 7-class chance level by far
    assert 0.3 < metrics["test_accuracy_mean"] <= 1.0 and metrics["test_accuracy_std"] >= 0.0
    assert len(metrics["pictures"]) == 2
    check_pictures(out, metrics["pictures"])


def test_gat_planetoid_help(capsys):
    # in-process: a subprocess would spend its time importing torch again
    check_help(capsys, load_example("gat_planetoid.py").parse_args,
               ["--root", "--name", "--seed", "--out", "--quick"])
