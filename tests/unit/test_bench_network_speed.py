"""The network speed benchmark's carry-over ratio from in-turn records, and its cases."""

from __future__ import annotations

from pathlib import Path

import pytest

from setattn.molprop.model import MoleculeModelConfig

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture()
def speed(monkeypatch):
    """``benchmarks/network_speed.py``, importable for this test only."""
    monkeypatch.syspath_prepend(str(BENCH))
    import network_speed

    return network_speed


def _rec(dataset, split, rnd, tool, mol_per_s):
    return {"dataset": dataset, "split": split, "seed": 10, "round": rnd, "tool": tool,
            "result": {"mol_per_s": mol_per_s}}


def test_in_turn_ratio_is_the_median_of_per_round_ratios(speed):
    records = [
        _rec("esol", "random", 0, "setattn", 300.0),
        _rec("esol", "random", 0, "chemprop_w96", 200.0),
        _rec("esol", "random", 1, "setattn", 100.0),
        _rec("esol", "random", 1, "chemprop_w96", 50.0),
        _rec("esol", "scaffold", 0, "setattn", 400.0),
        _rec("esol", "scaffold", 0, "chemprop_w96", 200.0),
        _rec("esol", "scaffold", 0, "chemprop", 50.0),  # chemprop's defaults: not a ratio
        _rec("esol", "scaffold", 1, "setattn", 999.0),  # no width-96 run in that round
        _rec("freesolv", "random", 0, "setattn", 1.0),
        _rec("freesolv", "random", 0, "chemprop_w96", 9.0),
    ]
    # per-round ratios 1.5, 2.0 and 2.0; the ratio of the medians would be 300 / 200
    assert speed.in_turn_ratio(records, "esol") == pytest.approx(2.0)
    assert speed.in_turn_ratio(records, "freesolv") == pytest.approx(1 / 9)
    assert speed.in_turn_ratio(records, "bace1") is None


def test_cases_are_valid_distinct_configs_led_by_the_in_turn_network(speed):
    shapes = set()
    for settings in speed.CASES.values():
        config = MoleculeModelConfig(**settings)
        config.validate()
        shapes.add((config.layers, config.heads, config.hidden))
    assert len(shapes) == len(speed.CASES)
    # the first case is the network matched_width.json measured in turn: 3 layers
    assert MoleculeModelConfig(**next(iter(speed.CASES.values()))).layers == 3
    assert MoleculeModelConfig() in [MoleculeModelConfig(**s) for s in speed.CASES.values()]
