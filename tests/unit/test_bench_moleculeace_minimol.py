"""The MiniMol anchors of the MoleculeACE benchmark without MiniMol: fingerprints faked by
RDKit's Morgan bits (as in test_bench_minimol), the rows the heads see, their scores,
keys, stored runs and table columns."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pytest
from test_bench_minimol import TINY, fake_fingerprints

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
SET, OTHER = "CHEMBL2835_Ki", "CHEMBL1871_Ki"  # the two smallest sets
HEADS = ("minimol_krr", "minimol_mlp")


@pytest.fixture()
def bench(monkeypatch):
    """``moleculeace`` and ``minimol_runs``, MiniMol's fingerprints faked (calls counted),
    a small MLP head, setattn's runs faked."""
    monkeypatch.syspath_prepend(str(BENCH))
    import moleculeace
    from helpers import minimol_runs

    calls: list[list[str]] = []
    monkeypatch.setattr(minimol_runs, "compute_fingerprints", fake_fingerprints(calls))
    monkeypatch.setitem(minimol_runs.HEADS, "minimol_mlp", minimol_runs.MlpHead(**TINY))
    monkeypatch.setattr(moleculeace, "run_setattn", lambda *a: {"seconds": 1.0, "rmse": 0.5,
                                                                "cliff_rmse": 0.6})
    return moleculeace, minimol_runs, calls


def arguments(root: Path, report: str = "test", sets: tuple[str, ...] = (SET,),
              anchors: tuple[str, ...] = HEADS) -> argparse.Namespace:
    """``run_all``'s arguments: working files in ``root/out``, the store ``root/store``."""
    return argparse.Namespace(sets=list(sets), anchors=list(anchors), setattn_flags="",
                              report=report, out=root / "out", store=root / "store",
                              tables_only=False)


def stored_run(ace, root: Path, report: str, tool: str, name: str = SET) -> dict:
    """The stored run of ``tool`` on set ``name`` in the store ``root/store``."""
    from helpers.record import load_stored, run_key

    rows, labels = ace.report_rows(ace.read_set(name), report)
    return load_stored("anchors", run_key(ace.materials(name, rows, labels, [])[tool]),
                       root / "store")


def stored_predictions(ace, root: Path, report: str, tool: str) -> dict:
    """The stored run's test predictions of ``tool`` on ``SET``, by SMILES."""
    run = stored_run(ace, root, report, tool)
    return dict(zip(run["smiles"], np.array(run["predictions"])[:, 0].tolist()))


def relabelled(ace, monkeypatch, part: str, shift: float) -> None:
    """``read_set`` with the targets of the rows of ``part`` (by ``split_column``) moved."""
    read = ace.read_set

    def read_set(name):
        rows = read(name)
        labels = ace.split_column(rows)
        return [dict(r, y=r["y"] + shift * (i % 3 + 1)) if label == part else r
                for i, (r, label) in enumerate(zip(rows, labels))]

    monkeypatch.setattr(ace, "read_set", read_set)


def test_the_heads_see_the_split_chemprop_sees_and_never_the_test_labels(bench, tmp_path,
                                                                        monkeypatch):
    ace, mm, _ = bench
    seen = {}

    def spy(name, head):
        def fit(x, y, labels, *rest, **kw):
            seen[name] = list(labels)
            return head(x, y, labels, *rest, **kw)
        return fit

    for name in ("krr_head", "mlp_head"):
        monkeypatch.setattr(mm, name, spy(name, getattr(mm, name)))
    first = ace.run_all(arguments(tmp_path / "a"))
    rows = ace.read_set(SET)
    with open(tmp_path / "a" / "out" / SET / "test" / "data.csv") as handle:  # chemprop's
        column = [line.rsplit(",", 1)[1].strip() for line in handle.readlines()[1:]]
    assert seen["krr_head"] == seen["mlp_head"] == ace.split_column(rows) == column
    assert column.count("val") == 49 and column.count("test") == 126
    relabelled(ace, monkeypatch, "test", 100.0)
    moved = ace.run_all(arguments(tmp_path / "b"))
    relabelled(ace, monkeypatch, "val", 1.0)
    ace.run_all(arguments(tmp_path / "c"))
    for tool in HEADS:
        a = stored_predictions(ace, tmp_path / "a", "test", tool)
        assert len(a) == 126
        assert a == stored_predictions(ace, tmp_path / "b", "test", tool)
        assert moved[f"{SET} test {tool}"]["rmse"] > 50 * first[f"{SET} test {tool}"]["rmse"]
    # the validation labels are what the kernel ridge chooses on
    a, c = (stored_run(ace, tmp_path / root, "test", "minimol_krr")["head"]["chosen"][0]
            for root in "ac")
    assert a["val_mse"] != c["val_mse"] and a["train_rows"] == c["train_rows"] == 440


@pytest.mark.parametrize("report", ["test", "val"])
def test_the_cliff_rmse_is_over_the_scored_cliff_molecules(bench, tmp_path, report):
    ace, _, calls = bench
    runs = ace.run_all(arguments(tmp_path, report))
    rows = ace.read_set(SET)
    labels = ace.split_column(rows)
    scored = [r for r, label in zip(rows, labels) if label == ("test" if report == "test"
                                                               else "val")]
    cliffs = [r for r in scored if r["cliff"]]
    assert 0 < len(cliffs) < len(scored)

    def rmse(predicted, part):
        return float(np.sqrt(np.mean([(predicted[r["smiles"]] - r["y"]) ** 2 for r in part])))

    for tool in HEADS:
        predicted = stored_predictions(ace, tmp_path, report, tool)
        assert set(predicted) == {r["smiles"] for r in scored}
        run = runs[f"{SET} {report} {tool}"]
        assert run["rmse"] == pytest.approx(rmse(predicted, scored))
        assert run["cliff_rmse"] == pytest.approx(rmse(predicted, cliffs))
    featurised = {s for call in calls for s in call}
    authors_test = {r["smiles"] for r in rows if r["split"] == "test"}
    assert bool(featurised & authors_test) == (report == "test")


def test_each_head_has_its_own_key_and_chemprops_are_unchanged(bench):
    ace, _, _ = bench
    from helpers.record import run_key

    keys = {}
    for report in ("test", "val"):
        rows, labels = ace.report_rows(ace.read_set(SET), report)
        keys[report] = {t: run_key(m) for t, m in ace.materials(SET, rows, labels, []).items()}
        assert len(set(keys[report].values())) == 4
    assert (keys["test"]["chemprop"], keys["val"]["chemprop"]) == ("e87c565dd1c9b6cf",
                                                                   "f55ef1e7c2fc72b4")
    five = ace.materials(SET, rows, labels, ["--ensemble-size", "5"])
    assert run_key(five["minimol_krr"]) == keys["val"]["minimol_krr"]  # one model always
    assert five["minimol_mlp"]["members"] == five["chemprop"]["members"] == 5
    assert five["minimol_krr"]["members"] == 1
    assert five["minimol_mlp"]["flags"][:2] == ["--head", "MlpHead"]


def test_stored_runs_are_reused_and_the_fingerprints_shared_by_the_sets(bench, tmp_path,
                                                                       monkeypatch):
    ace, mm, calls = bench
    args = arguments(tmp_path, "val", (SET, OTHER))
    first = ace.run_all(args)
    assert len(calls) == 2  # one command per set, both heads reading it
    assert not set(calls[0]) & set(calls[1])
    kept, _, _ = mm.load_pool(tmp_path / "out" / "minimol" / mm.POOL)
    assert set(kept) == set(calls[0]) | set(calls[1])
    assert len(list((tmp_path / "store" / "anchors").glob("*.json"))) == 4
    for name in ("krr_head", "mlp_head", "compute_fingerprints"):
        monkeypatch.setattr(mm, name, lambda *a, **k: pytest.fail("fitted again"))
    assert ace.run_all(args) == first
    args.out, args.tables_only = tmp_path / "elsewhere", True  # no fingerprints kept there
    assert ace.run_all(args) == first
    args.anchors = [*HEADS, "chemprop"]
    with pytest.raises(SystemExit, match="2 stored run"):
        ace.run_all(args)


def _run(name: str, tool: str, rmse: float) -> dict:
    return {"set": name, "report": "val", "tool": tool, "rmse": rmse, "cliff_rmse": rmse + 0.1}


def test_minimol_columns_only_where_their_runs_are(bench):
    ace, _, _ = bench
    runs = {f"{s} {t}": _run(s, t, v) for s in (SET, OTHER)
            for t, v in (("setattn", 0.5), ("chemprop", 0.6), ("minimol_krr", 0.4))}
    plain, text = ace.build_tables(runs, [SET, OTHER], ["setattn", "chemprop"], "val")
    assert plain["columns"] == ["set", "setattn", "chemprop"]
    assert plain["notes"].endswith("the paper's published results.")
    assert text.endswith("Better than chemprop at the same ensemble size on 2 of 2.")
    both, text = ace.build_tables(runs, [SET, OTHER], ["setattn", "chemprop", *HEADS], "val")
    assert both["columns"] == ["set", "setattn", "chemprop", "minimol_krr"]
    assert both["rows"][-1] == ["mean of 2", "0.500 (0.600)", "0.600 (0.700)", "0.400 (0.500)"]
    assert text.endswith("Better than minimol_krr on 0 of 2.") and "minimol_krr:" in both["notes"]


def _written(ace, monkeypatch) -> list:
    """Where each later ``ace.main`` call writes its record (nothing trained or written)."""
    written = []
    monkeypatch.setattr(ace, "run_all", lambda args: {})
    monkeypatch.setattr(ace, "finish", lambda record, out: written.append(out))
    return written


def test_a_call_with_minimol_never_writes_the_maintained_record(bench, monkeypatch):
    ace, _, _ = bench
    written = _written(ace, monkeypatch)
    ace.main([])
    ace.main(["--anchors", "chemprop", "minimol_krr"])
    assert written[0] is None and written[1] is not None


def test_record_names_where_a_reading_with_minimol_is_kept(bench, monkeypatch, tmp_path):
    ace, _, _ = bench
    written = _written(ace, monkeypatch)
    kept = tmp_path / "moleculeace_minimol.json"
    ace.main(["--anchors", "chemprop", "minimol_krr", "--record", str(kept)])
    ace.main(["--anchors", "chemprop", "minimol_krr", "--out", str(tmp_path / "x")])
    assert written == [kept, tmp_path / "x" / "moleculeace.json"]
