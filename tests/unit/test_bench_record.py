"""benchmarks/helpers/record.py: a record round-trips, a malformed one is refused, ``markdown``
prints every row; a tiny engine and scaling run write valid records to a temporary folder."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"


@pytest.fixture()
def record(monkeypatch):
    """``benchmarks/helpers/record.py``, importable for this test only."""
    monkeypatch.syspath_prepend(str(BENCH))
    from helpers import record
    return record


def _example(record) -> dict:
    rows = [["small | sets", "1.23", "2.46", "2.00x"], ["large", "10.0", "5.0", "0.50x"]]
    tables = [record.table("engine cases", ["case", "setattn ms", "anchor ms", "ratio"], rows,
                           "ratio = anchor / setattn"),
              record.table("second", ["a"], [[1.5]])]
    return record.make_record("engine", "Engine", "what was measured", tables, threads=1,
                              raw={"seconds": [0.1]}, command="python x.py", load=1.25)


def test_a_record_round_trips_with_every_required_key(record, tmp_path):
    rec = _example(record)
    path = record.write_record(rec, tmp_path / "engine.json")
    back = record.read_record(path)
    assert back == rec
    assert record.problems(back) == []
    assert set(record.KEYS) <= set(back) and set(record.MACHINE_KEYS) <= set(back["machine"])
    assert back["machine"]["load"] == 1.25 and back["threads"] == 1
    assert back["tables"][1]["rows"] == [["1.5"]]  # cells become display strings
    assert isinstance(back["dirty"], bool) and len(back["commit"]) >= 7
    assert back["date"].endswith("Z")


def test_a_malformed_record_is_refused_and_named(record, tmp_path):
    rec = _example(record)
    rec["tables"][0]["rows"].append(["only two", "cells"])
    del rec["summary"]
    with pytest.raises(ValueError, match="no key 'summary'.*a row of 2 cells, not 4"):
        record.write_record(rec, tmp_path / "bad.json")
    assert not (tmp_path / "bad.json").exists()


def test_markdown_prints_every_row_and_the_provenance(record):
    rec = _example(record)
    text = record.markdown(rec)
    assert "| small \\| sets | 1.23 | 2.46 | 2.00x |" in text  # a | inside a cell is escaped
    assert "| large | 10.0 | 5.0 | 0.50x |" in text
    assert "| 1.5 |" in text
    assert [line for line in text.splitlines() if line.startswith("|---")] == [
        "|---|---|---|---|", "|---|"]
    assert "ratio = anchor / setattn" in text and "what was measured" in text
    assert rec["commit"][:10] in text and "load 1.25" in text


def test_the_command_is_written_from_the_repository_root(record):
    line = record.command_line([str(BENCH / "engine.py"), "--only", "small set"])
    assert line == ".venv/bin/python benchmarks/engine.py --only 'small set'"


def _run(args: list[str]) -> None:
    subprocess.run([sys.executable, *args], cwd=ROOT, check=True, capture_output=True,
                   text=True, timeout=300)


def test_a_tiny_engine_run_writes_a_valid_record(record, tmp_path):
    out = tmp_path / "engine.json"
    _run(["benchmarks/engine.py", "--threads", "1", "--only", "small", "--repeats", "1",
          "--no-memory", "--out", str(out)])
    rec = json.loads(out.read_text())
    assert record.problems(rec) == [] and rec["benchmark"] == "engine"
    (comparison,) = rec["tables"]
    assert len(comparison["rows"]) == 3  # small: three anchors
    assert all(row[3].endswith("x") and float(row[3][:-1]) > 0 for row in comparison["rows"])
    assert "--only small" in rec["command"]


def test_a_tiny_scaling_run_writes_a_record_and_a_picture(record, tmp_path):
    out, picture = tmp_path / "scaling.json", tmp_path / "scaling.png"
    _run(["benchmarks/scaling.py", "--sizes", "32", "64", "--repeats", "1", "--no-memory",
          "--out", str(out), "--picture", str(picture)])
    rec = json.loads(out.read_text())
    assert record.problems(rec) == []
    assert [row[0] for row in rec["tables"][0]["rows"]] == ["32", "64"]
    assert len(rec["raw"]["points"]) == 6 and picture.stat().st_size > 1000


def _git(repo: Path, *args: str) -> str:
    import subprocess

    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
                          cwd=repo, check=True, capture_output=True, text=True).stdout.strip()


def _commit(repo: Path, files: dict[str, str]) -> str:
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "change")
    return _git(repo, "rev-parse", "HEAD")


def test_a_record_knows_whether_the_code_it_exercises_changed_since(record, tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    first = _commit(repo, {"setattn/engine/a.py": "a", "setattn/scores.py": "s",
                           "setattn/topology.py": "t", "setattn/cli/main.py": "c",
                           "setattn/attention_graph.py": "g", "setattn/capture.py": "p",
                           "setattn/nn/conv.py": "n", "setattn/molprop/m.py": "m",
                           "README.md": "r"})
    trees = record.library_trees("molecules", first, repo)
    engine = ["setattn/attention_graph.py", "setattn/capture.py", "setattn/engine",
              "setattn/scores.py", "setattn/topology.py"]
    assert sorted(trees["paths"]) == sorted([*engine, "setattn/molprop", "setattn/nn"])
    assert sorted(record.library_trees("engine", first, repo)["paths"]) == engine  # no cli/
    assert sorted(record.library_trees("layers", first, repo)["paths"]) == sorted(
        [*engine, "setattn/nn"])
    assert sorted(record.library_trees("scaling", first, repo)["paths"]) == engine
    assert sorted(record.library_trees("examples", first, repo)["paths"]) == sorted(
        [*engine, "setattn/nn"])  # no molprop/, cli/ or serve/
    runs = {name: {"benchmark": name, "commit": first, "dirty": False}
            for name in ("engine", "molecules", "predict", "examples")}
    stored = {**runs["molecules"], "library": trees}  # as make_record writes it

    def status() -> dict:
        return {name: record.currency(r, repo) for name, r in
                {**runs, "stored": stored}.items()}

    assert set(status().values()) == {"current"}
    _commit(repo, {"setattn/cli/main.py": "c2", "README.md": "r2"})
    assert status() == {"engine": "current", "molecules": "current", "predict": "earlier",
                        "examples": "current", "stored": "current"}
    _commit(repo, {"setattn/molprop/m.py": "m2"})
    assert status() == {"engine": "current", "molecules": "earlier", "predict": "earlier",
                        "examples": "current", "stored": "earlier"}
    _commit(repo, {"setattn/nn/conv.py": "n2"})
    assert status()["examples"] == "earlier"
    _commit(repo, {"setattn/scores.py": "s2"})
    assert status()["engine"] == "earlier"
    assert record.currency({**runs["engine"], "dirty": True}, repo) == "unknown"
    assert record.currency({**runs["engine"], "commit": "f" * 40}, repo) == "unknown"
