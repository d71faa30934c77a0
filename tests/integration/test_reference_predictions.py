"""Predictions of the default model pinned to stored reference outputs.

Three runs with ``setattn train``'s defaults, each predicted by ``setattn predict``:
the ``make demo`` run (FreeSolv, random split, seed 0, 2 threads), one MoleculeACE set
(CHEMBL2835_Ki, random split) and one classification set (the first 400 rows of BACE1's
``active`` labels); the last two train for 10 epochs, which keeps the test short and
pins the same code paths. Their predictions and interval half-widths must equal the CSVs in
``tests/data/reference/`` to 1e-6 of their size (at least 1e-6): a refactoring of the
model may not change a number beyond float32 rounding, which differs between CPUs (MKL
picks other kernels on Intel than on AMD cores: 1.0e-6 on a value of 7.2).
A change that does is a model change, decided on validation data and recorded with the
other decisions; then the references are written again::

    .venv/bin/python tests/integration/test_reference_predictions.py
"""

from __future__ import annotations

import csv
import math
import sys
from pathlib import Path

import pytest

from setattn import cli
from setattn.datasets import DATASETS_DIR

REFERENCE_DIR = Path(__file__).resolve().parents[1] / "data" / "reference"
TOLERANCE = 1e-6  # relative, and absolute below 1

CASES = {
    "freesolv_demo": (DATASETS_DIR / "molecules" / "freesolv.csv", None,
                      ["--target-columns", "expt", "--split", "random", "--seed", "0"]),
    "moleculeace_chembl2835": (DATASETS_DIR / "moleculeace" / "CHEMBL2835_Ki.csv", None,
                               ["--target-columns", "y", "--split", "random", "--seed", "0",
                                "--epochs", "10"]),
    "bace1_active_400": (DATASETS_DIR / "molecules" / "bace1_chembl.csv", 400,
                         ["--target-columns", "active", "--task", "classification",
                          "--split", "random", "--seed", "0", "--epochs", "10"]),
}
"""name -> (data file, rows kept (None: all), train flags beyond the defaults)."""


def case_data(name: str, folder: Path) -> Path:
    """The CSV a case trains and predicts on (a head slice where the case keeps one)."""
    source, rows, _ = CASES[name]
    if rows is None:
        return source
    lines = source.read_text().splitlines(keepends=True)
    path = folder / f"{name}.csv"
    path.write_text("".join(lines[: rows + 1]))
    return path


def predict_case(name: str, folder: Path) -> list[dict]:
    """Train case ``name`` with the defaults (2 threads) in ``folder``, predict its CSV;
    the rows ``setattn predict`` wrote."""
    data = case_data(name, folder)
    run = folder / name
    status = cli.main(["train", "--data", str(data), "--output-dir", str(run),
                       "--num-threads", "2", *CASES[name][2]])
    assert status == 0, f"training {name} failed"
    out = folder / f"{name}_preds.csv"
    status = cli.main(["predict", "--model", str(run), "--data", str(data), "--output",
                       str(out)])
    assert status == 0, f"predicting {name} failed"
    with out.open(newline="") as handle:
        return list(csv.DictReader(handle))


def numbers(row: dict) -> dict[str, float]:
    """A row's numeric cells (predictions, spreads, interval bounds)."""
    out = {}
    for key, value in row.items():
        try:
            out[key] = float(value)
        except (TypeError, ValueError):
            continue
    return out


@pytest.mark.parametrize("name", sorted(CASES))
def test_default_model_predicts_the_reference_outputs(name, tmp_path):
    reference = REFERENCE_DIR / f"{name}.csv"
    with reference.open(newline="") as handle:
        expected = list(csv.DictReader(handle))
    got = predict_case(name, tmp_path)
    assert len(got) == len(expected)
    assert list(got[0]) == list(expected[0]), "the prediction CSV's columns changed"
    worst = 0.0
    for i, (a, b) in enumerate(zip(got, expected)):
        x, y = numbers(a), numbers(b)
        assert x.keys() == y.keys(), f"row {i}: numeric columns differ"
        for key in x:
            if math.isnan(y[key]):
                assert math.isnan(x[key]), f"row {i}, {key}: expected empty/NaN"
                continue
            off = abs(x[key] - y[key]) / max(1.0, abs(y[key]))
            worst = max(worst, off)
            assert off <= TOLERANCE, (
                f"{name} row {i}, column {key}: {x[key]!r} against the reference "
                f"{y[key]!r}")
        for key in a.keys() - x.keys():
            assert a[key] == b[key], f"row {i}, column {key}: {a[key]!r} != {b[key]!r}"
    assert worst <= TOLERANCE


def write_references() -> None:
    """Write ``tests/data/reference/<case>.csv`` from today's default model."""
    import tempfile

    REFERENCE_DIR.mkdir(parents=True, exist_ok=True)
    for name in sorted(CASES):
        with tempfile.TemporaryDirectory() as tmp:
            rows = predict_case(name, Path(tmp))
        with (REFERENCE_DIR / f"{name}.csv").open("w", newline="") as handle:
            writer = csv.DictWriter(handle, list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
        print(f"wrote {len(rows)} rows to {REFERENCE_DIR / name}.csv", file=sys.stderr)


if __name__ == "__main__":
    write_references()
