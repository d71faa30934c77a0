"""Helpers for the command-line and trainer tests: small CSV slices and tiny runs."""

from __future__ import annotations

import csv
import hashlib
import json
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
import torch

from setattn import cli
from setattn.datasets import DATASETS_DIR

BAD_SMILES_CSV = Path(__file__).resolve().parent / "data" / "bad_smiles.csv"
"""41 rows (name, smiles, logS): 36 ESOL molecules, row 15 without a label, and
invalid or empty SMILES in the rows of ``BAD_ROWS``."""
BAD_ROWS = [3, 7, 12, 20, 25]

TINY = ["--hidden", "8", "--layers", "1", "--heads", "2", "--num-threads", "1",
        "--ensemble-size", "1"]
"""Model flags that keep a training run well under a second (one model: a test that
wants an ensemble passes ``--ensemble-size`` after these)."""

TOX21_TASKS = [
    "NR-AR", "NR-AR-LBD", "NR-AhR", "NR-Aromatase", "NR-ER", "NR-ER-LBD",
    "NR-PPAR-gamma", "SR-ARE", "SR-ATAD5", "SR-HSE", "SR-MMP", "SR-p53",
]  # fmt: skip


def csv_slice(source: Path, path: Path, rows: Sequence[int]) -> Path:
    """Write the header and the given data rows (0-based) of ``source`` to ``path``."""
    with open(source, newline="") as handle:
        records = list(csv.reader(handle))
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(records[0])
        writer.writerows(records[1 + r] for r in rows)
    return path


def freesolv_slice(path: Path, n: int = 40) -> Path:
    """The first ``n`` FreeSolv molecules (columns iupac, smiles, expt, calc)."""
    return csv_slice(DATASETS_DIR / "molecules" / "freesolv.csv", path, range(n))


def tox21_slice(path: Path, n: int = 60) -> Path:
    """The first ``n`` Tox21 rows (12 tasks, missing labels) plus row 1322, which
    RDKit cannot parse; it becomes data row ``n`` of the slice."""
    return csv_slice(DATASETS_DIR / "molecules" / "tox21.csv", path, [*range(n), 1322])


def subprocess_env() -> dict[str, str]:
    """The environment of a ``setattn`` subprocess: this checkout first, one thread."""
    return {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1]),
            "OMP_NUM_THREADS": "1"}


def run(argv: Sequence[str], capsys) -> tuple[int, str, str]:
    """Run ``setattn ARGV`` in-process; returns (exit status, stdout, stderr). argparse's
    errors (usage, a flag out of range) exit with status 2, as the command does."""
    try:
        status = cli.main([str(a) for a in argv])
    except SystemExit as exit_:
        status = exit_.code
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def bad_smiles_ensemble(out: Path, epochs: int) -> Path:
    """An ensemble of 2 tiny regression networks trained ``epochs`` epochs on the
    bad-SMILES fixture into ``out`` (in this process; torch's threads as they were)."""
    from setattn import cli

    threads = torch.get_num_threads()
    status = cli.main(["train", "--data", str(BAD_SMILES_CSV), "--target-columns", "logS",
                       "--epochs", str(epochs), "--output-dir", str(out), *TINY,
                       "--ensemble-size", "2"])
    torch.set_num_threads(threads)
    assert status == 0
    return out


def train_tiny(data: Path, out: Path, capsys, *flags: str, targets: Sequence[str] = ("expt",),
               epochs: int = 1) -> tuple[int, str, str]:
    """``setattn train`` of a tiny model on ``data`` into ``out``; as ``run``."""
    return run(["train", "--data", data, "--target-columns", *targets, "--epochs", epochs,
                "--output-dir", out, *TINY, *flags], capsys)


def run_from_before(data: Path, out: Path, capsys, flag: str, value: str,
                    run_key: str) -> float:
    """Train a tiny run with ``flag value``, then drop ``run_key`` from its
    ``config.json`` as if written before the option existed (the run's choice is in
    ``ensemble.pt``). Returns its test RMSE, for a resume to reproduce."""
    assert train_tiny(data, out, capsys, flag, value)[0] == 0
    config = json.loads((out / "config.json").read_text())
    del config[run_key]
    (out / "config.json").write_text(json.dumps(config))
    return json.loads((out / "metrics.json").read_text())["test"]["rmse"]


_OLD_NAMES = (("kernel.descriptor.", "kernel."), ("kernel.fingerprint.", "fingerprint_kernel."),
              ("kernel.mix", "kernel_mix"), ("weight", "blend"))
"""``ensemble.pt``'s keys -> the names a 0.2.0 member's ``best.pt`` gave them."""


def as_written_by_0_2_0(out: Path) -> None:
    """Rewrite the finished run in ``out`` as setattn 0.2.0 wrote it: no
    ``ensemble.pt``; every member's checkpoints hold the kernel part and the weight under
    their old names (``best.pt`` the fitted weight, ``last.pt`` the one before the fit),
    their configs and ``config.json``'s model section name ``kernel_size``,
    ``fingerprint_kernel`` and ``fitted_blend``."""
    from setattn.molprop.checkpoint import ENSEMBLE_FILE, load_checkpoint, save_checkpoint
    from setattn.molprop.ensemble import NETWORK_WEIGHT

    saved = load_checkpoint(out / ENSEMBLE_FILE, "ensemble")
    kernel = saved["config"]["kernel"] or {}
    old_config = {"kernel_size": kernel.get("size", 0),
                  "fingerprint_kernel": kernel.get("fingerprints", False),
                  "fitted_blend": saved["config"]["weight"] == "stacked"}
    old_state = {next(old + k[len(new):] for new, old in _OLD_NAMES if k.startswith(new)): v
                 for k, v in saved["state_dict"].items()}
    before_fit = torch.full_like(old_state["blend"], NETWORK_WEIGHT if kernel else 1.0)
    for k in range(saved["config"]["members"]):
        for name, kind in (("best.pt", "model"), ("last.pt", "training")):
            path = out / f"model_{k}" / name
            ckpt = load_checkpoint(path, kind)
            assert not set(old_state) & set(ckpt["state_dict"])  # the network's keys only
            ckpt["config"].update(old_config)
            ckpt["state_dict"].update(old_state)
            if kind == "training":
                ckpt["state_dict"]["blend"] = before_fit
            save_checkpoint(ckpt, path)
    config = json.loads((out / "config.json").read_text())
    config["model"].update(kernel_size=0, fingerprint_kernel=False, fitted_blend=False)
    del config["members"]  # 0.2.0 trained the members apart, and had no such key
    (out / "config.json").write_text(json.dumps(config))
    (out / ENSEMBLE_FILE).unlink()


def read_csv(path: Path) -> list[dict]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def freesolv_run(tmp_path: Path, capsys, n: int = 40, epochs: int = 2
                 ) -> tuple[Path, Path, str, dict]:
    """A tiny default run on the first ``n`` FreeSolv molecules, checked to succeed:
    (its data file, its folder, what it printed, its ``metrics.json``)."""
    data = freesolv_slice(tmp_path / "fs.csv", n)
    out = tmp_path / "run"
    status, stdout, _ = train_tiny(data, out, capsys, epochs=epochs)
    assert status == 0, stdout
    return data, out, stdout, json.loads((out / "metrics.json").read_text())


def predicted_rows(model: Path, data: Path, tmp_path: Path, capsys) -> list[dict]:
    """The rows ``setattn predict --model model --data data`` writes, checked to succeed."""
    status, _, _ = run(["predict", "--model", model, "--data", data, "--output",
                        tmp_path / "p.csv"], capsys)
    assert status == 0
    return read_csv(tmp_path / "p.csv")


def saved_bench_run(tmp_path: Path, column: str, kernel: str = "auto") -> Path:
    """A tiny setattn run in the benchmark's layout: ``<out>/freesolv/<column>_val/setattn``,
    split by ``column`` of the data file beside it."""
    source = DATASETS_DIR / "molecules" / "freesolv.csv"
    with source.open(newline="") as handle:
        rows = list(csv.DictReader(handle))[:60]
    folder = tmp_path / "out" / "freesolv"
    folder.mkdir(parents=True)
    data = folder / f"val_{column}.csv"
    with data.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, ["smiles", "expt", column])
        writer.writeheader()
        for i, row in enumerate(rows):
            part = ("val", "test", "train", "train", "train")[i % 5]
            writer.writerow({"smiles": row["smiles"], "expt": row["expt"], column: part})
    run = folder / f"{column}_val" / "setattn"
    status = cli.main(["train", "--data", str(data), "--output-dir", str(run),
                       "--target-columns", "expt", "--split", "column", "--split-column",
                       column, *TINY, "--ensemble-size", "2", "--epochs", "2",
                       "--kernel-ridge", kernel])
    assert status == 0
    return run


def sha256(path: Path) -> str:
    """The SHA-256 of a file's bytes (to show an input was left unchanged)."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


@pytest.fixture
def keep_threads() -> Iterator[None]:
    """Restore torch's thread count after a test (``train`` sets its own)."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)
