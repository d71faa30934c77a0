"""examples/sets.py runs end to end in --quick mode and writes metrics.json."""

from __future__ import annotations

import pytest
from example_runs import check_help, load_example, quick_run

pytestmark = pytest.mark.slow  # make test-fast leaves these out


def test_sets_example_quick(tmp_path):
    last, _, metrics = quick_run("sets.py", tmp_path, 1)
    assert last.startswith("result:")
    assert "set transformer" in last and "sum pooling" in last
    assert set(metrics["accuracy"]) == {"max", "distinct"}
    blind = metrics["majority_class_accuracy"]  # the best input-blind guess, same test sets
    for task in metrics["accuracy"].values():
        assert set(task) == {"set_transformer", "sum_pooling"}
    # they learn in 250 steps: the maximum well above the blind guess (about 0.2) for both
    # models, the harder distinct count above it for the set transformer
    assert min(metrics["accuracy"]["max"].values()) > blind["max"] + 0.4, metrics
    assert metrics["accuracy"]["distinct"]["set_transformer"] > blind["distinct"] + 0.1, metrics


def test_sets_example_help(capsys):
    """--help, in this process (the quick test above already pays for one interpreter)."""
    check_help(capsys, load_example("sets.py").main, ["--quick", "--out", "--seed"])
