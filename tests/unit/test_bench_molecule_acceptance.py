"""Issue #15's acceptance lines as the molecule benchmark checks them on its records."""

from __future__ import annotations

from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture()
def acceptance(monkeypatch):
    """``benchmarks/molecule_acceptance.py``, importable for this test only."""
    monkeypatch.syspath_prepend(str(BENCH))
    import molecule_acceptance

    return molecule_acceptance


def _record(dataset, split, seed, tool, metric, seconds=100.0, mol_per_s=1000.0,
            coverage=None):
    return {"dataset": dataset, "split": split, "seed": seed, "tool": tool,
            "result": {"metric": metric, "seconds": seconds, "mol_per_s": mol_per_s,
                       "coverage": coverage}}


def _row(dataset, split, ours, chemprop, rdkit, seeds=(10, 11), **setattn):
    """Records of one (set, split): setattn and both anchors on ``seeds``."""
    out = []
    for seed in seeds:
        out += [_record(dataset, split, seed, "setattn", ours, **setattn),
                _record(dataset, split, seed, "chemprop", chemprop, seconds=150.0,
                        mol_per_s=400.0),
                _record(dataset, split, seed, "chemprop_rdkit", rdkit)]
    return out


def _verdicts(lines: list[str]) -> dict[str, list[str]]:
    """The table's rows by their first cell."""
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in lines[4:]]
    return {c[0]: c[1:] for c in cells}


def test_lines_met_and_missed(acceptance):
    records = (_row("freesolv", "random", 0.79, 1.3, 0.9, coverage=0.90)  # all met
               + _row("esol", "random", 0.55, 0.6, 0.5, coverage=0.95)  # loses to rdkit
               + [_record("esol", "random", 10, "chemprop_w96", 0.7, mol_per_s=400.0),
                  _record("freesolv", "random", 10, "chemprop_w96", 1.7, mol_per_s=600.0)])
    rows = _verdicts(acceptance.acceptance_table(records))
    assert rows["quality"][1:3] == ["1/2", "esol random"]
    assert rows["quality"][-1] == "not met"
    assert rows["moonshot"][1:3] == ["1/2", "esol random"]  # 0.79 <= 0.80; 0.55 > 0.50
    # setattn 1000 mol/s against 400 (ESOL: 2.5x, met) and 600 (FreeSolv: 1.67x)
    assert rows["throughput"][1:4] == ["1/2", "freesolv random", "1.67x to 2.50x"]
    assert rows["wall time"][1:] == ["2/2", "-", "1.50x to 1.50x", "met"]
    assert rows["coverage"][1:3] == ["1/2", "esol random"]


def test_only_complete_rows_count(acceptance):
    """A row whose anchors have not run every seed is named as unfinished and not judged;
    a line met on the complete rows alone reads "met so far"."""
    records = (_row("freesolv", "scaffold", 1.0, 2.0, 2.0, seeds=(10, 11, 12))
               + _row("bace1", "random", 0.9, 0.8, 0.8, seeds=(10, 11))  # 2 of 3 seeds
               + [_record("bace1", "scaffold", 10, "setattn", 0.5)])  # anchors missing
    done, unfinished = acceptance.complete_rows(records)
    assert list(done) == [("freesolv", "scaffold")]
    assert unfinished == [("bace1", "random"), ("bace1", "scaffold")]
    lines = acceptance.acceptance_table(records)
    assert lines[0] == ("complete rows (seeds 10 11 12): freesolv scaffold; unfinished: "
                        "bace1 random, bace1 scaffold")
    rows = _verdicts(lines)
    assert rows["quality"][1:] == ["1/1", "-", "-", "met so far"]
    assert rows["moonshot"][-1] == "not measured"  # no random FreeSolv / ESOL row
    assert rows["coverage"][-1] == "not measured"  # no run has intervals


def test_classification_rows_need_higher_auc_and_have_no_coverage(acceptance):
    records = _row("tox21", "random", 0.85, 0.80, 0.86, coverage=None)
    rows = _verdicts(acceptance.acceptance_table(records))
    assert rows["quality"][1:3] == ["0/1", "tox21 random"]  # 0.85 < rdkit's 0.86
    assert rows["coverage"][1] == "0/0"


def _rounds(dataset, split, speeds, walls):
    """matched_width.py's records: per round, setattn and chemprop at width 96 with the
    throughput ratio ``speeds[r]``, and chemprop's default run taking ``walls[r]`` times
    setattn's seconds."""
    out = []
    for r, (speed, wall) in enumerate(zip(speeds, walls)):
        out += [{**_record(dataset, split, 10, "setattn", 1.0, seconds=10.0,
                           mol_per_s=1000.0 * speed), "round": r},
                {**_record(dataset, split, 10, "chemprop_w96", 1.0, mol_per_s=1000.0),
                 "round": r},
                {**_record(dataset, split, 10, "chemprop", 1.0, seconds=10.0 * wall),
                 "round": r}]
    return out


def test_in_turn_ratios_are_medians_of_per_round_ratios(acceptance):
    rounds = _rounds("esol", "random", [3.0, 1.0, 2.5], [0.5, 2.0, 1.5])
    rounds = rounds[:-1]  # round 2 lacks chemprop's default run: left out
    speed, wall = acceptance.in_turn_ratios(rounds)[("esol", "random")]
    assert speed == pytest.approx(2.0)  # median of 3.0 and 1.0
    assert wall == pytest.approx(1.25)  # median of 0.5 and 2.0


def test_in_turn_lines_judge_the_complete_rows_they_cover(acceptance):
    records = (_row("freesolv", "random", 0.79, 1.3, 0.9)
               + _row("esol", "random", 0.45, 0.6, 0.5))
    rounds = (_rounds("freesolv", "random", [2.2, 2.1, 1.9], [1.2, 1.1, 1.3])
              + _rounds("huuskonen", "random", [1.0], [0.5]))  # not a report row: ignored
    rows = _verdicts(acceptance.acceptance_table(records, rounds))
    assert rows["throughput, in turn"][1:] == ["1/1", "-", "2.10x to 2.10x", "met so far"]
    assert rows["wall time, in turn"][1:] == ["1/1", "-", "1.20x to 1.20x", "met so far"]
    rounds += _rounds("esol", "random", [1.5, 1.8, 1.7], [0.9, 1.1, 1.2])
    rows = _verdicts(acceptance.acceptance_table(records, rounds))
    assert rows["throughput, in turn"][1:3] == ["1/2", "esol random"]
    assert rows["wall time, in turn"][1:] == ["2/2", "-", "1.10x to 1.20x", "met"]
    assert "throughput, in turn" not in _verdicts(acceptance.acceptance_table(records))


def test_a_later_in_turn_file_replaces_the_rows_it_measures(acceptance):
    """Several ``--in-turn`` files: a (set, split) takes every round from the last file
    that has it, so rounds of older and newer code never mix in one median."""
    def rnd(dataset, split, r, ratio):
        return [{"dataset": dataset, "split": split, "seed": 10, "round": r, "tool": tool,
                 "result": {"mol_per_s": speed, "seconds": seconds}}
                for tool, speed, seconds in (("setattn", 1000.0 * ratio, 10.0),
                                             ("chemprop_w96", 1000.0, 15.0),
                                             ("chemprop", 300.0, 30.0))]
    old = rnd("freesolv", "scaffold", 0, 1.8) + rnd("freesolv", "scaffold", 1, 1.9) \
        + rnd("esol", "random", 0, 2.5)
    new = rnd("freesolv", "scaffold", 0, 2.1) + rnd("freesolv", "scaffold", 1, 2.3)
    merged = acceptance.latest_rounds([old, new])
    ratios = acceptance.in_turn_ratios(merged)
    assert ratios[("freesolv", "scaffold")][0] == pytest.approx(2.2)  # new rounds only
    assert ratios[("esol", "random")][0] == pytest.approx(2.5)  # kept from the old file
    assert len(merged) == len(new) + 3
    assert acceptance.in_turn_ratios(acceptance.latest_rounds([new, old]))[
        ("freesolv", "scaffold")][0] == pytest.approx(1.85)
