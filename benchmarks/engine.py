"""Engine benchmark: setattn.attend against SDPA, PyG TransformerConv and PyG GATConv.

Run:  .venv/bin/python benchmarks/engine.py

Every row is forward + backward, median of several runs, all measured in this one run
on this machine, setattn and its anchor in interleaved rounds (one pass of each per
round) so that the drifting load of a shared machine hits both alike; peak memory is
the peak RSS growth of the same forward + backward in a fresh subprocess (see
benchmarks/util.py). Ratios > 1 mean setattn is faster (time) or lighter (memory) than
the anchor.

Cases:
  complete   64 sets x 128 items, d 64 = 4 heads x 16: attend on complete(ptr) vs raw
             scaled_dot_product_attention on the same padded (64, 4, 128, 16) batch, and
             projections + attend vs PyG TransformerConv (no skip) on the equivalent
             1,048,576-edge list.
  ragged     128 sets of long-tailed sizes 4..512: attend (size buckets) vs
             to_dense_batch + pad-to-max SDPA with a key padding mask.
  sparse     100k nodes, 1M random edges, 4 heads x 16: projection + GAT-score attend vs
             PyG GATConv(64, 16, heads=4, add_self_loops=False).
  d64        8 sets x 512 items, 8 heads x 64: attend on complete(ptr) vs SDPA on the
             padded (8, 8, 512, 64) batch, fwd+bwd.

Matmul rate: a second table sets the d64 case against the machine's float32 matrix
multiply rate, measured in the same run at the same thread count (torch.mm of two
2048 x 2048 matrices, 2 n^3 flops). Attention flops count the two matrix products,
QK^T and PV, 4 B H N^2 D forward; forward + backward counts 3x that (the backward
has four such products: dV, dP, dQ, dK), not the recomputation SDPA's backward may do.
PyTorch sends float32 products to MKL; where oneDNN computes them exactly
(``setattn.matmul``), the table also gives the rate of the same product through oneDNN,
which is the faster of the two on AMD CPUs, and both attentions with their products
sent there (``fast_float32_matmul``).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from util import (  # noqa: E402
    interleaved_seconds,
    load_average,
    peak_mb_here,
    peak_mb_subprocess,
    print_table,
)

import setattn  # noqa: E402
from setattn import scores  # noqa: E402
from setattn.matmul import fast_float32_matmul, onednn_is_exact  # noqa: E402

HEADS, HEAD_DIM = 4, 16
DIM = HEADS * HEAD_DIM


def _backward(out: torch.Tensor) -> None:
    out.sum().backward()


D64_SETS, D64_ITEMS, D64_HEADS, D64_DIM = 8, 512, 8, 64
MATMUL_N = 2048


def _qkv(n: int, seed: int = 0, heads: int = HEADS, dim: int = HEAD_DIM):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(n, heads, dim, generator=g).requires_grad_() for _ in range(3)]


def ragged_sizes(seed: int = 0) -> torch.Tensor:
    """128 long-tailed set sizes between 4 and 512 (log-normal, median ~ 40)."""
    g = torch.Generator().manual_seed(seed)
    sizes = torch.exp(torch.randn(128, generator=g) * 1.0 + 3.7).round().long()
    sizes = sizes.clamp(4, 512)
    sizes[0] = 512  # the long tail is there in every draw
    return sizes


# --------------------------------------------------------------------------------------
# cases: each returns a zero-argument closure running forward + backward


def case_complete_attend():
    q, k, v = _qkv(64 * 128)
    top = setattn.complete(setattn.topology.ptr_from_sizes([128] * 64))
    return lambda: _backward(setattn.attend(q, k, v, top))


def case_complete_sdpa():
    q, k, v = (t.detach().view(64, 128, HEADS, HEAD_DIM).transpose(1, 2).contiguous()
               .requires_grad_() for t in _qkv(64 * 128))  # (G, H, L, D)
    return lambda: _backward(F.scaled_dot_product_attention(q, k, v))


def case_complete_setattn_proj():
    torch.manual_seed(0)
    x = torch.randn(64 * 128, DIM, requires_grad=True)
    lin = torch.nn.Linear(DIM, 3 * DIM)
    top = setattn.complete(setattn.topology.ptr_from_sizes([128] * 64))

    def run():
        q, k, v = lin(x).view(-1, 3, HEADS, HEAD_DIM).unbind(1)  # (N, H, D) each
        _backward(setattn.attend(q, k, v, top))

    return run


def case_complete_transformerconv():
    from torch_geometric.nn import TransformerConv

    torch.manual_seed(0)
    x = torch.randn(64 * 128, DIM, requires_grad=True)
    conv = TransformerConv(DIM, HEAD_DIM, heads=HEADS, root_weight=False)
    top = setattn.complete(setattn.topology.ptr_from_sizes([128] * 64))
    edge_index = top.edge_index()  # (2, 1048576)
    return lambda: _backward(conv(x, edge_index))


def case_ragged_attend():
    sizes = ragged_sizes()
    q, k, v = _qkv(int(sizes.sum()))
    top = setattn.complete(setattn.topology.ptr_from_sizes(sizes))
    return lambda: _backward(setattn.attend(q, k, v, top))


def case_ragged_padded_sdpa():
    from torch_geometric.utils import to_dense_batch

    sizes = ragged_sizes()
    q, k, v = _qkv(int(sizes.sum()))
    batch = torch.repeat_interleave(torch.arange(sizes.numel()), sizes)

    def run():
        qd, valid = to_dense_batch(q.flatten(1), batch)  # (G, Lmax, H*D), (G, Lmax)
        kd, _ = to_dense_batch(k.flatten(1), batch)
        vd, _ = to_dense_batch(v.flatten(1), batch)
        g, lmax = valid.shape
        qd, kd, vd = (t.view(g, lmax, HEADS, HEAD_DIM).transpose(1, 2) for t in (qd, kd, vd))
        out = F.scaled_dot_product_attention(qd, kd, vd, attn_mask=valid[:, None, None, :])
        _backward(out.transpose(1, 2)[valid])  # (N, H, D)

    return run


def _d64_qkv(grad: bool = True):
    """(B * N, H, D) q, k, v of the head-dim-64 case."""
    qkv = _qkv(D64_SETS * D64_ITEMS, heads=D64_HEADS, dim=D64_DIM)
    return qkv if grad else [t.detach() for t in qkv]


def _d64_padded(qkv):
    """(B * N, H, D) -> the padded (B, H, N, D) layout SDPA takes, as leaves."""
    return [t.detach().view(D64_SETS, D64_ITEMS, D64_HEADS, D64_DIM).transpose(1, 2)
            .contiguous().requires_grad_(t.requires_grad) for t in qkv]


def case_d64_attend(backward: bool = True):
    q, k, v = _d64_qkv(backward)
    top = setattn.complete(setattn.topology.ptr_from_sizes([D64_ITEMS] * D64_SETS))
    if not backward:
        return lambda: setattn.attend(q, k, v, top)
    return lambda: _backward(setattn.attend(q, k, v, top))


def case_d64_sdpa(backward: bool = True):
    q, k, v = _d64_padded(_d64_qkv(backward))  # (B, H, N, D)
    if not backward:
        return lambda: F.scaled_dot_product_attention(q, k, v)
    return lambda: _backward(F.scaled_dot_product_attention(q, k, v))


def d64_flops() -> float:
    """Forward flops of QK^T and PV in the d64 case: 2 products of 2 B H N^2 D each."""
    return 4.0 * D64_SETS * D64_HEADS * D64_ITEMS**2 * D64_DIM


def _matmul_case():
    """torch.mm of two (n, n) float32 matrices, n = MATMUL_N."""
    g = torch.Generator().manual_seed(0)
    a, b = (torch.randn(MATMUL_N, MATMUL_N, generator=g) for _ in range(2))
    return lambda: torch.mm(a, b)


def _through_onednn(fn: Callable[[], object]) -> Callable[[], object]:
    """``fn`` inside ``setattn.matmul.fast_float32_matmul``: float32 products through
    oneDNN instead of MKL."""
    def run():
        with fast_float32_matmul():
            return fn()
    return run


def _random_graph(n: int = 100_000, e: int = 1_000_000):
    g = torch.Generator().manual_seed(0)
    return torch.randint(0, n, (2, e), generator=g), n


def case_sparse_attend():
    edge_index, n = _random_graph()
    torch.manual_seed(0)
    x = torch.randn(n, DIM, requires_grad=True)
    lin = torch.nn.Linear(DIM, DIM, bias=False)
    score = scores.GAT(HEADS, HEAD_DIM)
    top = setattn.edges(edge_index, n)

    def run():
        h = lin(x).view(n, HEADS, HEAD_DIM)  # (N, H, D)
        _backward(setattn.attend(h, h, h, top, score))

    return run


def case_sparse_pyg_gatconv():
    from torch_geometric.nn import GATConv

    edge_index, n = _random_graph()
    torch.manual_seed(0)
    x = torch.randn(n, DIM, requires_grad=True)
    conv = GATConv(DIM, HEAD_DIM, heads=HEADS, add_self_loops=False, bias=False)
    return lambda: _backward(conv(x, edge_index))


CASES = {
    "complete_attend": case_complete_attend,
    "complete_sdpa": case_complete_sdpa,
    "complete_setattn_proj": case_complete_setattn_proj,
    "complete_transformerconv": case_complete_transformerconv,
    "ragged_attend": case_ragged_attend,
    "ragged_padded_sdpa": case_ragged_padded_sdpa,
    "sparse_attend": case_sparse_attend,
    "sparse_pyg_gatconv": case_sparse_pyg_gatconv,
    "d64_attend": case_d64_attend,
    "d64_sdpa": case_d64_sdpa,
}

COMPARISONS = [
    ("complete 64x128: attend vs SDPA (same padded batch)", "complete_attend", "complete_sdpa"),
    ("complete 64x128: proj+attend vs PyG TransformerConv", "complete_setattn_proj",
     "complete_transformerconv"),
    ("ragged 4..512: attend (buckets) vs pad-to-max SDPA", "ragged_attend",
     "ragged_padded_sdpa"),
    ("sparse 100k/1M: GAT attend vs PyG GATConv", "sparse_attend", "sparse_pyg_gatconv"),
    ("complete 8x512, 8 heads x 64: attend vs SDPA", "d64_attend", "d64_sdpa"),
]


def _no_grad(fn: Callable[[], object]) -> Callable[[], object]:
    def run():
        with torch.no_grad():
            return fn()
    return run


def matmul_table(repeats: int) -> None:
    """Achieved GFLOP/s of the d64 case against torch.mm's rate, all measured now; also
    the rate of the same product through oneDNN, which PyTorch does not use for float32
    by default (on AMD CPUs it is the faster of the two)."""
    onednn = onednn_is_exact()  # else fast_float32_matmul stays off: no oneDNN rows
    cases: dict[str, Callable[[], object]] = {"matmul": _matmul_case()}
    if onednn:
        cases["matmul oneDNN"] = _through_onednn(_matmul_case())
    for label, build in (("attend", case_d64_attend), ("SDPA", case_d64_sdpa)):
        cases[f"{label} fwd"] = _no_grad(build(backward=False))
        cases[f"{label} fwd+bwd"] = build(backward=True)
        if onednn:  # the same with every float32 product through oneDNN
            cases[f"{label} fwd, oneDNN"] = _through_onednn(_no_grad(build(backward=False)))
            cases[f"{label} fwd+bwd, oneDNN"] = _through_onednn(build(backward=True))
    sec = interleaved_seconds(cases, max(repeats, 5))
    mm = 2.0 * MATMUL_N**3 / sec.pop("matmul") / 1e9
    dnn = 2.0 * MATMUL_N**3 / sec.pop("matmul oneDNN") / 1e9 if onednn else float("nan")
    rows = []
    for name, s in sec.items():
        gflops = (3.0 if "bwd" in name else 1.0) * d64_flops() / s / 1e9
        rows.append([name, f"{s * 1e3:.1f}", f"{gflops:.1f}", f"{100 * gflops / mm:.0f} %",
                     f"{100 * gflops / dnn:.0f} %"])
    print(f"\nhead dim 64 ({D64_SETS} sets x {D64_ITEMS}, {D64_HEADS} heads x {D64_DIM}) vs "
          f"torch.mm {MATMUL_N}x{MATMUL_N}: {mm:.1f} GFLOP/s at {torch.get_num_threads()} "
          f"thread(s); through oneDNN {dnn:.1f} GFLOP/s (exact float32 here: {onednn}); "
          f"medians of interleaved rounds")
    print_table(["complete attention", "ms", "GFLOP/s", "of matmul rate",
                 "of oneDNN rate"], rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memory", metavar="CASE", help=argparse.SUPPRESS)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--no-memory", action="store_true", help="skip the memory column")
    parser.add_argument("--only-matmul", action="store_true",
                        help="only the head-dim-64 table against the matmul rate")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads(),
                        help="torch CPU threads for both sides (default: torch's)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.memory:
        fn = CASES[args.memory]()
        fn()  # warm-up allocations of the graph caches and kernels
        print(json.dumps({"peak_mb": peak_mb_here(fn)}))
        return

    if args.only_matmul:
        matmul_table(args.repeats)
        return
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"load average {load_average()}")
    seconds, mem = {}, {}
    for _, ours, anchor in COMPARISONS:  # each pair timed in interleaved rounds
        repeats = 2 if "transformerconv" in anchor else args.repeats
        seconds.update(interleaved_seconds({ours: CASES[ours](), anchor: CASES[anchor]()}, repeats))
        for name in (ours, anchor):
            mem[name] = float("nan") if args.no_memory else \
                peak_mb_subprocess(__file__, name, ["--threads", str(args.threads)])
            print(f"  measured {name}: {seconds[name] * 1e3:.1f} ms, {mem[name]:.0f} MB",
                  file=sys.stderr)
    rows = []
    for label, ours, anchor in COMPARISONS:
        rows.append([label, f"{seconds[ours] * 1e3:.1f}", f"{seconds[anchor] * 1e3:.1f}",
                     f"{seconds[anchor] / seconds[ours]:.2f}x",
                     f"{mem[ours]:.0f}", f"{mem[anchor]:.0f}",
                     f"{mem[anchor] / max(mem[ours], 1e-9):.2f}x"])
    print_table(["comparison (fwd+bwd)", "setattn ms", "anchor ms", "speed-up",
                 "setattn MB", "anchor MB", "memory ratio"], rows)
    print("speed-up = anchor ms / setattn ms (> 1: setattn faster); "
          "memory ratio = anchor MB / setattn MB (> 1: setattn lighter)")
    matmul_table(args.repeats)


if __name__ == "__main__":
    main()
