"""benchmarks/attribution.py: each (task, set) is stored when it finishes, keyed by what its
scores depend on, and a rerun prints the record from the stored pieces without training."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture()
def attribution(monkeypatch):
    """``benchmarks/attribution.py``, importable for this test only."""
    monkeypatch.syspath_prepend(str(BENCH))
    import attribution
    return attribution


def _piece(task: str, name: str, parts: list[str]) -> dict:
    scores = {"integrated-gradients": 0.5, "occlusion": 0.4, "attention": 0.1, "random": 0.0}
    return {f"{task}/{name}/{part}": {"molecules": 7, "left_out": 1, "members": 3,
                                      "scores": scores, "source": "tox21.csv"}
            for part in parts}


def test_the_key_follows_the_library_the_source_and_the_settings(attribution):
    base = attribution.piece_material("benzene", "bundled", ["val", "test"], ["occlusion"],
                                      250, "lib-a")
    assert base == attribution.piece_material("benzene", "bundled", ["test", "val"],
                                              ["occlusion"], 250, "lib-a")
    others = [attribution.piece_material("benzene", "bundled", ["val", "test"],
                                         ["occlusion"], 250, "lib-b"),
              attribution.piece_material("benzene", "bundled", ["val", "test"],
                                         ["occlusion"], 100, "lib-a"),
              attribution.piece_material("benzene", "unused", ["val", "test"],
                                         ["occlusion"], 250, "lib-a"),
              attribution.piece_material("benzene", "bundled", ["test"], ["occlusion"],
                                         250, "lib-a")]
    assert all(other != base for other in others)
    assert base["source"] != others[2]["source"]  # Tox21 against the Huuskonen files


def test_a_finished_piece_is_stored_and_never_run_again(attribution, monkeypatch, tmp_path):
    calls = []

    def fake_run(task, name, parts, methods, limit, work, library):
        calls.append((task, name))
        return _piece(task, name, parts)

    monkeypatch.setattr(attribution, "run_piece", fake_run)
    argv = ["--sets", "bundled", "--tasks", "benzene", "--limit", "5", "--store",
            str(tmp_path / "store"), "--work", str(tmp_path / "work")]
    attribution.main([*argv, "--out", str(tmp_path / "a.json")])
    assert calls == [("benzene", "bundled")]
    stored = list((tmp_path / "store" / "attribution").glob("*.json"))
    assert len(stored) == 1
    assert json.loads(stored[0].read_text())["describes"] == {"task": "benzene",
                                                              "set": "bundled"}
    attribution.main([*argv, "--out", str(tmp_path / "b.json")])
    assert calls == [("benzene", "bundled")]  # read back, not run again
    first, second = (json.loads((tmp_path / f).read_text()) for f in ("a.json", "b.json"))
    assert first["tables"] == second["tables"]
    assert "benzene on Tox21 0.500" in second["summary"]
    attribution.main([*argv[:-4], "--limit", "6", *argv[-4:], "--out",
                      str(tmp_path / "c.json")])
    assert calls == [("benzene", "bundled")] * 2  # another limit is another piece
