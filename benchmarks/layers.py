"""setattn GATConv / GATv2Conv vs PyG's: forward+backward time, first call and peak memory.

Two sizes:

* large: one random graph (100k nodes, 1M directed edges, uniform endpoints,
  self loops added by both layers), 32 input features, ``GATConv`` 4 heads x 16, concat;
  the same edge_index every pass (full-graph training);
* small: the sizes of molecule training: batches of 64 molecule-like graphs of
  20-60 atoms (``engine_cases.molecule_batch``: about 2,500 atoms and 5,700 directed bonds), 64
  input features, 4 heads x 16, a new batch (of 16 different ones) every pass, for
  ``GATConv``, ``GATv2Conv`` and ``GATv2Conv(edge_dim=7)`` with bond features, self
  loops added by the layers (PyG's defaults). Per-call overhead dominates here.

The setattn layer is ``from_pyg(pyg_layer)``, so both compute the same function (the
script checks the outputs agree).

Measurements:

* time: median wall time of ``--repeats`` forward+backward passes (loss = sum of
  squares of the output, gradients for all parameters) after one warm-up pass, both
  layers in this process in interleaved rounds (one pass of each per round), so that
  the drifting load of a shared machine hits both alike;
* first call and memory, each layer in fresh subprocesses (``--first-calls`` of them per
  layer, the layers alternating; the medians): the time of its first pass, and the growth
  of the process's peak resident set size (VmHWM) during the first forward+backward over
  the resident size just before it. The peak is reset with ``/proc/self/clear_refs``
  right before the pass, so allocations made while building the graph do not hide it.
  This counts everything the pass touches (activations, gradients, temporaries,
  allocator slack, setattn's sparse layouts, its compiled kernels), the CPU analogue
  of CUDA's ``max_memory_allocated`` delta.

    python benchmarks/layers.py --threads 1 --repeats 40   # both sizes: results/layers.json
    python benchmarks/layers.py --only small --nodes 10000 --edges 100000 --out x.json
    python benchmarks/layers.py --profile               # top ops of the setattn pass

The record holds one table per size; ``--only large`` / ``--only small`` runs one.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch_geometric.nn as pyg_nn

from setattn.nn import GATConv, GATv2Conv

from helpers.engine_cases import molecule_batch
from helpers.record import (
    finish,
    interleaved_seconds,
    load_average,
    make_record,
    peak_mb_here,
    table,
)

SMALL_GRAPHS, SMALL_SIZES, SMALL_BATCHES, SMALL_IN, BOND_DIM = 64, (20, 60), 16, 64, 7
KINDS = {"gat": "GATConv", "gatv2": "GATv2Conv", "gatv2_edges": "GATv2Conv, edge_dim 7"}


def graphs(args: argparse.Namespace) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """(x, edge_index, edge_attr) of every batch, deterministic in ``args.seed``."""
    gen = torch.Generator().manual_seed(args.seed)
    if args.small:
        out = []
        for _ in range(SMALL_BATCHES):
            b = molecule_batch(SMALL_GRAPHS, gen, SMALL_SIZES, SMALL_IN, BOND_DIM)
            out.append((b["x"], b["edge_index"], b["edge_attr"]))
        return out
    x = torch.randn(args.nodes, args.in_channels, generator=gen)
    edge_index = torch.randint(0, args.nodes, (2, args.edges), generator=gen)
    return [(x, edge_index, None)]


def layers(args: argparse.Namespace, kind: str) -> dict[str, torch.nn.Module]:
    """PyG's layer of ``kind`` and setattn's copy of it (same weights)."""
    torch.manual_seed(args.seed)
    width = SMALL_IN if args.small else args.in_channels
    if kind == "gat":
        pyg = pyg_nn.GATConv(width, args.channels, heads=args.heads)
        return {"setattn": GATConv.from_pyg(pyg), "pyg": pyg}
    edge_dim = BOND_DIM if kind == "gatv2_edges" else None
    pyg = pyg_nn.GATv2Conv(width, args.channels, heads=args.heads, edge_dim=edge_dim)
    return {"setattn": GATv2Conv.from_pyg(pyg), "pyg": pyg}


def step(layer: torch.nn.Module, batch: tuple, edges: bool) -> None:
    """One forward + backward of ``layer`` on ``batch`` (x, edge_index, edge_attr)."""
    x, edge_index, edge_attr = batch
    layer.zero_grad(set_to_none=True)
    out = layer(x, edge_index, edge_attr) if edges else layer(x, edge_index)
    out.square().sum().backward()


def cycling(layer: torch.nn.Module, batches: list, kind: str):
    """A closure running ``step`` on the next batch at every call."""
    state = {"i": -1}

    def run():
        state["i"] = (state["i"] + 1) % len(batches)
        step(layer, batches[state["i"]], kind == "gatv2_edges")

    return run


def measure(args: argparse.Namespace) -> dict:
    """Runs inside the subprocess for one layer: the first pass's time and peak memory
    (the steady time is measured in the parent, interleaved)."""
    torch.set_num_threads(args.threads)
    run = cycling(layers(args, args.kind)[args.case], graphs(args), args.kind)
    t0 = time.perf_counter()
    peak_mb = peak_mb_here(run)
    return {"case": args.case, "first_seconds": time.perf_counter() - t0, "peak_mb": peak_mb}


def profile(args: argparse.Namespace) -> None:
    torch.set_num_threads(args.threads)
    run = cycling(layers(args, args.kind)[args.case], graphs(args), args.kind)
    run()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        run()
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=20))


def max_difference(pair: dict[str, torch.nn.Module], batch: tuple, kind: str) -> float:
    """Largest |setattn - PyG| of the forward outputs on ``batch``."""
    x, edge_index, edge_attr = batch
    extra = (edge_attr,) if kind == "gatv2_edges" else ()
    with torch.no_grad():
        return float((pair["setattn"](x, edge_index, *extra) - pair["pyg"](x, edge_index, *extra))
                     .abs().max())


def first_calls(args: argparse.Namespace, kind: str) -> dict[str, dict]:
    """First-pass time and memory of both layers: the medians over ``args.first_calls``
    fresh subprocesses per layer, the two layers alternating, so that a slow start of
    the machine does not fall on one side only."""
    keep = ("nodes", "edges", "in_channels", "heads", "channels", "threads", "seed")
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in vars(args).items() if k in keep]
    flags += ["--small"] if args.small else []
    runs: dict[str, list[dict]] = {"pyg": [], "setattn": []}
    for _ in range(args.first_calls):
        for case in runs:
            cmd = [sys.executable, os.path.abspath(__file__), "--measure", f"--case={case}",
                   f"--kind={kind}", *flags]
            out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
            runs[case].append(json.loads(out.strip().splitlines()[-1]))
    return {case: {"case": case,
                   "first_seconds": statistics.median(r["first_seconds"] for r in found),
                   "peak_mb": statistics.median(r["peak_mb"] for r in found),
                   "first_calls": found}
            for case, found in runs.items()}


def compare(args: argparse.Namespace, kind: str) -> dict:
    """Every measurement of one kind of layer, both implementations."""
    torch.set_num_threads(args.threads)
    batches, pair = graphs(args), layers(args, kind)
    diff = max_difference(pair, batches[0], kind)
    results = first_calls(args, kind)
    cases = {name: cycling(layer, batches, kind) for name, layer in pair.items()}
    for case, seconds in interleaved_seconds(cases, args.repeats).items():
        results[case]["seconds"] = seconds
    pyg, ours = results["pyg"], results["setattn"]
    return {"results": results, "max_difference": diff,
            "time_ratio": pyg["seconds"] / ours["seconds"],
            "first_call_ratio": pyg["first_seconds"] / ours["first_seconds"],
            "memory_ratio": pyg["peak_mb"] / max(ours["peak_mb"], 1e-9)}


def size_table(kinds: dict[str, dict], small: bool, args: argparse.Namespace) -> dict:
    """The record's table of one size: both layers' rows and the ratio row per kind."""
    rows = []
    for kind, r in kinds.items():
        for name, key in (("PyG", "pyg"), ("setattn", "setattn")):
            m = r["results"][key]
            rows.append([f"{name} {KINDS[kind]}", f"{1000 * m['seconds']:.1f}",
                         f"{1000 * m['first_seconds']:.1f}", f"{m['peak_mb']:.1f}"])
        rows.append([f"ratio PyG / setattn, {KINDS[kind]}", f"{r['time_ratio']:.2f}x",
                     f"{r['first_call_ratio']:.2f}x", f"{r['memory_ratio']:.2f}x"])
    title = (f"batches of {SMALL_GRAPHS} molecule-like graphs of {SMALL_SIZES[0]}-"
             f"{SMALL_SIZES[1]} atoms, {SMALL_IN} features, a new batch every pass"
             if small else f"one graph of {args.nodes:,} nodes and {args.edges:,} random "
             f"edges (+ self loops), {args.in_channels} features, the same graph every pass")
    diff = max(r["max_difference"] for r in kinds.values())
    notes = (f"{args.heads} heads x {args.channels}. fwd+bwd: median of {args.repeats} "
             "interleaved rounds after warm-up; first call and first-pass peak memory (RSS "
             "growth, VmHWM reset): medians over "
             f"{args.first_calls} fresh processes per layer, the layers alternating; they "
             "include building setattn's sparse layouts and loading its compiled kernels. "
             f"Largest |setattn - PyG| of the outputs: {diff:.1e}.")
    return table(title, ["layer", "fwd+bwd ms", "first call ms", "first-pass peak MB"], rows,
                 notes)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", choices=["large", "small"],
                   help="one size: the large graph, or batches of 64 molecule-like graphs")
    p.add_argument("--nodes", type=int, default=100_000)
    p.add_argument("--edges", type=int, default=1_000_000)
    p.add_argument("--in-channels", type=int, default=32)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--channels", type=int, default=16, help="channels per head")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--first-calls", type=int, default=5,
                   help="fresh processes per layer whose first pass is timed (the median)")
    p.add_argument("--threads", type=int, default=torch.get_num_threads())
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--case", choices=["setattn", "pyg"], default="setattn",
                   help="with --measure / --profile: which layer")
    p.add_argument("--kind", choices=list(KINDS), default="gat",
                   help="with --measure / --profile: which kind of layer")
    p.add_argument("--measure", action="store_true", help="internal: measure one case")
    p.add_argument("--profile", action="store_true", help="profile one fwd+bwd of --case")
    p.add_argument("--small", action="store_true", help=argparse.SUPPRESS)  # internal
    p.add_argument("--out", type=Path, help="the record (default results/layers.json)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.measure:
        print(json.dumps(measure(args)))
        return
    if args.profile:
        args.small = args.small or args.only == "small"
        profile(args)
        return
    start = os.getloadavg()[0]
    print(f"torch {torch.__version__}, {args.threads} threads, load average {load_average()}",
          file=sys.stderr)
    tables, raw = [], {}
    for size in ("large", "small"):
        if args.only not in (None, size):
            continue
        args.small = size == "small"
        kinds = {kind: compare(args, kind) for kind in (KINDS if args.small else ["gat"])}
        raw[size] = kinds
        tables.append(size_table(kinds, args.small, args))
    load = max(start, os.getloadavg()[0])
    ratios = [f"{size} {KINDS[k]} {r['time_ratio']:.2f}x" for size, kinds in raw.items()
              for k, r in kinds.items()]
    text = ("setattn's GATConv / GATv2Conv (from_pyg copies, same weights) against PyG's, "
            "forward + backward in interleaved rounds; PyG time / setattn time: "
            + ", ".join(ratios) + ".")
    if load > 1.5:
        text += f" The machine was shared (load up to {load:.1f}): read the ratios."
    finish(make_record("layers", "GAT layers: setattn against PyG", text, tables,
                       args.threads, raw, load=load), args.out)


if __name__ == "__main__":
    main()
