"""The examples benchmark's record: rows rerun one at a time land as each finishes, the
rows not rerun are kept, and a record holding a row made with other library code reads
as an earlier record."""

from __future__ import annotations

import importlib.util
import json
import subprocess
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture()
def bench(monkeypatch):
    """benchmarks/examples.py under its own module name (``examples`` is also a folder)."""
    monkeypatch.syspath_prepend(str(BENCH))
    spec = importlib.util.spec_from_file_location("bench_examples", BENCH / "examples.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def head() -> str:
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=BENCH.parent, check=True,
                          capture_output=True, text=True).stdout.strip()


def row(name: str, result: str, commit: str) -> list[str]:
    return [name, f"examples/{name}.py", result, "published", "1", commit[:7]]


def test_a_rerun_row_replaces_its_own_in_the_examples_order(bench):
    kept = [row("gat_cora", "a", "x"), row("trec", "b", "x")]
    rows = bench.merged(kept, row("sets", "c", "y"))
    assert [r[0] for r in rows] == ["gat_cora", "sets", "trec"]
    rows = bench.merged(rows, row("trec", "d", "y"))
    assert [r[2] for r in rows] == ["a", "c", "d"]


def test_a_row_of_other_library_code_makes_the_record_earlier(bench):
    from helpers.record import currency

    now = head()
    assert bench.stale_row([row("sets", "a", now)]) is None
    assert currency(bench.examples_record([row("sets", "a", now)])) == "current"
    # the repository's first commit had no library code like HEAD's
    first = subprocess.run(["git", "rev-list", "--max-parents=0", "HEAD"], cwd=BENCH.parent,
                           check=True, capture_output=True, text=True).stdout.split()[0]
    rows = [row("gat_cora", "a", now), row("sets", "b", first)]
    assert bench.stale_row(rows) == first[:7]
    record = bench.examples_record(rows)
    assert record["commit"] == first and currency(record) == "earlier"
    unknown = bench.examples_record([row("sets", "a", "0000000")])
    assert currency(unknown) == "unknown"


def test_each_row_lands_before_the_next_runs_and_a_failure_keeps_them(bench, monkeypatch,
                                                                     tmp_path):
    from helpers.record import write_record

    out = tmp_path / "examples.json"
    write_record(bench.examples_record([row("mr", "kept", head())]), out)
    seen = []

    def run_example(name, work, commit, quick=False):
        if name == "trec":
            seen.append(json.loads(out.read_text()))
            raise RuntimeError("trec failed")
        return row(name, f"new {name}", commit)

    monkeypatch.setattr(bench, "run_example", run_example)
    with pytest.raises(RuntimeError, match="trec failed"):
        bench.main(["--only", "sets", "trec", "--out", str(out), "--work", str(tmp_path)])
    landed = [r[:3] for r in seen[0]["tables"][0]["rows"]]
    assert landed == [["sets", "examples/sets.py", "new sets"],
                      ["mr", "examples/mr.py", "kept"]]
    assert json.loads(out.read_text()) == seen[0]


def test_a_smoke_run_does_not_keep_the_real_rows(bench, monkeypatch, tmp_path):
    from helpers.record import write_record

    out = tmp_path / "examples.json"
    write_record(bench.examples_record([row("mr", "kept", head())]), out)
    monkeypatch.setattr(bench, "run_example",
                        lambda name, work, commit, quick=False: row(name, "smoke", commit))
    bench.main(["--only", "sets", "--quick", "--out", str(out), "--work", str(tmp_path)])
    assert [r[0] for r in json.loads(out.read_text())["tables"][0]["rows"]] == ["sets"]


def test_another_benchmarks_record_is_not_taken_for_the_examples(bench, tmp_path):
    other = tmp_path / "layers.json"
    other.write_text(json.dumps({"benchmark": "layers", "tables": []}))
    with pytest.raises(ValueError, match="layers.json: not an examples record"):
        bench.kept_rows(other)


def test_an_example_writes_under_a_path_relative_to_the_repository(bench, tmp_path):
    # the example prints its --out into the result line that the record keeps
    inside = bench.command_of("sets", bench.ROOT / "runs" / "bench_examples")
    assert inside[inside.index("--out") + 1] == "runs/bench_examples/sets"
    outside = bench.command_of("sets", tmp_path)
    assert outside[outside.index("--out") + 1] == str(tmp_path.resolve() / "sets")
    assert "--out" not in bench.command_of("cnn_rand_trec", tmp_path)


def test_the_summary_keeps_each_result_and_drops_its_particulars(bench, tmp_path):
    mr = ("MR (rt-polarity) test accuracy 80.14 %; baseline 77.88 % (10-fold "
          "cross-validation; 762 s; metrics in runs/mr)")
    dates = "exact match 1.0000 (epoch 8/8 chosen on validation (1.0000); 297 s)"
    assert bench.headline(mr) == "MR (rt-polarity) test accuracy 80.14 %; baseline 77.88 %"
    assert bench.headline(dates) == "exact match 1.0000"
    assert bench.headline("CNN-rand TREC 89.76 %") == "CNN-rand TREC 89.76 %"
    assert bench.headline("89.76 % over 5 seed(s)") == "89.76 % over 5 seed(s)"
    from helpers.record import write_record

    out = tmp_path / "examples.json"
    made = bench.examples_record([row("mr", mr, head())])
    made["date"], made["machine"]["load"] = "2026-01-02T03:04:05Z", 0.5  # when the rows ran
    write_record(made, out)
    before = json.loads(out.read_text())
    bench.main(["--rebuild", "--out", str(out)])  # runs nothing
    after = json.loads(out.read_text())
    assert after["tables"] == before["tables"]
    assert all(after[k] == before[k] for k in ("commit", "date", "machine", "library"))
    assert "mr MR (rt-polarity) test accuracy 80.14 %; baseline 77.88 %." in after["summary"]
