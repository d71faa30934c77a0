"""Finished benchmark runs kept as data: the keys, the anchors stored and reused without
training, member 0 as the one-model anchor, and tables made from the stored runs only."""

from __future__ import annotations

import csv
import json
import shlex
from pathlib import Path

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
RESULTS = BENCH / "results"


@pytest.fixture()
def bench(monkeypatch):
    """The benchmark's modules, importable from benchmarks/ for this test only."""
    monkeypatch.syspath_prepend(str(BENCH))
    import molecules
    from helpers import molecule_jobs
    from helpers import record as stored_runs

    return molecule_jobs, molecules, stored_runs


def _job(jobs, labels=("test", "test", "train", "val"), dataset="esol"):
    table = jobs.MoleculeTable(["CCO", "CCN", "CCC", "CO"], [["1.0"], ["3.0"], ["2.0"], ["0.5"]])
    return jobs.Job(dataset, "random", 10, Path("d.csv"), "random10", list(labels), table)


def test_the_key_changes_with_each_thing_a_run_depends_on(bench, tmp_path):
    jobs, _, stored = bench
    settings = jobs.RunSettings(tmp_path, "test", 1, anchor_ensemble=3, store=tmp_path)

    def key(job=None, tool="chemprop", members=None, **changes):
        from dataclasses import replace

        return stored.run_key(jobs.run_material(job or _job(jobs), tool,
                                                replace(settings, **changes), members)[1])

    base = key()
    assert key() == base and len(base) == stored.KEY_DIGITS
    changed = {
        "split rows": key(_job(jobs, ("test", "train", "test", "val"))),
        "data file": key(_job(jobs, dataset="freesolv")),
        "tool": key(tool="chemprop_rdkit"),
        "flags": key(chemprop_flags=("--epochs", "3")),
        "members": key(members=1),
        "threads": key(threads=2),
        "round": key(round=0),
    }
    job = _job(jobs)
    job.seed = 11
    changed["seed"] = key(job)
    assert all(k != base for k in changed.values()), changed
    assert len(set(changed.values())) == len(changed)
    # setattn's runs are keyed by its library; an anchor's are not
    assert key(tool="setattn", library="a") != key(tool="setattn", library="b")
    assert key(library="a") == key(library="b") == base


def test_digests_see_bytes_rows_and_files(bench, tmp_path):
    _, _, stored = bench
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    a.write_bytes(b"smiles,y\nCCO,1.0\n")
    b.write_bytes(b"smiles,y\nCCO,1.00\n")
    assert stored.file_digest(a) != stored.file_digest(b)
    assert stored.file_digest([a, b]) != stored.file_digest([b, a])
    assert stored.rows_digest(["C", "N"], ["train", "test"]) != stored.rows_digest(
        ["C", "N"], ["test", "train"])
    with pytest.raises(ValueError, match="2 SMILES but 1"):
        stored.rows_digest(["C", "N"], ["train"])
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "m.py").write_text("x = 1\n")
    before = stored.tree_digest(tmp_path / "lib")
    (tmp_path / "lib" / "__pycache__").mkdir()
    (tmp_path / "lib" / "__pycache__" / "m.pyc").write_bytes(b"\0")
    assert stored.tree_digest(tmp_path / "lib") == before
    (tmp_path / "lib" / "m.py").write_text("x = 2\n")
    assert stored.tree_digest(tmp_path / "lib") != before


def test_a_stored_file_keeps_every_float_and_refuses_another_key(bench, tmp_path):
    _, _, stored = bench
    values = [0.1 + 0.2, 1 / 3, -2.718281828459045e-7, 12345.678901234567]
    path = stored.store_run("anchors", {"a": 1}, {"predictions": values}, tmp_path)
    run = stored.load_stored("anchors", path.stem, tmp_path)
    assert run["predictions"] == values  # bit for bit, not rounded
    assert stored.load_stored("anchors", "0" * 16, tmp_path) is None
    path.rename(path.with_name("0" * 16 + ".json"))
    with pytest.raises(ValueError, match="its key or material"):
        stored.load_stored("anchors", "0" * 16, tmp_path)


def _fake_chemprop(calls: list):
    """A stand-in for ``run_chemprop``: member i predicts i + 1 + a tenth of the row
    number on the test rows of the CSV, written where chemprop writes them."""
    def run(data, column, targets, task, run_dir, seed, threads, flags, members=1):
        calls.append(flags)
        with open(data, newline="") as handle:
            smiles = [r["smiles"] for r in csv.DictReader(handle) if r[column] == "test"]
        preds = []
        for i in range(members):
            values = [i + 1 + 0.1 * k for k in range(len(smiles))]
            folder = run_dir / f"model_{i}" if members > 1 else run_dir
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "test_predictions.csv").write_text(
                f"smiles,{targets[0]}\n" + "".join(f"{s},{v!r}\n" for s, v in zip(smiles, values)))
            preds.append(values)
        fits = [{"fit_seconds": 2.0 + i, "epochs": 4, "parameters": 9} for i in range(members)]
        result = {"seconds": 10.0, "fit_seconds": sum(f["fit_seconds"] for f in fits),
                  "epochs": 4 * members, "parameters": 9, "members": members, "fits": fits}
        return result, smiles, np.mean(preds, axis=0)[:, None]
    return run


def _split_job(jobs, settings, tmp_path):
    """One ESOL-like split written as the CSV both tools read."""
    job = _job(jobs)
    jobs.write_csv(tmp_path / "d.csv", job.table, ("y",), {"random10": job.labels})
    job.data = tmp_path / "d.csv"
    return job


def test_a_stored_anchor_is_reused_without_chemprop(bench, tmp_path, monkeypatch):
    jobs, _, stored = bench
    calls = []
    monkeypatch.setattr(jobs, "run_chemprop", _fake_chemprop(calls))
    settings = jobs.RunSettings(tmp_path / "out", "test", 1, anchor_ensemble=3,
                                store=tmp_path / "store")
    job = _split_job(jobs, settings, tmp_path)
    done = jobs.run_job(job, "chemprop", settings)
    assert calls == [[]] and set(done) == {"tool", "key", "seconds"}  # no metric in it
    run = stored.load_stored("anchors", done["key"], settings.store)
    assert run["smiles"] == ["CCO", "CCN"] and run["members"] == 3
    assert run["predictions"] == [[2.0], [pytest.approx(2.1)]]  # the mean of 3 members
    assert run["member0"]["predictions"] == [[1.0], [1.1]] and run["member0"]["fit_seconds"] == 2
    assert run["material"]["version"].startswith("chemprop 2.3.1")
    assert not (settings.out / "results.json").exists()  # an anchor's file is its record

    monkeypatch.setattr(jobs, "run_chemprop", lambda *a, **k: pytest.fail("trained again"))
    assert jobs.run_job(job, "chemprop", settings) is None
    record = jobs.stored_record(job, "chemprop", settings)
    assert record["result"]["metric"] == pytest.approx(((1.0 ** 2 + 0.9 ** 2) / 2) ** 0.5)
    assert record["result"]["members"] == 3 and record["flags"] == "--ensemble-size 3"
    # a new split is a new key: trained
    other = _job(jobs, ("train", "test", "test", "val"))
    assert jobs.stored_record(other, "chemprop", settings) is None
    with pytest.raises(pytest.fail.Exception, match="trained again"):
        jobs.run_job(other, "chemprop", settings)


def test_a_one_model_anchor_is_member_zero_of_the_stored_ensemble(bench, tmp_path,
                                                                    monkeypatch):
    jobs, _, _ = bench
    monkeypatch.setattr(jobs, "run_chemprop", _fake_chemprop([]))
    ensemble = jobs.RunSettings(tmp_path / "out", "test", 1, anchor_ensemble=3,
                                store=tmp_path / "store")
    single = jobs.RunSettings(tmp_path / "out", "test", 1, anchor_ensemble=1, members_of=3,
                              store=tmp_path / "store")
    job = _split_job(jobs, ensemble, tmp_path)
    assert jobs.stored_record(job, "chemprop", single) is None
    ens_key = jobs.run_job(job, "chemprop", ensemble)["key"]
    monkeypatch.setattr(jobs, "run_chemprop", lambda *a, **k: pytest.fail("trained again"))
    assert jobs.run_job(job, "chemprop", single) is None
    record = jobs.stored_record(job, "chemprop", single)
    assert record["flags"] == "" and record["result"]["members"] == 1
    assert record["result"]["member_of"] == ens_key and record["result"]["seconds"] is None
    assert record["result"]["metric"] == pytest.approx(((0.0 ** 2 + 1.9 ** 2) / 2) ** 0.5)
    # an ensemble of another size is no source of member 0
    other = jobs.RunSettings(tmp_path / "out", "test", 1, anchor_ensemble=1, members_of=5,
                             store=tmp_path / "store")
    assert jobs.stored_record(job, "chemprop", other) is None


def _fake_setattn(job, run_dir, settings):
    return {"seconds": 3.0, "metric": 0.75, "epochs": 6, "fit_seconds": 1.5,
            "parameters": 11}


def test_tables_come_from_the_stored_runs_only(bench, tmp_path, monkeypatch, capsys):
    jobs, molecules, stored = bench
    monkeypatch.setattr(jobs, "run_chemprop", _fake_chemprop([]))
    monkeypatch.setattr(jobs, "_run_setattn", _fake_setattn)
    base = ["--datasets", "freesolv", "--splits", "random", "--seeds", "20",
            "--store", str(tmp_path / "store"), "--out", str(tmp_path / "out"),
            "--setattn-library", "test"]
    with pytest.raises(SystemExit, match="3 stored run"):
        molecules.main([*base, "--tables-only"])
    molecules.main([*base, "--anchors-only"])  # both anchors, nothing else
    err = capsys.readouterr().err
    assert err.count("stored ") == 2 and "rmse" not in err.lower()
    assert "2 run(s) trained" in err
    assert len(list((tmp_path / "store" / "anchors").glob("*.json"))) == 2
    with pytest.raises(SystemExit) as missing:
        molecules.main([*base, "--tables-only"])
    assert "1 stored run(s) missing" in str(missing.value) and "setattn on freesolv" in str(
        missing.value)

    molecules.main([*base, "--skip-chemprop", "--train-only"])  # setattn, no table
    out, err = capsys.readouterr()
    assert "1 run(s) trained, 0 already stored" in err
    assert "rmse" not in (out + err).lower() and "0.750" not in out + err
    assert not (tmp_path / "out" / "molecules.json").exists()
    monkeypatch.setattr(jobs, "_run_setattn", lambda *a, **k: pytest.fail("trained"))
    molecules.main(base)  # the tables: every run is stored
    err = capsys.readouterr().err
    assert "0 run(s) trained, 3 already stored" in err
    assert len(list((tmp_path / "store" / "molecules").glob("*.json"))) == 1
    monkeypatch.setattr(jobs, "run_chemprop", lambda *a, **k: pytest.fail("trained"))
    monkeypatch.setattr(jobs, "_run_setattn", lambda *a, **k: pytest.fail("trained"))
    molecules.main([*base, "--tables-only"])
    record = json.loads((tmp_path / "out" / "molecules.json").read_text())
    tools = sorted(r["tool"] for r in record["raw"]["runs"])
    assert tools == ["chemprop", "chemprop_rdkit", "setattn"]
    assert record["tables"][0]["rows"][0][4] == "0.750"


def test_report_parts_name_their_sets_and_seeds(bench, tmp_path):
    _, molecules, _ = bench
    a = molecules.parse_args(["--report-part", "A", "--out", str(tmp_path)])
    assert a.set_seeds == {name: [696, 707, 718, 753, 974]
                           for name in ("freesolv", "esol", "huuskonen")}
    assert molecules.record_path(a) == tmp_path / "molecules_a.json"
    b = molecules.parse_args(["--report-part", "B"])
    assert list(b.set_seeds) == ["tox21", "bace1", "bace1_active"]
    assert all(seeds == [696, 707, 718] for seeds in b.set_seeds.values())
    for whole in ([], ["--report-part", "all"]):
        args = molecules.parse_args(whole)
        assert args.set_seeds == {**a.set_seeds, **b.set_seeds}
        assert molecules.record_path(args) is None  # the maintained record
    assert molecules.tools_of(molecules.parse_args(["--anchors-only"])) == [
        "chemprop", "chemprop_rdkit"]
    part = molecules.parse_args(["--report-part", "A", "--seeds", "696", "--out",
                                 str(tmp_path)])
    assert molecules.record_path(part) == tmp_path / "molecules.json"
    for trains in ("--anchors-only", "--train-only"):
        with pytest.raises(SystemExit):
            molecules.parse_args([trains, "--tables-only"])


def test_the_descriptor_check_compares_the_two_runs_predictions(tmp_path, monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(BENCH))
    from helpers import chemprop_runs as cp

    compile(cp.RDKIT_2D, "rdkit_2d", "exec")  # a syntax error fails here
    seen = []
    outputs = {"featurizers": [[1.0], [2.0]], "descriptors": [[1.0], [2.0]]}

    def fake(data, column, targets, task, run_dir, seed, threads, flags, members=1):
        seen.append(flags)
        return {}, ["C", "N"], np.array(outputs[run_dir.name])

    monkeypatch.setattr(cp, "run_chemprop", fake)
    monkeypatch.setattr(cp, "rdkit_2d_file", lambda data: tmp_path / "d.rdkit2d.npz")
    assert cp.same_descriptors(tmp_path / "d.csv", "random20", ("y",), "regression", 20, 1,
                               tmp_path)
    assert seen == [["--molecule-featurizers", "v1_rdkit_2d_normalized"],
                    ["--descriptors-path", str(tmp_path / "d.rdkit2d.npz")]]
    outputs["descriptors"] = [[1.0], [2.0 + 1e-12]]
    assert not cp.same_descriptors(tmp_path / "d.csv", "random20", ("y",), "regression", 20,
                                   1, tmp_path)
    assert "does NOT give the same" in capsys.readouterr().err


def test_report_b_reads_rdkit_features_made_once_under_its_own_key(bench, tmp_path,
                                                                    monkeypatch):
    jobs, molecules, stored = bench
    from helpers import chemprop_runs as cp

    calls = []
    monkeypatch.setattr(jobs, "run_chemprop", _fake_chemprop(calls))
    monkeypatch.setattr(cp, "rdkit_2d_file", lambda data: tmp_path / "d.rdkit2d.npz")
    plain = jobs.RunSettings(tmp_path / "out", "test", 1, anchor_ensemble=3,
                             store=tmp_path / "store")
    once = jobs.RunSettings(tmp_path / "out", "test", 1, anchor_ensemble=3,
                            store=tmp_path / "store", rdkit_once=("esol",))
    job = _split_job(jobs, plain, tmp_path)
    keys = [jobs.run_job(job, "chemprop_rdkit", s)["key"] for s in (plain, once)]
    assert keys[0] != keys[1]
    assert calls == [["--molecule-featurizers", "v1_rdkit_2d_normalized"],
                     ["--descriptors-path", str(tmp_path / "d.rdkit2d.npz")]]
    run = stored.load_stored("anchors", keys[1], once.store)
    assert run["material"]["flags"] == ["--descriptors-path", "v1_rdkit_2d_normalized"]
    assert jobs.stored_record(job, "chemprop_rdkit", once)["flags"].startswith(
        "--descriptors-path v1_rdkit_2d_normalized")
    assert jobs.run_job(job, "chemprop", once) is not None and len(calls) == 3
    assert calls[-1] == []  # chemprop's defaults are the same everywhere
    assert molecules.settings_of(molecules.parse_args([])).rdkit_once == (
        "tox21", "bace1", "bace1_active")


MOLECULE_RECORDS = ["molecules.json", "molecules_a.json", "molecules_single.json"]


@pytest.mark.parametrize("name", MOLECULE_RECORDS)
def test_the_molecule_records_rebuild_from_the_committed_runs(bench, name, tmp_path,
                                                             monkeypatch):
    """Each molecule record's own command, run again with ``--tables-only`` on the runs
    committed under benchmarks/runs (setattn's at the library digest the record names),
    trains nothing and gives the record's tables cell for cell; made from another library's
    runs, the rebuilt record is marked earlier, as the saved one is."""
    jobs, molecules, stored = bench
    saved = json.loads((RESULTS / name).read_text())
    argv = saved["command"].split("benchmarks/molecules.py", 1)[1]
    args = shlex.split(argv)
    if "--record" in args:
        at = args.index("--record")
        del args[at:at + 2]
    assert "--tables-only" in args, saved["command"]
    monkeypatch.setattr(jobs, "run_chemprop", lambda *a, **k: pytest.fail("trained"))
    monkeypatch.setattr(jobs, "_run_setattn", lambda *a, **k: pytest.fail("trained"))

    def rebuild() -> dict:
        out = tmp_path / name
        molecules.main([*args, "--record", str(out), "--out", str(tmp_path / "work"),
                        "--setattn-library", saved["setattn_library"]])
        return json.loads(out.read_text())

    rebuilt = rebuild()
    assert rebuilt["tables"] == saved["tables"]
    if rebuilt["dirty"]:  # uncommitted setattn/ changes, or no git: no mark to compare
        return
    assert stored.currency(rebuilt) == stored.currency(saved)  # earlier once setattn/ moved
    if name == "molecules_a.json":  # as if setattn/ had changed since the runs
        monkeypatch.setattr(molecules, "library_digest", lambda: "0" * 64)
        assert stored.currency(rebuild()) == "earlier"
