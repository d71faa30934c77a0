"""Trainer: metrics against hand-computed values, masked losses, checkpoints that refuse
foreign files without running them, atomic writes, and resume = uninterrupted run."""

from __future__ import annotations

import json
import math
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
from molecule_runs import TINY, freesolv_slice, read_csv, run, tox21_slice

from setattn import cli
from setattn.cli import train as cli_train
from setattn.cli.train import run_config_from_args
from setattn.molprop import checkpoint, config, loop, metrics
from setattn.molprop.config import NetworkConfig
from setattn.molprop.network import MoleculeNetwork
from setattn.molprop.run import run_training


@pytest.fixture(autouse=True)
def _keep_threads():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


# ----------------------------------------------------------------------------
# Metrics and loss
# ----------------------------------------------------------------------------


def _pairwise_auc(y, s):
    """P(score of a positive > score of a negative), ties one half: the definition."""
    pos, neg = s[y == 1], s[y == 0]
    diff = pos[:, None] - neg[None, :]
    return float(((diff > 0) + 0.5 * (diff == 0)).mean())


@pytest.mark.parametrize("seed", range(5))
def test_roc_auc_matches_pairwise_definition_with_ties(seed):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, 37)
    s = rng.integers(0, 5, 37) / 4.0  # many ties
    assert metrics.roc_auc(y, s) == pytest.approx(_pairwise_auc(y, s), abs=1e-12)


def test_roc_and_pr_auc_known_values():
    y, s = np.array([0, 0, 1, 1]), np.array([0.1, 0.4, 0.35, 0.8])
    assert metrics.roc_auc(y, s) == pytest.approx(0.75)
    assert metrics.average_precision(y, s) == pytest.approx((1 + 2 / 3) / 2)  # 0.8333
    assert metrics.roc_auc(np.array([1, 1]), np.array([0.2, 0.3])) != metrics.roc_auc(y, s)  # NaN
    assert math.isnan(metrics.roc_auc(np.array([1, 1]), np.array([0.2, 0.3])))
    assert metrics.average_precision(np.array([1, 0, 1]), np.array([0.9, 0.8, 0.7])) == \
        pytest.approx((1 + 2 / 3) / 2)


def test_classification_metrics_mask_missing_labels():
    nan = float("nan")
    y = torch.tensor([[1.0, nan], [0.0, 1.0], [1.0, 1.0], [0.0, nan]])  # task b: one class
    p = torch.tensor([[0.9, 0.1], [0.2, 0.5], [0.6, 0.7], [0.7, 0.3]])
    m = metrics.classification_metrics(y, p, ["a", "b"])
    assert m["per_task"]["a"]["roc_auc"] == pytest.approx(0.75)
    assert math.isnan(m["per_task"]["b"]["roc_auc"])
    assert m["roc_auc"] == pytest.approx(0.75)  # b left out of the mean


def test_regression_metrics():
    nan = float("nan")
    y = torch.tensor([[1.0, 2.0], [2.0, nan], [3.0, 4.0]])
    p = torch.tensor([[1.5, 2.0], [2.0, 100.0], [2.5, 5.0]])
    m = metrics.regression_metrics(y, p, ["u", "v"])
    assert m["per_task"]["u"]["rmse"] == pytest.approx(math.sqrt(0.5 / 3))
    assert m["per_task"]["u"]["mae"] == pytest.approx(1 / 3)
    assert m["per_task"]["u"]["r2"] == pytest.approx(1 - 0.5 / 2)
    assert m["per_task"]["v"]["rmse"] == pytest.approx(math.sqrt(0.5))  # NaN row ignored
    assert m["rmse"] == pytest.approx((math.sqrt(0.5 / 3) + math.sqrt(0.5)) / 2)


@pytest.mark.parametrize("task", ["regression", "classification"])
def test_masked_loss_ignores_missing_labels(task):
    out = torch.randn(5, 3, requires_grad=True)
    y = torch.tensor([[1.0, 0.0, float("nan")]] * 5)
    loss = metrics.masked_loss(out, y, task)
    loss.backward()
    assert torch.isfinite(loss)
    assert torch.all(out.grad[:, 2] == 0) and torch.all(out.grad[:, :2] != 0)
    full = metrics.masked_loss(out[:, :2], y[:, :2], task)
    assert loss.item() == pytest.approx(full.item())
    empty = metrics.masked_loss(out, torch.full((5, 3), float("nan")), task)
    assert empty.item() == 0.0 and empty.requires_grad


def test_batch_size_of_runs_saved_without_one():
    """Runs saved before the batch size had a default stored None, which ``fit`` reads
    as the rule they trained with; new runs store 96."""
    assert config.legacy_batch_size(500) == 32 and config.legacy_batch_size(6000) == 64
    assert config.TrainConfig().batch_size == 96


# ----------------------------------------------------------------------------
# Checkpoints
# ----------------------------------------------------------------------------


def _tiny_model() -> MoleculeNetwork:
    return MoleculeNetwork(NetworkConfig(hidden=8, layers=1, heads=2))


def _model_payload(model: MoleculeNetwork) -> dict:
    return {"kind": "model", "config": model.config.to_dict(), "state_dict": model.state_dict(),
            "meta": {"task": "regression", "target_columns": ["y"]}}


def test_checkpoint_round_trip(tmp_path):
    model = _tiny_model()
    path = checkpoint.save_checkpoint(_model_payload(model), tmp_path / "best.pt")
    loaded, meta = checkpoint.load_network(path)
    assert meta["target_columns"] == ["y"]
    for key, value in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[key], value)
    assert not list(tmp_path.glob(".*tmp"))  # no temporary file left behind


@pytest.mark.parametrize("sync", [True, False])
def test_atomic_open_syncs_unless_told_not_to(tmp_path, monkeypatch, sync):
    """Checkpoints are fsynced before they replace the old file; the per-epoch log is
    not. Either way the file is replaced whole, and a failing block leaves it alone."""
    import os

    from setattn import files

    synced = []
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(fd))
    target = tmp_path / "f.txt"
    target.write_text("old")
    with files.atomic_open(target, sync=sync) as handle:
        handle.write("new")
    assert target.read_text() == "new" and len(synced) == int(sync)
    with pytest.raises(RuntimeError), files.atomic_open(target, sync=sync) as handle:
        handle.write("half")
        raise RuntimeError
    assert target.read_text() == "new" and not list(tmp_path.glob(".*tmp"))


class _Payload:
    """Unpickling this runs code: it writes a marker file."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (exec, (f"open({self.marker!r}, 'w').write('pwned')",))


@pytest.mark.filterwarnings("ignore:Detected pickle protocol")
def test_malicious_pickle_is_refused_and_not_executed(tmp_path):
    marker = tmp_path / "executed"
    zip_path, raw_path = tmp_path / "evil.pt", tmp_path / "evil.pkl"
    torch.save({"setattn_format": 1, "kind": "model", "x": _Payload(marker)}, zip_path)
    raw_path.write_bytes(pickle.dumps({"setattn_format": 1, "x": _Payload(marker)}))
    with pytest.raises(checkpoint.CheckpointError, match="evil.pt: not a setattn checkpoint: "
                       r"loading it would run code \(exec\)"):
        checkpoint.load_checkpoint(zip_path)
    assert not marker.exists()
    with pytest.raises(checkpoint.CheckpointError, match="evil.pkl: not a setattn checkpoint.*"
                       "nothing was executed"):
        checkpoint.load_checkpoint(raw_path)
    assert not marker.exists()
    # the payload is live: an unrestricted load would have run it
    torch.load(zip_path, weights_only=False)
    assert marker.read_text() == "pwned"


def test_foreign_checkpoints_are_refused(tmp_path):
    model = _tiny_model()
    good = checkpoint.save_checkpoint(_model_payload(model), tmp_path / "best.pt")

    plain = tmp_path / "plain.pt"
    torch.save(model.state_dict(), plain)  # someone else's weights: no marker
    with pytest.raises(checkpoint.CheckpointError, match="plain.pt.*no 'setattn_format' marker"):
        checkpoint.load_checkpoint(plain)

    truncated = tmp_path / "truncated.pt"
    truncated.write_bytes(good.read_bytes()[:1000])
    with pytest.raises(checkpoint.CheckpointError, match="truncated.pt: not a setattn checkpoint"):
        checkpoint.load_checkpoint(truncated)

    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(b"hello, world\n")
    with pytest.raises(checkpoint.CheckpointError, match="garbage.pt"):
        checkpoint.load_checkpoint(garbage)

    with pytest.raises(checkpoint.CheckpointError,
                       match="best.pt: not a setattn training checkpoint"):
        checkpoint.load_checkpoint(good, "training")  # right format, wrong kind

    wrong = tmp_path / "wrong.pt"
    payload = _model_payload(model)
    payload["config"] = {**payload["config"], "hidden": 16}  # weights of another shape
    checkpoint.save_checkpoint(payload, wrong)
    with pytest.raises(checkpoint.CheckpointError, match="wrong.pt: the weights do not match"):
        checkpoint.load_network(wrong)

    with pytest.raises(FileNotFoundError, match="missing.pt"):
        checkpoint.load_checkpoint(tmp_path / "missing.pt")


def test_failed_checkpoint_write_keeps_the_old_file(tmp_path, monkeypatch):
    path = checkpoint.save_checkpoint(_model_payload(_tiny_model()), tmp_path / "best.pt")
    before = path.read_bytes()

    def broken_save(obj, handle):
        handle.write(b"partial")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", broken_save)
    with pytest.raises(OSError, match="disk full"):
        checkpoint.save_checkpoint(_model_payload(_tiny_model()), path)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best.pt"]


def test_cli_refuses_a_foreign_checkpoint_without_running_it(tmp_path, capsys):
    data = freesolv_slice(tmp_path / "fs.csv", 30)
    out = tmp_path / "run"
    status, _, _ = run(["train", "--data", data, "--target-columns", "expt", "--epochs", "1",
                        "--output-dir", out, *TINY], capsys)
    assert status == 0
    marker = tmp_path / "executed"
    best = out / "model_0" / "best.pt"
    torch.save({"setattn_format": 1, "kind": "model", "x": _Payload(marker)}, best)
    status, _, err = run(["predict", "--model", out, "--data", data,
                          "--output", tmp_path / "p.csv"], capsys)
    assert status == 2
    assert str(best) in err and "not a setattn checkpoint" in err
    assert not marker.exists() and not (tmp_path / "p.csv").exists()


# ----------------------------------------------------------------------------
# Resume
# ----------------------------------------------------------------------------


class _Interrupt(KeyboardInterrupt):
    pass


@pytest.mark.parametrize(("task", "members"), [("regression", "apart"),
                                               ("classification", "apart"),
                                               ("regression", "together"),
                                               ("classification", "together")])
def test_interrupted_run_resumes_to_the_same_result(tmp_path, capsys, task, members):
    """An ensemble of 2 interrupted in model 1's second epoch, resumed with
    ``--resume``, ends at the same epoch with the same numbers as an uninterrupted run
    (members trained apart: model 0's 3 epochs and model 1's first 2 are saved;
    together: both members' first 2)."""
    if task == "regression":
        data, targets = freesolv_slice(tmp_path / "d.csv", 40), ["expt"]
    else:
        data, targets = tox21_slice(tmp_path / "d.csv", 50), ["NR-AhR", "SR-ARE", "SR-MMP"]
    args = ["--data", data, "--target-columns", *targets, "--task", task, "--epochs", "3",
            "--patience", "5", *TINY, "--ensemble-size", "2", "--members", members]
    status, _, _ = run(["train", "--output-dir", tmp_path / "whole", *args], capsys)
    assert status == 0

    def interrupt(rows):
        if rows[-1]["model"] == 1 and rows[-1]["epoch"] == 2:
            raise _Interrupt

    parser_args = cli.build_parser().parse_args(
        ["train", "--output-dir", str(tmp_path / "cut"), *map(str, args)])
    torch.set_num_threads(1)
    with pytest.raises(_Interrupt):
        run_training(run_config_from_args(parser_args), tmp_path / "cut",
                        callback=interrupt, log=lambda line: None)
    assert not (tmp_path / "cut" / "metrics.json").exists()
    saved = 5 if members == "apart" else 4
    assert len(read_csv(tmp_path / "cut" / "log.csv")) == saved

    status, out, _ = run(["train", "--output-dir", tmp_path / "cut", "--resume",
                          "--num-threads", "1"], capsys)
    assert status == 0
    resumed = "model 1" if members == "apart" else "models 0-1"
    assert f"{resumed}: resuming after epoch 2" in out
    whole, cut = read_csv(tmp_path / "whole" / "log.csv"), read_csv(tmp_path / "cut" / "log.csv")
    assert [(r["model"], r["epoch"]) for r in cut] == [(r["model"], r["epoch"]) for r in whole]
    for a, b in zip(whole, cut):
        assert {k: v for k, v in a.items() if k != "seconds"} == \
            {k: v for k, v in b.items() if k != "seconds"}
    m_whole = json.loads((tmp_path / "whole" / "metrics.json").read_text())
    m_cut = json.loads((tmp_path / "cut" / "metrics.json").read_text())
    assert m_cut["test"] == m_whole["test"] and m_cut["val"] == m_whole["val"]
    for k in range(2):
        a = checkpoint.load_network(tmp_path / "whole" / f"model_{k}" / "best.pt")[0].state_dict()
        b = checkpoint.load_network(tmp_path / "cut" / f"model_{k}" / "best.pt")[0].state_dict()
        assert all(torch.equal(a[key], b[key]) for key in a)


def _last_pt_writes(monkeypatch) -> list[int]:
    """The epoch of every ``last.pt`` written from now on, in order."""
    epochs = []
    save = checkpoint.save_checkpoint

    def counting(payload, path):
        if Path(path).name == "last.pt":
            epochs.append(payload["progress"]["epoch"])
        return save(payload, path)

    monkeypatch.setattr(loop, "save_checkpoint", counting)
    return epochs


@pytest.mark.parametrize(("seconds", "writes"), [(0.0, [1, 2, 3]), (1e9, [3])])
def test_last_checkpoint_is_written_as_often_as_asked(tmp_path, capsys, monkeypatch,
                                                      seconds, writes):
    """``--checkpoint-seconds 0`` writes last.pt after every epoch; a long interval only
    after the final one. The run's train_seconds is the fits' wall time: at least the
    sum of the epochs' own seconds."""
    epochs = _last_pt_writes(monkeypatch)
    status, _, _ = run(["train", "--data", freesolv_slice(tmp_path / "fs.csv", 30),
                        "--target-columns", "expt", "--epochs", "3", "--patience", "5",
                        "--output-dir", tmp_path / "run", "--checkpoint-seconds", seconds,
                        *TINY], capsys)
    assert status == 0
    assert epochs == writes
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    epoch_seconds = sum(float(r["seconds"]) for r in read_csv(tmp_path / "run" / "log.csv"))
    assert metrics["train_seconds"] >= epoch_seconds


@pytest.mark.parametrize(("seconds", "last_writes"), [(0.0, 4), (1e9, 1)])
def test_best_weights_are_written_before_each_last_checkpoint(tmp_path, capsys, monkeypatch,
                                                              seconds, last_writes):
    """best.pt is kept in memory and written just before last.pt, so that every last.pt
    on disk has the best epoch of its progress beside it; with a long interval both
    are written once, after the final epoch (not at every improvement)."""
    writes = []
    save = checkpoint.save_checkpoint

    def recording(payload, path):
        if Path(path).name == "best.pt":
            writes.append(("best", payload["meta"]["epoch"]))
        else:
            writes.append(("last", payload["progress"]["best_epoch"]))
        return save(payload, path)

    monkeypatch.setattr(loop, "save_checkpoint", recording)
    status, _, _ = run(["train", "--data", freesolv_slice(tmp_path / "fs.csv", 30),
                        "--target-columns", "expt", "--epochs", "4", "--patience", "5",
                        "--output-dir", tmp_path / "run", "--checkpoint-seconds", seconds,
                        *TINY], capsys)
    assert status == 0
    assert sum(kind == "last" for kind, _ in writes) == last_writes
    for i, (kind, best_epoch) in enumerate(writes):
        if kind == "last":  # the latest best.pt written so far is this progress's best
            assert [e for k, e in writes[:i] if k == "best"][-1] == best_epoch
    if seconds > 0:
        assert [kind for kind, _ in writes] == ["best", "last"]
    best = checkpoint.load_checkpoint(tmp_path / "run" / "model_0" / "best.pt", "model")
    assert best["meta"]["epoch"] == writes[-1][1]


def test_ctrl_c_mid_epoch_keeps_the_last_finished_epoch(tmp_path, capsys, monkeypatch):
    """Ctrl-C in the middle of epoch 3, with last.pt not yet due: the except path writes
    epoch 2's state (a copy taken when it finished, not the half-trained weights), and
    ``--resume`` ends with the same numbers as a run never interrupted."""
    data = freesolv_slice(tmp_path / "fs.csv", 40)
    args = ["--data", data, "--target-columns", "expt", "--epochs", "4", "--patience", "5",
            "--batch-size", "8", *TINY]
    status, _, _ = run(["train", "--output-dir", tmp_path / "whole", *args], capsys)
    assert status == 0

    epochs = _last_pt_writes(monkeypatch)
    steps = []
    loss = metrics.masked_loss

    def interrupted_loss(out, y, task):  # 4 steps per epoch: the 10th is in epoch 3
        steps.extend([None] if out.requires_grad else [])  # training steps, not validation
        if len(steps) == 10:
            raise _Interrupt
        return loss(out, y, task)

    monkeypatch.setattr(loop, "masked_loss", interrupted_loss)
    parser_args = cli.build_parser().parse_args(
        ["train", "--output-dir", str(tmp_path / "cut"), *map(str, args)])
    with pytest.raises(_Interrupt):
        run_training(run_config_from_args(parser_args), tmp_path / "cut",
                        log=lambda line: None, checkpoint_seconds=1e9)
    assert epochs == [2]
    monkeypatch.setattr(loop, "masked_loss", loss)

    status, out, _ = run(["train", "--output-dir", tmp_path / "cut", "--resume"], capsys)
    assert status == 0 and "model 0: resuming after epoch 2" in out
    m_whole = json.loads((tmp_path / "whole" / "metrics.json").read_text())
    m_cut = json.loads((tmp_path / "cut" / "metrics.json").read_text())
    assert m_cut["test"] == m_whole["test"] and m_cut["val"] == m_whole["val"]


def test_bad_checkpoint_seconds_is_named(tmp_path, capsys):
    with pytest.raises(SystemExit):
        cli.main(["train", "--data", "x.csv", "--target-columns", "y", "--output-dir",
                  str(tmp_path), "--checkpoint-seconds", "-1"])
    assert "argument --checkpoint-seconds: must be >= 0 and finite, got -1.0" in \
        capsys.readouterr().err


def test_resume_refuses_changed_settings_and_missing_runs(tmp_path, capsys):
    data = freesolv_slice(tmp_path / "fs.csv", 30)
    out = tmp_path / "run"
    status, _, _ = run(["train", "--data", data, "--target-columns", "expt", "--epochs", "1",
                        "--output-dir", out, *TINY], capsys)
    assert status == 0
    status, _, err = run(["train", "--output-dir", out, "--resume", "--epochs", "3"], capsys)
    assert status == 2 and "--epochs" in err and "config.json" in err
    status, _, err = run(["train", "--data", data, "--target-columns", "expt",
                          "--output-dir", out], capsys)
    assert status == 2 and "already holds a run" in err and "--resume" in err
    status, _, err = run(["train", "--output-dir", tmp_path / "none", "--resume"], capsys)
    assert status == 2 and "no run to resume" in err
    # resuming a finished run trains nothing more and rewrites the same metrics
    before = json.loads((out / "metrics.json").read_text())
    status, _, _ = run(["train", "--output-dir", out, "--resume", "--data", data], capsys)
    assert status == 0
    assert json.loads((out / "metrics.json").read_text())["test"] == before["test"]


def test_ctrl_c_says_how_to_resume(tmp_path, capsys, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli_train, "run_training", interrupted)
    status, _, err = run(["train", "--data", "x.csv", "--target-columns", "y",
                          "--output-dir", tmp_path / "run", "--num-threads", "1"], capsys)
    assert status == 130
    assert f"setattn train --output-dir {tmp_path / 'run'} --resume" in err


def test_early_stopping_keeps_the_best_epoch(tmp_path, capsys, monkeypatch):
    """A validation RMSE that only gets worse after epoch 1 stops training after
    1 + patience epochs, and the kept weights are epoch 1's."""
    calls = []

    def fake_evaluate(y, p, task, names, part="data"):
        calls.append(None)
        return {"rmse": float(len(calls)), "mae": 0.0, "r2": 0.0}  # 1, 2, 3, ...

    monkeypatch.setattr(loop, "evaluate", fake_evaluate)
    data = freesolv_slice(tmp_path / "fs.csv", 30)
    lines = []
    args = cli.build_parser().parse_args(
        ["train", "--data", str(data), "--target-columns", "expt", "--epochs", "10",
         "--patience", "2", "--output-dir", str(tmp_path / "run"), *TINY])
    torch.set_num_threads(1)
    run_training(run_config_from_args(args), tmp_path / "run", log=lines.append)
    log = read_csv(tmp_path / "run" / "log.csv")
    assert [r["val_rmse"] for r in log] == ["1", "2", "3"]
    assert any("early stop after epoch 3" in line for line in lines)
    model, meta = checkpoint.load_network(tmp_path / "run" / "model_0" / "best.pt")
    assert meta["epoch"] == 1
    last = checkpoint.load_checkpoint(tmp_path / "run" / "model_0" / "last.pt", "training")
    assert last["progress"]["finished"] and last["progress"]["best_epoch"] == 1
