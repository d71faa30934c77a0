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
    for task in metrics["accuracy"].values():
        assert set(task) == {"set_transformer", "sum_pooling"}
        assert all(0.0 <= acc <= 1.0 for acc in task.values())


def test_sets_example_help(capsys):
    """--help, in this process (the quick test above already pays for one interpreter)."""
    check_help(capsys, load_example("sets.py").main, ["--quick", "--out", "--seed"])
