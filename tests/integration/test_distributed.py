"""``setattn train`` under ``torchrun``: 2 processes (gloo) against 1 process."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest
import torch
from molecule_runs import TINY, freesolv_slice, read_csv, run, subprocess_env

from setattn import cli
from setattn.cli.train import run_config_from_args
from setattn.molprop import distributed
from setattn.molprop.run import run_training

pytestmark = pytest.mark.slow  # make test-fast leaves these out

# 96 training molecules in global batches of 19: shares of 10 and 9 molecules, and a
# last global batch of 1 molecule, where rank 1 only pads (its loss weighted by zero).
ARGS = ["--target-columns", "expt", "--epochs", "3", "--batch-size", "19",
        "--descriptors", "none", "--dropout", "0", *TINY]

RTOL = 1e-5
"""Both runs take the same global batches from the same seed, and each rank's loss is
its share of the global batch mean, so the averaged gradient is the single-process
gradient: only float32 summation order differs (the gradient is summed in two parts,
then all-reduced). Measured differences are about 1e-7 relative; 1e-5 leaves margin,
while a wrong loss weighting (e.g. each rank's own mean) moves the numbers by 1e-3."""


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=RTOL, abs_tol=1e-7)


def _torchrun(argv: list[str]) -> subprocess.CompletedProcess:
    """``setattn ARGV`` in 2 processes under torchrun (gloo, 1 thread each)."""
    env = subprocess_env()
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
           "2", "-m", "setattn.cli", *map(str, argv)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def test_shard_and_shard_batch_sampler():
    assert [list(distributed.shard(7, r, 3)) for r in range(3)] == [[0, 1], [2, 3], [4, 5, 6]]
    batches = [[5, 1, 4], [0, 2, 3], [6]]
    shares = []
    for rank in range(2):
        sampler = distributed.ShardBatchSampler(batches, rank, 2)
        shares.append([(part, list(sampler.current), sampler.padding) for part in sampler])
    assert shares[0] == [([5, 4], [5, 1, 4], False), ([0, 3], [0, 2, 3], False),
                         ([6], [6], False)]
    assert shares[1] == [([1], [5, 1, 4], False), ([2], [0, 2, 3], False),
                         ([6], [6], True)]  # padding: the last batch has one molecule
    single = distributed.ShardBatchSampler(batches, 0, 1)
    assert list(single) == batches and len(single) == 3


def test_session_without_torchrun_is_a_single_process(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    with distributed.session() as world:
        assert world == distributed.World(0, 1) and world.is_main
        assert not torch.distributed.is_initialized()
        assert distributed.broadcast("x") == "x" and distributed.all_reduce_sum(2.5) == 2.5


def test_torchrun_two_processes_match_one_process(tmp_path, capsys):
    data = freesolv_slice(tmp_path / "fs.csv", 120)
    one, two = tmp_path / "one", tmp_path / "two"
    status, _, _ = run(["train", "--data", data, "--output-dir", one, *ARGS], capsys)
    assert status == 0

    done = _torchrun(["train", "--data", data, "--output-dir", two, *ARGS])
    # rank 0 alone prints and writes
    assert done.stdout.count("model 0 epoch   1/3") == 1
    assert done.stdout.count("test RMSE") == 1
    assert sorted(p.name for p in two.iterdir()) == sorted(p.name for p in one.iterdir())
    assert sorted(p.name for p in (two / "model_0").iterdir()) == ["best.pt", "last.pt"]

    rows_one, rows_two = read_csv(one / "log.csv"), read_csv(two / "log.csv")
    assert len(rows_one) == len(rows_two) == 3
    for a, b in zip(rows_one, rows_two):
        for key in ("train_loss", "val_loss", "val_rmse", "lr"):
            assert _close(float(a[key]), float(b[key])), (key, a[key], b[key])
    m_one = json.loads((one / "metrics.json").read_text())
    m_two = json.loads((two / "metrics.json").read_text())
    assert m_two["split"] == m_one["split"]
    for key in ("rmse", "mae", "r2"):
        assert _close(m_one["test"][key], m_two["test"][key]), key
    # training moved the weights: the match is not two untrained models agreeing
    assert float(rows_one[0]["val_rmse"]) != float(rows_one[-1]["val_rmse"])


@pytest.mark.parametrize("padding", [False, True])
def test_shard_losses_average_to_the_global_loss(padding):
    """Two ranks' ``shard_loss`` gradients, averaged as DDP does, equal the gradient of
    ``masked_loss`` on the whole batch (with missing labels and uneven shares)."""
    from setattn.molprop.metrics import masked_loss, shard_loss

    g = torch.Generator().manual_seed(3)
    w = torch.randn(4, 2, generator=g, requires_grad=True)
    x = torch.randn(5 if not padding else 1, 4, generator=g)  # (G, F)
    y = torch.randn(x.shape[0], 2, generator=g)  # (G, T)
    y[0, 1] = float("nan")
    whole = torch.autograd.grad(masked_loss(x @ w, y, "regression"), w)[0]
    labelled = int((~torch.isnan(y)).sum())
    shares = [[0, 2, 4], [1, 3]] if not padding else [[0], [0]]
    grads = [torch.autograd.grad(
        shard_loss(x[i] @ w, y[i], "regression", labelled, 2, padding=(rank == 1 and padding)),
        w)[0] for rank, i in enumerate(shares)]
    assert torch.allclose((grads[0] + grads[1]) / 2, whole, atol=1e-6)


class _Interrupt(KeyboardInterrupt):
    pass


def test_torchrun_resumes_a_single_process_run(tmp_path, capsys):
    """A one-process run stopped after epoch 2 is finished by 2 processes with
    ``--resume``: rank 0 reads ``last.pt`` and broadcasts it, and the result matches the
    uninterrupted one-process run."""
    data = freesolv_slice(tmp_path / "fs.csv", 120)
    one, cut = tmp_path / "one", tmp_path / "cut"
    status, _, _ = run(["train", "--data", data, "--output-dir", one, *ARGS], capsys)
    assert status == 0

    def stop_after_epoch_2(rows):
        if rows[-1]["epoch"] == 2:
            raise _Interrupt

    args = cli.build_parser().parse_args(["train", "--data", str(data), "--output-dir",
                                          str(cut), *ARGS])
    with pytest.raises(_Interrupt):
        run_training(run_config_from_args(args), cut, callback=stop_after_epoch_2,
                        log=lambda line: None)
    torch.set_num_threads(1)

    done = _torchrun(["train", "--output-dir", cut, "--resume"])
    assert done.stdout.count("model 0: resuming after epoch 2") == 1
    assert "model 0 epoch   3/3" in done.stdout and "epoch   2/3" not in done.stdout
    rows_one, rows_cut = read_csv(one / "log.csv"), read_csv(cut / "log.csv")
    assert [r["epoch"] for r in rows_cut] == ["1", "2", "3"]
    for key in ("train_loss", "val_loss", "val_rmse"):
        assert _close(float(rows_one[2][key]), float(rows_cut[2][key])), key
    m_one = json.loads((one / "metrics.json").read_text())
    m_cut = json.loads((cut / "metrics.json").read_text())
    for key in ("rmse", "mae", "r2"):
        assert _close(m_one["test"][key], m_cut["test"][key]), key
