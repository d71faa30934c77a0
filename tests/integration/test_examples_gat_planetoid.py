"""examples/gat_planetoid.py runs end to end in --quick mode: metrics and pictures."""

from __future__ import annotations

import shutil

import pytest
from example_runs import check_help, check_pictures, load_example, quick_run

from setattn.datasets import DATASETS_DIR, load_planetoid

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
    # it learns: the input-blind guess (the most common training class) gets
    # `blind` of the test nodes (about 0.3 on Cora); every quick run (50 epochs) must
    # beat it by 0.25, which is also above what features alone give (an MLP: 55 %)
    blind = majority_test_accuracy(root)
    for r in metrics["runs"]:
        assert 1 <= r["best_epoch"] <= r["epochs"] <= 50
        assert r["test_accuracy"] > blind + 0.25, (r, blind)
    assert metrics["test_accuracy_std"] >= 0.0
    assert len(metrics["pictures"]) == 2
    check_pictures(out, metrics["pictures"])


def majority_test_accuracy(root) -> float:
    """Share of the test nodes in the most common class of the training nodes."""
    data = load_planetoid(root, "Cora")
    common = data.y[data.train_mask].bincount().argmax()
    return float((data.y[data.test_mask] == common).float().mean())


def test_gat_planetoid_help(capsys):
    # in-process: a subprocess would spend its time importing torch again
    check_help(capsys, load_example("gat_planetoid.py").parse_args,
               ["--root", "--name", "--seed", "--out", "--quick"])
