"""The GPU record: correctness and speed of setattn on one device, against PyG and SDPA.

Run:  make gpu-check               (CUDA: writes results/gpu.json, a few minutes)
      make gpu-check DEVICE=cpu GPU_FLAGS="--smoke --out x.json"   (the test suite's)
      .venv/bin/python benchmarks/gpu_check.py --device cuda:1 --repeats 50

Four parts, each a table of the record:

1. **Correctness on the device**: every engine path (``attend(..., path=...)``) and
   setattn's ``GATConv`` / ``GATv2Conv`` on the device against the same call in float64
   on the CPU (outputs and every gradient), and on CUDA the test files that need a GPU
   (``pytest`` of ``CUDA_TESTS``, which skip without one).
2. **Layers**: ``GATConv``, ``GATv2Conv`` and ``GATv2Conv(edge_dim=7)`` forward +
   backward on batches of 64 molecule-like graphs (a new batch every pass) and on one
   large random graph, setattn against PyG on the same device, interleaved rounds.
3. **Engine**: ``attend`` on complete sets (64 sets of 128 items, 4 heads x 16) against
   ``scaled_dot_product_attention`` on the same batch already padded (B, H, L, D).
4. **Molecules**: one ``setattn train`` of FreeSolv (one network, ``--epochs``) and one
   ``setattn predict`` of ``--predict-molecules`` drug-like ChEMBL molecules, on the
   device and on the CPU (``--threads``), wall time of each command.

``--smoke`` shrinks every size (a few graphs, 2 epochs, 200 molecules) so that the
whole check runs in about a minute on a CPU: the test suite runs it with ``--device
cpu``, so the script is known to work before a GPU is lent. Timings on a GPU are made
after ``torch.cuda.synchronize()``; ratios above 1 mean setattn is faster.
"""

from __future__ import annotations

import argparse
import csv
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
import torch_geometric.nn as pyg_nn

from setattn import attend, scores
from setattn.engine.plan import EnginePath
from setattn.nn import GATConv, GATv2Conv
from setattn.topology import complete, edges, ptr_from_sizes, window

from helpers.engine_cases import molecule_batch
from helpers.record import ROOT, finish, interleaved_seconds, load_average, make_record, table
from layers import cycling

CUDA_TESTS = ("tests/unit/test_nn_host_reads.py", "tests/unit/test_devices.py",
              "tests/integration/test_device.py")
"""Test files with cases that need a CUDA device (they skip without one)."""

TOLERANCE = 1e-4
"""Largest |float32 on the device - float64 on the CPU| accepted, relative to the
reference's largest value."""

MOLECULES = ROOT / "datasets" / "molecules"


def sync(device: torch.device) -> Callable[[], object] | None:
    """What ends a timed run on ``device``: CUDA's synchronize, nothing on the CPU."""
    return (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else None


# --------------------------------------------------------------------------------------
# 1. correctness


def _relative_error(ours: list[torch.Tensor], reference: list[torch.Tensor]) -> float:
    """Largest |ours - reference| over the tensors, relative to the reference's scale."""
    worst = 0.0
    for a, b in zip(ours, reference):
        scale = float(b.abs().max()) or 1.0
        worst = max(worst, float((a.double().cpu() - b).abs().max()) / scale)
    return worst


def _outputs_and_grads(fn: Callable[..., torch.Tensor], inputs: list[torch.Tensor]
                       ) -> list[torch.Tensor]:
    """fn(*inputs) and the gradient of sum(out * fixed weights) w.r.t. every input."""
    leaves = [t.detach().clone().requires_grad_(True) for t in inputs]
    out = fn(*leaves)
    weights = torch.linspace(-1, 1, out.numel(), dtype=out.dtype, device=out.device)
    (out.reshape(-1) * weights).sum().backward()
    return [out.detach(), *[t.grad for t in leaves]]


def _engine_cases(device: torch.device, dtype: torch.dtype, smoke: bool):
    """(name, path, topology, score, q, k, v, edge_attr) of every engine path."""
    gen = torch.Generator().manual_seed(0)
    sizes = [3, 7, 1, 12, 5] if smoke else [3, 7, 1, 12, 5, 40, 64, 9]
    ptr = ptr_from_sizes(sizes).to(device)
    n, h, d = sum(sizes), 4, 8

    def qkv():
        return [torch.randn(n, h, d, generator=gen).to(device, dtype) for _ in range(3)]

    ei = torch.randint(0, n, (2, 6 * n), generator=gen).to(device)
    gat = scores.GAT(h, d).to(device, dtype)
    gatv2 = scores.GATv2(h, d, project=False).to(device, dtype)
    return [
        ("complete sets, dense SDPA", EnginePath.DENSE_SDPA, complete(ptr), None, *qkv(), None),
        ("complete sets, dense blocks", EnginePath.DENSE_BLOCKS, complete(ptr), gat, *qkv(),
         None),
        ("window r=2, blocks", EnginePath.WINDOW_BLOCKS, window(ptr, 2), None, *qkv(), None),
        ("edges, gathered", EnginePath.SPARSE_GATHER, edges(ei, n), gat, *qkv(), None),
        ("edges, CSR", EnginePath.SPARSE_CSR, edges(ei, n), None, *qkv(), None),
        ("edges, fused GATv2", EnginePath.FUSED_GATV2, edges(ei, n), gatv2, *qkv(), None),
        ("edges, fused GAT", EnginePath.FUSED_GAT, edges(ei, n), gat, *qkv(), None),
        ("edges, fused dot product", EnginePath.FUSED_DOT, edges(ei, n), None, *qkv(), None),
    ]


def _attending(top, score, path: EnginePath) -> Callable[..., torch.Tensor]:
    """(q, k, v) -> ``attend`` along ``top`` with ``score`` on ``path``."""
    return lambda q, k, v: attend(q, k, v, top, score, path=path)


def _layer_call(layer: torch.nn.Module, edge_index: torch.Tensor, edge_features: bool
                ) -> Callable[..., torch.Tensor]:
    """(x, edge_attr) -> the layer's output (edge_attr passed when ``edge_features``)."""
    return lambda x, ea: layer(x, edge_index, *((ea,) if edge_features else ()))


def engine_correctness(device: torch.device, smoke: bool) -> list[list[str]]:
    rows = []
    for case, case64 in zip(_engine_cases(device, torch.float32, smoke),
                            _engine_cases(torch.device("cpu"), torch.float64, smoke)):
        name, path, top, score, q, k, v, _ = case
        _, _, top64, score64, q64, k64, v64, _ = case64
        if score64 is not None:
            score64.load_state_dict({k_: t.double().cpu() for k_, t in
                                     score.state_dict().items()})
        ours = _outputs_and_grads(_attending(top, score, path), [q, k, v])
        ref = _outputs_and_grads(_attending(top64, score64, path), [q64, k64, v64])
        err = _relative_error(ours, ref)
        rows.append([f"attend: {name}", f"{err:.1e}",
                     "ok" if err <= TOLERANCE else "FAILED"])
    return rows


def layer_correctness(device: torch.device) -> list[list[str]]:
    gen = torch.Generator().manual_seed(1)
    b = molecule_batch(8, gen, (10, 30), 16, 7)
    rows = []
    for name, make in (("GATConv", lambda: pyg_nn.GATConv(16, 8, heads=4)),
                       ("GATv2Conv, edge_dim 7",
                        lambda: pyg_nn.GATv2Conv(16, 8, heads=4, edge_dim=7))):
        torch.manual_seed(0)
        pyg = make().double()
        ours = (GATConv if name == "GATConv" else GATv2Conv).from_pyg(pyg).float().to(device)
        extra = name != "GATConv"
        mine = _outputs_and_grads(_layer_call(ours, b["edge_index"].to(device), extra),
                                  [b["x"].to(device), b["edge_attr"].to(device)])
        ref = _outputs_and_grads(_layer_call(pyg, b["edge_index"], extra),
                                 [b["x"].double(), b["edge_attr"].double()])
        if not extra:  # edge features do not enter GATConv: no gradient reaches them
            mine, ref = mine[:2], ref[:2]
        err = _relative_error(mine, ref)
        rows.append([f"setattn {name} against PyG's in float64 on the CPU", f"{err:.1e}",
                     "ok" if err <= TOLERANCE else "FAILED"])
    return rows


def cuda_tests(device: torch.device) -> list[list[str]]:
    """pytest of the files with CUDA cases, on CUDA only (the CPU suite runs them anyway)."""
    if device.type != "cuda":
        return [["tests that need CUDA", "-", f"not run on {device.type}"]]
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           *CUDA_TESTS], cwd=ROOT, capture_output=True, text=True)
    last = (proc.stdout.strip().splitlines() or ["no output"])[-1]
    return [["tests that need CUDA: " + " ".join(Path(p).name for p in CUDA_TESTS), last,
             "ok" if proc.returncode == 0 else "FAILED"]]


# --------------------------------------------------------------------------------------
# 2. layers, 3. engine


def layer_rows(device: torch.device, smoke: bool, repeats: int) -> list[list[str]]:
    gen = torch.Generator().manual_seed(0)
    graphs, count = (8, 2) if smoke else (64, 16)
    small = [tuple(b[k].to(device) for k in ("x", "edge_index", "edge_attr"))
             for b in (molecule_batch(graphs, gen, (20, 60), 64, 7) for _ in range(count))]
    n, e = (2_000, 20_000) if smoke else (100_000, 1_000_000)
    large = [(torch.randn(n, 32, generator=gen).to(device),
              torch.randint(0, n, (2, e), generator=gen).to(device), None)]
    rows = []
    for label, batches, width in ((f"{graphs} molecule-like graphs, a new batch every pass",
                                   small, 64), (f"{n:,} nodes, {e:,} edges", large, 32)):
        for kind in ("GATConv", "GATv2Conv", "GATv2Conv, edge_dim 7"):
            if kind.endswith("edge_dim 7") and batches is large:
                continue
            torch.manual_seed(0)
            if kind == "GATConv":
                pyg = pyg_nn.GATConv(width, 16, heads=4).to(device)
                ours = GATConv.from_pyg(pyg)
            else:
                pyg = pyg_nn.GATv2Conv(width, 16, heads=4,
                                       edge_dim=7 if "edge_dim" in kind else None).to(device)
                ours = GATv2Conv.from_pyg(pyg)
            key = "gatv2_edges" if "edge_dim" in kind else "gat"  # layers.py's step kinds
            t = interleaved_seconds({"pyg": cycling(pyg, batches, key),
                                     "setattn": cycling(ours, batches, key)}, repeats,
                                    sync(device))
            rows.append([f"{kind}: {label}", f"{1000 * t['pyg']:.2f}",
                         f"{1000 * t['setattn']:.2f}", f"{t['pyg'] / t['setattn']:.2f}x"])
    return rows


def engine_rows(device: torch.device, smoke: bool, repeats: int) -> list[list[str]]:
    sets, items, h, d = (8, 32, 4, 16) if smoke else (64, 128, 4, 16)
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(sets * items, h, d, generator=gen).to(device).requires_grad_(True)
               for _ in range(3))
    ptr = ptr_from_sizes([items] * sets).to(device)

    def ours():
        attend(q, k, v, complete(ptr)).square().sum().backward()

    def sdpa():  # the same batch, already padded: (B, H, L, D)
        blocks = [t.view(sets, items, h, d).transpose(1, 2) for t in (q, k, v)]
        F.scaled_dot_product_attention(*blocks).square().sum().backward()

    t = interleaved_seconds({"sdpa": sdpa, "setattn": ours}, repeats, sync(device))
    return [[f"attend on {sets} complete sets of {items}, {h} heads x {d}, against SDPA on "
             "the padded batch", f"{1000 * t['sdpa']:.2f}", f"{1000 * t['setattn']:.2f}",
             f"{t['sdpa'] / t['setattn']:.2f}x"]]


# --------------------------------------------------------------------------------------
# 4. molecules


def _command_seconds(cmd: list[str], threads: int) -> float:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-2000:]}")
    return time.perf_counter() - t0


def molecule_rows(device: torch.device, smoke: bool, epochs: int, molecules: int,
                  threads: int, work: Path) -> list[list[str]]:
    setattn = [sys.executable, "-m", "setattn.cli"]
    with open(MOLECULES / "bace1_chembl.csv", newline="") as f:
        smiles = [row["smiles"] for row in csv.DictReader(f)][:molecules]
    pool = work / "molecules.csv"
    pool.write_text("smiles\n" + "\n".join(smiles) + "\n")
    size = ["--hidden", "16", "--layers", "1", "--heads", "2"] if smoke else []
    rows = []
    devices = [device, torch.device("cpu")] if device.type != "cpu" else [device]
    for dev in devices:
        out = work / f"run_{dev.type}"
        train = _command_seconds([*setattn, "train", "--data",
                                  str(MOLECULES / "freesolv.csv"), "--target-columns",
                                  "expt", "--epochs", str(epochs), "--ensemble-size", "1",
                                  "--device", str(dev), "--num-threads", str(threads),
                                  "--output-dir", str(out), *size], threads)
        workers = ["--workers", "1"] if dev.type != "cpu" else []
        predict = _command_seconds([*setattn, "predict", "--model", str(out), "--data",
                                    str(pool), "--output", str(work / f"p_{dev.type}.csv"),
                                    "--device", str(dev), *workers], threads)
        rows.append([str(dev), f"{train:.1f}", f"{predict:.1f}",
                     f"{len(smiles) / predict:.0f}"])
    return rows


# --------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu")
    p.add_argument("--smoke", action="store_true", help="small sizes: about a minute on a CPU")
    p.add_argument("--repeats", type=int, default=None, help="timed rounds (20; smoke 3)")
    p.add_argument("--epochs", type=int, default=None, help="training epochs (30; smoke 2)")
    p.add_argument("--predict-molecules", type=int, default=None,
                   help="molecules predicted (4000; smoke 200)")
    p.add_argument("--threads", type=int, default=torch.get_num_threads(),
                   help="CPU threads of every CPU measurement")
    p.add_argument("--out", type=Path, help="the record (default results/gpu.json)")
    args = p.parse_args(argv)
    args.repeats = args.repeats or (3 if args.smoke else 20)
    args.epochs = args.epochs or (2 if args.smoke else 30)
    args.predict_molecules = args.predict_molecules or (200 if args.smoke else 4000)
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit("gpu_check: error: argument --device: no CUDA device here; use --device cpu")
    torch.set_num_threads(args.threads)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "the CPU"
    checks = engine_correctness(device, args.smoke) + layer_correctness(device) \
        + cuda_tests(device)
    layers = layer_rows(device, args.smoke, args.repeats)
    engine = engine_rows(device, args.smoke, args.repeats)
    with tempfile.TemporaryDirectory() as work:
        molecules = molecule_rows(device, args.smoke, args.epochs, args.predict_molecules,
                                  args.threads, Path(work))
    ran = [row for row in checks if not row[-1].startswith("not run")]
    failed = sum(row[-1] == "FAILED" for row in ran)
    tables = [
        table(f"Correctness on {name}", ["check", "largest relative error", "result"], checks,
              "float32 on the device against float64 on the CPU: outputs and every "
              f"gradient; accepted up to {TOLERANCE:.0e}."),
        table(f"GAT layers on {name}: forward + backward",
              ["case", "PyG ms", "setattn ms", "PyG / setattn"], layers,
              f"4 heads x 16, median of {args.repeats} interleaved rounds."),
        table(f"Attention on complete sets on {name}: forward + backward",
              ["case", "SDPA ms", "setattn ms", "SDPA / setattn"], engine),
        table("Molecules: one network on FreeSolv, then a prediction",
              ["device", "train s", "predict s", "molecules/s"], molecules,
              f"setattn train --epochs {args.epochs} --ensemble-size 1 (FreeSolv, 642), "
              f"setattn predict of {args.predict_molecules} ChEMBL BACE-1 SMILES; wall time "
              f"of each command, loading included; {args.threads} CPU threads."),
    ]
    summary = (f"{len(ran) - failed} of {len(ran)} correctness checks passed on {name}; "
               + "; ".join(f"{r[0].split(':')[0]} on small graphs {r[3]} PyG's"
                           for r in layers[:2])
               + f"; one FreeSolv network trained in {molecules[0][1]} s on {molecules[0][0]}")
    record = make_record("gpu", f"setattn on {name}", summary, tables, args.threads,
                         load=float(load_average().split()[0]))
    finish(record, args.out)
    if failed:
        sys.exit(f"gpu_check: {failed} correctness check(s) FAILED")


if __name__ == "__main__":
    main()
