"""``make gpu-check`` on the CPU: the GPU record's script runs end to end before a GPU is
lent, its correctness checks can fail, and CUDA asked for where there is none is a clear
error."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture()
def bench(monkeypatch):
    """benchmarks/gpu_check.py, importable from benchmarks/ for this test only."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import gpu_check

    return gpu_check


def test_make_gpu_check_on_the_cpu_writes_a_whole_record(tmp_path):
    out = tmp_path / "gpu.json"
    proc = subprocess.run(["make", "-s", "gpu-check", "DEVICE=cpu",
                           f"GPU_FLAGS=--smoke --threads 1 --out {out}"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from helpers.record import problems
    finally:
        sys.path.pop(0)
    record = json.loads(out.read_text())
    assert problems(record) == [] and record["benchmark"] == "gpu"
    checks, layers, engine, molecules = record["tables"]
    results = [row[-1] for row in checks["rows"]]
    assert results.count("ok") >= 8 and "FAILED" not in results
    assert checks["rows"][-1][-1] == "not run on cpu"  # the CUDA tests: on CUDA only
    assert f"{len(results) - 1} of {len(results) - 1} correctness checks passed" in \
        record["summary"]
    assert len(layers["rows"]) == 5 and all(r[3].endswith("x") for r in layers["rows"])
    assert all(float(c) > 0 for r in layers["rows"] + engine["rows"] for c in r[1:3])
    assert [r[0] for r in molecules["rows"]] == ["cpu"]  # no second device to compare
    assert float(molecules["rows"][0][1]) > 0 and float(molecules["rows"][0][3]) > 0


def test_a_check_beyond_its_tolerance_fails(bench, monkeypatch):
    rows = bench.engine_correctness(torch.device("cpu"), smoke=True)
    assert [r[-1] for r in rows] == ["ok"] * len(rows)
    monkeypatch.setattr(bench, "TOLERANCE", 1e-12)  # float32 cannot meet it
    assert [r[-1] for r in bench.engine_correctness(torch.device("cpu"), smoke=True)] == \
        ["FAILED"] * len(rows)


def test_relative_error_is_measured_against_the_reference_scale(bench):
    ref = [torch.tensor([10.0, -20.0], dtype=torch.float64)]
    assert bench._relative_error([torch.tensor([10.0, -19.0])], ref) == pytest.approx(0.05)


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is here")
def test_cuda_without_a_gpu_is_a_clear_error(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"),
                           "--device", "cuda", "--out", str(tmp_path / "x.json")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert "argument --device: no CUDA device here; use --device cpu" in proc.stderr
    assert not (tmp_path / "x.json").exists()
