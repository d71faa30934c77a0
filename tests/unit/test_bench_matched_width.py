"""``benchmarks/matched_width.py``: the order of the tools and the per-round ratios."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture()
def matched(monkeypatch):
    """``benchmarks/matched_width.py``, importable for this test only."""
    monkeypatch.syspath_prepend(str(BENCH))
    import matched_width

    return matched_width


def _round(ours: float, theirs: float, ours_s: float, default_s: float) -> dict:
    return {"setattn": {"result": {"mol_per_s": ours, "seconds": ours_s}},
            "chemprop_w96": {"result": {"mol_per_s": theirs, "seconds": 1.0}},
            "chemprop": {"result": {"mol_per_s": 1.0, "seconds": default_s}}}


def test_each_tool_goes_first_in_turn(matched):
    assert [matched._order(r)[0] for r in range(4)] == [
        "setattn", "chemprop_w96", "chemprop", "setattn"]
    assert all(sorted(matched._order(r)) == sorted(matched.TOOLS) for r in range(4))


def test_the_ratios_are_medians_of_the_rounds_ratios(matched):
    # throughput ratios 3.0, 1.0, 2.0: median 2.0, where the ratio of the medians is
    # 3000 / 1000 = 3.0; wall-time ratios 2.0, 0.5, 1.5: median 1.5
    rounds = [_round(3000.0, 1000.0, 10.0, 20.0), _round(1000.0, 1000.0, 40.0, 20.0),
              _round(6000.0, 3000.0, 20.0, 30.0)]
    row = matched.summary_row("esol", "random", 10, rounds)
    assert row[:4] == ["esol", "random", 10, 3]
    assert row[4:8] == ["3000", "1000", "2.00x", "1.00x to 3.00x"]
    assert row[8:] == ["20", "20", "1.50x", "0.50x to 2.00x"]


def test_saved_rounds_carry_their_round(matched, tmp_path):
    for r, tools in enumerate([("setattn", "chemprop"), ("chemprop_w96", "other")]):
        (tmp_path / f"round{r}").mkdir()
        (tmp_path / f"round{r}" / "results.json").write_text(json.dumps(
            [{"tool": t, "seed": 10} for t in tools]))
    saved = matched.saved_rounds(tmp_path, 3)  # round 2 has no folder: nothing from it
    assert [(s["round"], s["tool"]) for s in saved] == [
        (0, "setattn"), (0, "chemprop"), (1, "chemprop_w96")]  # "other" is no tool here


def test_width_300_compares_setattn_at_300_with_chemprop_defaults(matched):
    assert [matched._order(r, matched.WIDE_TOOLS)[0] for r in range(3)] == [
        "setattn", "chemprop", "setattn"]
    wide = " ".join(matched.WIDE_FLAGS)
    assert matched._mine({"tool": "setattn", "flags": wide}, matched.WIDE_FLAGS,
                         matched.WIDE_TOOLS)
    assert not matched._mine({"tool": "setattn", "flags": ""}, matched.WIDE_FLAGS,
                             matched.WIDE_TOOLS)  # the defaults' run in the same folder
    assert not matched._mine({"tool": "chemprop_w96", "flags": "x"}, matched.WIDE_FLAGS,
                             matched.WIDE_TOOLS)
    assert not matched._mine({"tool": "setattn", "flags": wide}, (), matched.TOOLS)
    rounds = [{"setattn": {"result": {"mol_per_s": m, "parameters": 900_000}},
               "chemprop": {"result": {"mol_per_s": c, "parameters": 318_301}}}
              for m, c in ((2000.0, 1000.0), (900.0, 600.0), (1500.0, 1000.0))]
    row = matched.wide_row("esol", "scaffold", 10, rounds)  # ratios 2.0, 1.5, 1.5
    assert row == ["esol", "scaffold", 10, 3, "900,000", "318,301", "1500", "1000", "1.50x",
                   "1.50x to 2.00x"]


def test_width_300_refuses_save(matched, tmp_path):
    with pytest.raises(SystemExit):
        matched.main(["--width", "300", "--save", str(tmp_path / "x.json")])


def test_classification_sets_are_accepted(matched, capsys):
    # the report's cost lines cover every row; --rounds 0 stops the call after parsing,
    # so the error names --rounds, not --datasets
    with pytest.raises(SystemExit):
        matched.main(["--datasets", "tox21", "bace1_active", "--rounds", "0"])
    err = capsys.readouterr().err
    assert "--rounds" in err and "invalid choice" not in err


def _saved(dataset: str, split: str, r: int, ours: float, theirs: float) -> list[dict]:
    """One saved round of the three tools (``--save``'s records)."""
    results = {"setattn": {"mol_per_s": ours, "seconds": 10.0},
               "chemprop_w96": {"mol_per_s": theirs, "seconds": 5.0},
               "chemprop": {"mol_per_s": 100.0, "seconds": 30.0}}
    return [{"dataset": dataset, "split": split, "seed": 10, "round": r, "tool": t,
             "result": res} for t, res in results.items()]


def test_print_saved_takes_each_row_from_the_last_file(matched, tmp_path, capsys):
    old, new = tmp_path / "old.json", tmp_path / "new.json"
    old.write_text(json.dumps(_saved("freesolv", "scaffold", 0, 1800.0, 1000.0)
                              + _saved("freesolv", "scaffold", 1, 1900.0, 1000.0)
                              + _saved("esol", "random", 0, 3000.0, 1000.0)))
    # new measures freesolv scaffold again; its round 1 lacks chemprop and is left out
    new.write_text(json.dumps(_saved("freesolv", "scaffold", 0, 2500.0, 1000.0)
                              + _saved("freesolv", "scaffold", 1, 9000.0, 1000.0)[:2]))
    rows = matched.saved_rows([old, new])
    assert [(r[0], r[1], r[3], r[6], r[-1]) for r in rows] == [
        ("freesolv", "scaffold", 1, "2.50x", "new.json"),  # not mixed with old's 1.80x
        ("esol", "random", 1, "3.00x", "old.json")]  # in SETS order, FreeSolv first
    assert rows[0][8:12] == ["10", "30", "3.00x", "3.00x to 3.00x"]
    matched.main(["--print-saved", str(old), str(new)])
    out = capsys.readouterr().out
    assert "| freesolv | scaffold | 10 | 1 | 2500 | 1000 | 2.50x" in out and "new.json" in out


def test_print_saved_names_a_bad_or_missing_file(matched, tmp_path, capsys):
    bad = tmp_path / "results.json"
    bad.write_text(json.dumps([{"dataset": "esol", "tool": "setattn"}]))  # no round
    with pytest.raises(ValueError, match="results.json: not a file of matched_width"):
        matched.saved_rows([bad])
    with pytest.raises(SystemExit):
        matched.main(["--print-saved", str(tmp_path / "absent.json")])
    assert "absent.json" in capsys.readouterr().err
