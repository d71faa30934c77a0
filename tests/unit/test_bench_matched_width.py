"""``benchmarks/matched_width.py``: the order of the tools and the per-round ratios."""

from __future__ import annotations

from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture()
def matched(monkeypatch):
    """``benchmarks/matched_width.py``, importable for this test only."""
    monkeypatch.syspath_prepend(str(BENCH))
    import matched_width

    return matched_width


def _round(ours: float, theirs: float) -> dict:
    return {"setattn": {"result": {"mol_per_s": ours}},
            "chemprop_w96": {"result": {"mol_per_s": theirs}}}


def test_the_tools_take_turns_going_first(matched):
    assert [matched._order(r)[0] for r in range(4)] == [
        "setattn", "chemprop_w96", "setattn", "chemprop_w96"]
    assert all(sorted(matched._order(r)) == sorted(matched.TOOLS) for r in range(4))


def test_the_ratio_is_the_median_of_the_rounds_ratios(matched):
    # ratios 3.0, 1.0, 2.0: median 2.0, where the ratio of the medians is 3000 / 1000 = 3.0
    rounds = [_round(3000.0, 1000.0), _round(1000.0, 1000.0), _round(6000.0, 3000.0)]
    row = matched.summary_row("esol", "random", 10, rounds)
    assert row[:4] == ["esol", "random", 10, 3]
    assert row[4:8] == ["3000", "1000", "2.00x", "1.00x to 3.00x"]
    assert row[8] == "3000:1000 / 1000:1000 / 6000:3000"
