"""Engine benchmark: setattn.attend against SDPA and PyG's ways of attending over sets
and graphs.

Run:  .venv/bin/python benchmarks/engine.py --threads 1     (writes results/engine.json)
      .venv/bin/python benchmarks/engine.py --threads 1 --only small --repeats 3 --out x.json

Every row is forward + backward, the median of ``--repeats`` rounds, all measured in
this one run on this machine: setattn and its anchors in interleaved rounds (one pass of
each per round) so that the drifting load of a shared machine hits all alike. Memory is
the peak RSS growth of a pass in a fresh subprocess (benchmarks/helpers/record.py): "first pass"
is the first forward + backward of that process (for setattn it includes building the
topology's bucket plan or CSR layouts, for PyG its own set-up), "after warm-up" the
second. Ratios > 1 mean setattn is faster (time) or lighter (memory) than the anchor.

Cases (4 heads x 16 unless said):
  complete   64 sets x 128 items: ``attend`` on complete(ptr) against (a) raw SDPA on the
             same batch already padded (B, H, L, D): no PyG, no layout change; (b) PyG's
             dense way, ``to_dense_batch`` + SDPA (the mask is dropped when no slot is
             padding); (c) q/k/v projections + ``attend`` against PyG
             ``TransformerConv`` (no skip) on the equivalent 1,048,576-edge list, PyG's
             edge-list path, which no one would use for complete sets.
  ragged     128 sets of long-tailed sizes 4..512 (median ~ 40): ``attend`` (size
             buckets) against jagged nested-tensor SDPA (``torch.nested``), SDPA per
             power-of-two size bucket (a user's own bucketing with
             ``to_dense_batch``), and ``to_dense_batch`` + SDPA with every set padded
             to 512.
  small      64 sets of 20..60 items, a new batch (of 16 different ones) every call: the
             sizes of training batches, where per-call overhead counts; same anchors.
  sparse     100k nodes, 1M random edges: projection + GAT-score ``attend`` against PyG
             ``GATConv(64, 16, heads=4, add_self_loops=False)``; the same edge_index
             every pass (full-graph training), its CSR layouts built by the first pass.
  d64        8 sets x 512 items, 8 heads x 64: ``attend`` vs SDPA on the padded batch.

In the ``ragged`` and ``small`` rows (and ``complete`` (a), (b)) setattn builds its
topology from ``ptr`` inside every timed call, as a training step on a new batch does;
the anchors likewise do all their work (``to_dense_batch``, nested tensors) per call.

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
import os
import sys
from collections.abc import Callable
from pathlib import Path

import torch

from setattn.matmul import fast_float32_matmul, onednn_is_exact

from helpers.engine_cases import (
    CASES,
    D64_DIM,
    D64_HEADS,
    D64_ITEMS,
    D64_SETS,
    anchor_differences,
    case_d64_attend,
    case_d64_sdpa,
    d64_flops,
    padded_pairs_ratio,
    pair_ratios,
    ragged_sizes,
    small_sizes,
)
from helpers.record import (
    finish,
    interleaved_seconds,
    load_average,
    make_record,
    peak_mb_here,
    subprocess_json,
    table,
)

MATMUL_N = 2048


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


def _no_grad(fn: Callable[[], object]) -> Callable[[], object]:
    def run():
        with torch.no_grad():
            return fn()
    return run


def matmul_table(repeats: int) -> tuple[dict, dict]:
    """Achieved GFLOP/s of the d64 case against torch.mm's rate, all measured now; also
    the rate of the same product through oneDNN, which PyTorch does not use for float32
    by default (on AMD CPUs it is the faster of the two). Returns (table, raw numbers)."""
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
    title = (f"complete attention, {D64_SETS} sets x {D64_ITEMS}, {D64_HEADS} heads x "
             f"{D64_DIM}, against the float32 matmul rate")
    notes = (f"torch.mm {MATMUL_N}x{MATMUL_N}: {mm:.1f} GFLOP/s; through oneDNN {dnn:.1f} "
             f"GFLOP/s (oneDNN exact in float32 here: {onednn}); flops count QK^T and PV, "
             "3x the forward's for forward + backward; medians of interleaved rounds")
    out = table(title, ["complete attention", "ms", "GFLOP/s", "of torch.mm rate",
                        "of oneDNN rate"], rows, notes)
    return out, {"matmul_gflops": mm, "onednn_gflops": dnn, "seconds": sec}


def comparisons() -> list[tuple[str, str, list[tuple[str, str]]]]:
    """(group, setattn case, [(anchor label, anchor case)]): each group is timed in one
    set of interleaved rounds."""
    pad = padded_pairs_ratio(ragged_sizes())
    return [
        ("complete 64 sets x 128", "complete_attend", [
            ("SDPA on the same batch already padded (no PyG)", "complete_sdpa"),
            ("PyG to_dense_batch + SDPA", "complete_pyg_dense")]),
        ("complete 64 sets x 128, with q/k/v projections", "complete_setattn_proj", [
            ("PyG TransformerConv on the 1M-edge list", "complete_transformerconv")]),
        ("ragged, 128 sets of 4..512", "ragged_attend", [
            ("SDPA per power-of-two size bucket", "ragged_buckets"),
            (f"to_dense_batch + SDPA, all padded to 512 ({pad:.1f}x the pairs)",
             "ragged_padded_sdpa")]),
        ("ragged, 128 sets of 4..512 (2 rounds: the anchor takes seconds)", "ragged_attend",
         [("nested-tensor (jagged) SDPA", "ragged_nested")]),
        ("small, 64 sets of 20..60, new batch per call", "small_attend", [
            ("PyG to_dense_batch + SDPA", "small_pyg_dense"),
            ("nested-tensor (jagged) SDPA", "small_nested"),
            ("SDPA per power-of-two size bucket", "small_buckets")]),
        ("sparse 100k nodes / 1M edges, GAT score", "sparse_attend", [
            ("PyG GATConv", "sparse_pyg_gatconv")]),
        ("complete 8 sets x 512, 8 heads x 64", "d64_attend", [("SDPA", "d64_sdpa")]),
    ]


def measure_memory(case: str) -> dict[str, float]:
    """In this (fresh) process: peak RSS growth of the first pass of ``case`` (set-up
    done, nothing run yet) and of the second."""
    fn = CASES[case]()
    first = peak_mb_here(fn)
    return {"first_mb": first, "warm_mb": peak_mb_here(fn)}


def _memory(case: str, args: argparse.Namespace) -> dict[str, float]:
    if args.no_memory:
        return {"first_mb": float("nan"), "warm_mb": float("nan")}
    return subprocess_json(__file__, case, ["--threads", str(args.threads)])


def _group_rows(group: str, ours: str, anchors: list[tuple[str, str]], args, raw: dict
                ) -> list[list[str]]:
    """Time one group in interleaved rounds, measure memory; its table rows."""
    slow = {"complete_transformerconv", "ragged_nested"} & {a for _, a in anchors}
    repeats = 2 if slow else args.repeats
    cases = {name: CASES[name]() for name in [ours, *(a for _, a in anchors)]}
    sec = interleaved_seconds(cases, repeats)
    mem = raw.setdefault("memory_mb", {})
    for name in cases:
        mem[name] = mem.get(name) or _memory(name, args)
        print(f"  measured {name}: {sec[name] * 1e3:.1f} ms, {mem[name]}", file=sys.stderr)
    raw.setdefault("seconds", {})[group] = sec
    rows = []
    for label, anchor in anchors:
        m_ours, m_anchor = mem[ours], mem[anchor]
        rows.append([f"{group}: attend vs {label}", f"{sec[ours] * 1e3:.1f}",
                     f"{sec[anchor] * 1e3:.1f}", f"{sec[anchor] / sec[ours]:.2f}x",
                     *_mem_cells(m_ours["first_mb"], m_anchor["first_mb"]),
                     *_mem_cells(m_ours["warm_mb"], m_anchor["warm_mb"])])
    return rows


def run_comparisons(args: argparse.Namespace) -> tuple[dict, dict]:
    """Time every group in interleaved rounds, measure memory; (table, raw numbers)."""
    diffs = anchor_differences()
    pairs = {kind: pair_ratios(sizes) for kind, sizes in
             (("small (first batch)", small_sizes(0)), ("ragged", ragged_sizes()))}
    raw: dict = {"max_abs_difference": diffs, "pairs_over_real": pairs}
    rows = []
    for group, ours, anchors in comparisons():
        if not args.only or ours.startswith(args.only):
            rows += _group_rows(group, ours, anchors, args, raw)
    notes = ("speed-up = anchor ms / setattn ms (> 1: setattn faster); memory ratio = "
             "anchor MB / setattn MB (> 1: setattn lighter); first pass includes building "
             "the topology's size buckets or CSR layouts. Largest |anchor - attend| on the "
             f"forward output: {max(diffs.values()):.1e}. Attention pairs computed over the "
             "real pairs: " + "; ".join(
                 f"{kind}: " + ", ".join(f"{k} {v:.2f}x" for k, v in p.items())
                 for kind, p in pairs.items()))
    out = table("forward + backward against the anchors, 4 heads x 16 unless said",
                ["comparison (fwd+bwd)", "setattn ms", "anchor ms", "speed-up",
                 "first pass: setattn MB", "anchor MB", "memory ratio",
                 "after warm-up: setattn MB", "anchor MB", "memory ratio"], rows, notes)
    return out, raw


def _mem_cells(ours: float, anchor: float) -> list[str]:
    return [f"{ours:.0f}", f"{anchor:.0f}", f"{anchor / max(ours, 1e-9):.2f}x"]


def summary(comparison: dict | None, matmul: dict | None) -> str:
    """The record's summary: what was compared and the headline ratios."""
    parts = []
    if comparison is not None and comparison["rows"]:
        ups = [float(r[3].rstrip("x")) for r in comparison["rows"]]
        parts.append("setattn.attend forward + backward against SDPA, PyG and nested-tensor "
                     f"SDPA, measured in one run: speed-ups {min(ups):.2f}x to {max(ups):.2f}x")
    if matmul is not None:
        share = {r[0]: r[3] for r in matmul["rows"]}
        parts.append(f"at head dim 64 attend reaches {share.get('attend fwd', '-')} (forward) "
                     f"and {share.get('attend fwd+bwd', '-')} (forward + backward) of "
                     "torch.mm's float32 rate")
    return "; ".join(parts) + "."


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memory", metavar="CASE", help=argparse.SUPPRESS)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--no-memory", action="store_true", help="skip the memory columns")
    parser.add_argument("--only", metavar="PREFIX",
                        help="only the groups whose setattn case starts with PREFIX "
                             "(complete, ragged, small, sparse, d64); no matmul table")
    parser.add_argument("--only-matmul", action="store_true",
                        help="only the head-dim-64 table against the matmul rate")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads(),
                        help="torch CPU threads for every side (default: torch's)")
    parser.add_argument("--out", type=Path, help="the record (default results/engine.json)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.memory:
        print(json.dumps(measure_memory(args.memory)))
        return
    start = os.getloadavg()[0]
    print(f"torch {torch.__version__}, {args.threads} threads, load average {load_average()}",
          file=sys.stderr)
    tables, raw = [], {}
    if not args.only_matmul:
        comparison, raw["comparisons"] = run_comparisons(args)
        tables.append(comparison)
    if not args.only:
        matmul, raw["matmul"] = matmul_table(args.repeats)
        tables.append(matmul)
    load = max(start, os.getloadavg()[0])
    text = summary(None if args.only_matmul else tables[0], None if args.only else tables[-1])
    if load > 1.5:
        text += f" The machine was shared (load up to {load:.1f}): read the ratios, not the times."
    finish(make_record("engine", "Engine: setattn.attend against SDPA and PyG", text, tables,
                       args.threads, raw, load=load), args.out)


if __name__ == "__main__":
    main()
