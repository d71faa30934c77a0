"""benchmarks/ holds maintained benchmarks only, each with its records: every file of
results/ belongs to a script (``NAME.json``, or ``NAME_PART.json`` for a part a script
writes on its own, such as a report split by cost), every record is well formed, at most
3 files per script, at most 15 scripts (files that run as a program; the modules they
share, in ``helpers/``, are not counted). A script is as long as its benchmark
needs: there is no line quota. Experiments that decided a default live in ``decisions/``
beside the decision log, with their records, and are not benchmarks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
RESULTS = BENCH / "results"
PICTURES = {"scaling.png": "scaling"}  # results that are not records: file -> its script
MAX_SCRIPTS = 15


def _scripts() -> list[Path]:
    """The benchmark scripts; hidden folders (chemprop's virtual environment, made by the
    molecule and prediction benchmarks) are not ours, and ``decisions/`` holds experiments."""
    return sorted(p for p in BENCH.rglob("*.py")
                  if not any(part.startswith(".") or part == "decisions"
                             for part in p.relative_to(BENCH).parts))


def _owner(path: Path) -> str:
    """The script a result file belongs to: ``NAME`` of ``NAME.json`` or
    ``NAME_PART.json`` (the longest script name that fits), or the picture's."""
    if path.name in PICTURES:
        return PICTURES[path.name]
    names = sorted((p.stem for p in _scripts()), key=len, reverse=True)
    return next((n for n in names if path.stem == n or path.stem.startswith(n + "_")),
                path.stem)


@pytest.fixture()
def record(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    from helpers import record
    return record


def test_at_most_fifteen_scripts():
    scripts = [p for p in _scripts() if 'if __name__ == "__main__":' in p.read_text()]
    assert 0 < len(scripts) <= MAX_SCRIPTS, [p.name for p in scripts]


def test_every_result_belongs_to_a_script_at_most_three_each():
    names = {p.stem for p in _scripts()}
    files = [p for p in RESULTS.iterdir() if not p.name.startswith(".")]
    assert files
    for path in files:
        assert path.suffix == ".json" or path.name in PICTURES, path.name
        assert _owner(path) in names, f"{path.name} belongs to no script"
    per_script: dict[str, int] = {}
    for path in files:
        per_script[_owner(path)] = per_script.get(_owner(path), 0) + 1
    assert max(per_script.values()) <= 3, per_script


def test_every_record_is_well_formed(record):
    for path in sorted(RESULTS.glob("*.json")):
        rec = json.loads(path.read_text())
        assert record.problems(rec) == [], path.name
        assert rec["benchmark"] in (path.stem, _owner(path)), path.name
        assert rec["tables"] and all(t["rows"] for t in rec["tables"]), path.name
        assert len(rec["commit"]) == 40 and rec["summary"].strip(), path.name


def test_each_decision_record_is_well_formed_and_has_its_experiment(record):
    decisions = BENCH / "decisions"
    paths = sorted(decisions.glob("*.json"))
    assert paths and (decisions / "DECISIONS.md").is_file()
    for path in paths:
        rec = json.loads(path.read_text())
        assert record.problems(rec) == [], path.name
        assert (decisions / f"{rec['benchmark']}.py").is_file(), path.name
