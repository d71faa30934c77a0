"""benchmarks/code_speed.py: the throughput it reports and its same-numbers check."""

from __future__ import annotations

from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture()
def code_speed(monkeypatch):
    """``benchmarks/code_speed.py``, importable for this test only."""
    monkeypatch.syspath_prepend(str(BENCH))
    import code_speed

    return code_speed


def _metrics(rmse=1.25, epochs=(30, 41)):
    return {"split": {"train": 500}, "train_seconds": 8.0, "test": {"rmse": rmse},
            "val": {"rmse": 2.0},
            "models": [{"best_epoch": e - 20, "epochs_run": e, "test": {"rmse": rmse}}
                       for e in epochs]}


def test_throughput_counts_every_members_epochs(code_speed):
    assert code_speed.throughput(_metrics()) == pytest.approx(500 * 71 / 8.0)


def test_a_last_digit_or_an_epoch_apart_is_not_the_same(code_speed):
    assert code_speed.same_numbers(_metrics(), _metrics())
    assert not code_speed.same_numbers(_metrics(), _metrics(rmse=1.25 + 2 ** -40))
    assert not code_speed.same_numbers(_metrics(), _metrics(epochs=(30, 42)))
