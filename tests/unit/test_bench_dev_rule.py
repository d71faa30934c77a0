"""``benchmarks/dev_rule.py``: a default's rule recomputed from development records."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture()
def rule(monkeypatch):
    """``benchmarks/dev_rule.py``, importable for this test only."""
    monkeypatch.syspath_prepend(str(BENCH))
    import dev_rule

    return dev_rule


def _rec(dataset, split, seed, flags, metric, report="val", tool="setattn"):
    return {"dataset": dataset, "split": split, "seed": seed, "flags": flags,
            "report": report, "tool": tool, "result": {"metric": metric}}


def test_ratios_on_shared_seeds_and_lower_is_better_for_both_metrics(rule):
    records = [_rec("esol", "random", 20, "", 0.6), _rec("esol", "random", 21, "", 0.5),
               _rec("esol", "random", 20, "--x 1", 0.54),  # seed 21 not run: left out
               _rec("bace1_active", "random", 20, "", 0.90),
               _rec("bace1_active", "random", 20, "--x 1", 0.95),  # ROC-AUC: higher wins
               _rec("esol", "random", 22, "", 0.1, report="test"),  # a test part: ignored
               _rec("esol", "random", 22, "--x 1", 9.9, tool="chemprop")]
    rows = {r["row"]: r for r in rule.compare(records, "", "--x 1")}
    assert rows[("esol", "random")]["seeds"] == [20]
    assert rows[("esol", "random")]["ratio"] == pytest.approx(0.9)
    assert rows[("bace1_active", "random")]["ratio"] == pytest.approx(0.90 / 0.95)


def test_verdict_needs_both_the_geometric_mean_and_the_worst_row(rule):
    rows = [{"ratio": 0.96}, {"ratio": 1.02}]
    geo, worst, holds = rule.verdict(rows, 0.99, 0.03)
    assert geo == pytest.approx(math.sqrt(0.96 * 1.02)) and worst == 1.02 and holds
    assert not rule.verdict(rows, 0.98, 0.03)[2]  # geometric mean 0.990 > 0.98
    assert not rule.verdict(rows, 0.99, 0.01)[2]  # a row 2 % worse > 1 %


def test_partial_rows_are_not_judged(rule, tmp_path, capsys):
    records = [_rec("esol", "random", s, f, 0.5) for s in (20, 21) for f in ("", "--x 1")]
    records += [_rec("freesolv", "random", 20, f, 1.0) for f in ("", "--x 1")]
    path = tmp_path / "r.json"
    path.write_text(json.dumps(records))
    rule.main(["--results", str(path), "--candidate", "--x 1", "--max-geomean", "1.0",
               "--max-worse", "0.0"])
    assert "not judged yet: fewer seeds on freesolv random" in capsys.readouterr().out


def test_a_baseline_row_the_candidate_has_not_run_keeps_the_rule_open(rule, tmp_path,
                                                                      capsys):
    records = [_rec("esol", "random", 20, f, 0.5) for f in ("", "--x 1")]
    records += [_rec("bace1", "scaffold", 20, "", 0.9)]  # the candidate's run is missing
    path = tmp_path / "r.json"
    path.write_text(json.dumps(records))
    args = ["--results", str(path), "--candidate", "--x 1", "--max-geomean", "1.0",
            "--max-worse", "0.0"]
    rule.main(args)
    assert "not judged yet: fewer seeds on bace1 scaffold" in capsys.readouterr().out
    rule.main([*args, "--datasets", "esol"])  # a rule over ESOL alone is complete
    assert "the rule holds" in capsys.readouterr().out


def test_a_set_can_take_its_baseline_from_other_flags(rule, tmp_path, capsys):
    records = [_rec("esol", "random", 20, "", 0.5), _rec("esol", "random", 20, "--x 1", 0.5),
               _rec("bace1", "random", 20, "", 2.0),  # an old default: not this baseline
               _rec("bace1", "random", 20, "--k on", 1.0),
               _rec("bace1", "random", 20, "--x 1", 1.1)]
    rows = rule.compare(records, "", "--x 1", {"bace1": "--k on"})
    assert {r["row"]: r["ratio"] for r in rows} == pytest.approx(
        {("esol", "random"): 1.0, ("bace1", "random"): 1.1})
    path = tmp_path / "r.json"
    path.write_text(json.dumps(records))
    args = ["--results", str(path), "--candidate", "--x 1", "--max-geomean", "1.1",
            "--max-worse", "0.05"]
    rule.main(args)  # against "" on BACE1 the candidate is 0.55x: the rule would hold
    assert "the rule holds" in capsys.readouterr().out
    rule.main([*args, "--baseline-for", "bace1", "--k on"])
    out = capsys.readouterr().out
    assert "(bace1: '--k on')" in out and "the rule does not hold" in out
    with pytest.raises(SystemExit):
        rule.main([*args, "--baseline-for", "bace2", "--k on"])
    assert "argument --baseline-for: unknown set 'bace2'" in capsys.readouterr().err


def test_a_row_only_the_candidate_has_run_keeps_the_rule_open(rule, tmp_path, capsys):
    records = [_rec("esol", "random", 20, f, 0.5) for f in ("", "--x 1")]
    records += [_rec("esol", "scaffold", 20, "--x 1", 0.7)]  # its baseline is still running
    path = tmp_path / "r.json"
    path.write_text(json.dumps(records))
    rule.main(["--results", str(path), "--candidate", "--x 1", "--max-geomean", "1.0",
               "--max-worse", "0.0"])
    assert "not judged yet: fewer seeds on esol scaffold" in capsys.readouterr().out
