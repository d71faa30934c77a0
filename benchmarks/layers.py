"""setattn GATConv vs PyG GATConv: forward+backward time and peak memory.

A random graph (default 100k nodes, 1M directed edges, uniform endpoints, self loops
added by both layers), 32 input features, 4 heads x 16 channels, concat. The setattn
layer is ``GATConv.from_pyg(pyg_layer)``, so both compute the same function (the
script checks the outputs agree).

Measurements:

* time: median wall time of ``--repeats`` forward+backward passes (loss = sum of
  squares of the output, gradients for all parameters) after one warm-up pass, both
  layers in this process in interleaved rounds (one pass of each per round), so that
  the drifting load of a shared machine hits both alike;
* first call and memory, each layer in its own fresh subprocess: the time of its first
  pass, and the growth of the process's peak resident set size (VmHWM) during the first
  forward+backward over the resident size just before it. The peak is reset with
  ``/proc/self/clear_refs`` right before the pass, so allocations made while building
  the graph do not hide it. This counts everything the pass touches (activations,
  gradients, temporaries, allocator slack), the CPU analogue of CUDA's
  ``max_memory_allocated`` delta.

    python benchmarks/layers.py                # the full size, prints a table
    python benchmarks/layers.py --nodes 10000 --edges 100000 --repeats 3
    python benchmarks/layers.py --profile      # top ops of the setattn pass
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch_geometric.nn as pyg_nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from util import interleaved_seconds, load_average, peak_mb_here  # noqa: E402

from setattn.nn import GATConv  # noqa: E402


def build(args: argparse.Namespace):
    """Graph and the two layers (same weights), deterministic in ``args.seed``."""
    gen = torch.Generator().manual_seed(args.seed)
    x = torch.randn(args.nodes, args.in_channels, generator=gen)
    edge_index = torch.randint(0, args.nodes, (2, args.edges), generator=gen)
    torch.manual_seed(args.seed)
    pyg = pyg_nn.GATConv(args.in_channels, args.channels, heads=args.heads)
    ours = GATConv.from_pyg(pyg)
    return x, edge_index, {"setattn": ours, "pyg": pyg}


def step(layer: torch.nn.Module, x: torch.Tensor, edge_index: torch.Tensor) -> None:
    layer.zero_grad(set_to_none=True)
    layer(x, edge_index).square().sum().backward()


def measure(args: argparse.Namespace) -> dict:
    """Runs inside the subprocess for one layer: the first pass's time and peak memory
    (the steady time is measured in the parent, interleaved)."""
    torch.set_num_threads(args.threads)
    x, edge_index, layers = build(args)
    layer = layers[args.case]
    del layers
    t0 = time.perf_counter()
    peak_mb = peak_mb_here(lambda: step(layer, x, edge_index))
    return {"case": args.case, "first_seconds": time.perf_counter() - t0, "peak_mb": peak_mb}


def interleaved_layer_seconds(args: argparse.Namespace) -> dict[str, float]:
    """Median fwd+bwd seconds of both layers, measured in alternating rounds."""
    torch.set_num_threads(args.threads)
    x, edge_index, layers = build(args)
    cases = {name: (lambda layer=layer: step(layer, x, edge_index))
             for name, layer in layers.items()}
    return interleaved_seconds(cases, args.repeats)


def profile(args: argparse.Namespace) -> None:
    torch.set_num_threads(args.threads)
    x, edge_index, layers = build(args)
    layer = layers[args.case]
    step(layer, x, edge_index)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        step(layer, x, edge_index)
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=20))


def check_same(args: argparse.Namespace) -> float:
    x, edge_index, layers = build(args)
    with torch.no_grad():
        return float((layers["setattn"](x, edge_index) - layers["pyg"](x, edge_index))
                     .abs().max())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=100_000)
    p.add_argument("--edges", type=int, default=1_000_000)
    p.add_argument("--in-channels", type=int, default=32)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--channels", type=int, default=16, help="channels per head")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=torch.get_num_threads())
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--case", choices=["setattn", "pyg"], default="setattn",
                   help="with --measure / --profile: which layer")
    p.add_argument("--measure", action="store_true", help="internal: measure one case")
    p.add_argument("--profile", action="store_true", help="profile one fwd+bwd of --case")
    p.add_argument("--out", help="also write the results as JSON to this file")
    args = p.parse_args()
    if args.measure:
        print(json.dumps(measure(args)))
        return
    if args.profile:
        profile(args)
        return

    print(f"GATConv fwd+bwd: {args.nodes} nodes, {args.edges} edges (+ self loops), "
          f"in {args.in_channels}, {args.heads} heads x {args.channels}, "
          f"{args.threads} threads, torch {torch.__version__}, "
          f"load average {load_average()}")
    print(f"max |setattn - pyg| on the forward output: {check_same(args):.2e}")
    # the subprocesses measure the first call and memory; time is measured below
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in vars(args).items()
             if k in ("nodes", "edges", "in_channels", "heads", "channels", "threads", "seed")]
    results = {}
    for case in ("pyg", "setattn"):
        cmd = [sys.executable, os.path.abspath(__file__), "--measure", f"--case={case}", *flags]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        results[case] = json.loads(out.strip().splitlines()[-1])
    for case, seconds in interleaved_layer_seconds(args).items():
        results[case]["seconds"] = seconds
    rows = [("PyG GATConv", results["pyg"]), ("setattn GATConv", results["setattn"])]
    print(f"\n{'layer':18s} {'fwd+bwd ms':>11s} {'first call ms':>14s} {'peak MB':>9s}")
    for name, r in rows:
        print(f"{name:18s} {1000 * r['seconds']:11.1f} {1000 * r['first_seconds']:14.1f} "
              f"{r['peak_mb']:9.1f}")
    t_ratio = results["pyg"]["seconds"] / results["setattn"]["seconds"]
    f_ratio = results["pyg"]["first_seconds"] / results["setattn"]["first_seconds"]
    m_ratio = results["pyg"]["peak_mb"] / max(results["setattn"]["peak_mb"], 1e-9)
    print(f"{'ratio pyg/setattn':18s} {t_ratio:10.2f}x {f_ratio:13.2f}x {m_ratio:8.2f}x")
    print("fwd+bwd: median of repeated passes on the same edge_index after warm-up (as in "
          "training), both layers in interleaved rounds in one process; first call: the "
          "first pass, which also builds the sparse layouts, one subprocess per layer. "
          "Memory: peak RSS growth (VmHWM reset via /proc/self/clear_refs) during that "
          "first pass.")
    print(f"result: setattn GATConv is {t_ratio:.2f}x the speed of PyG's "
          f"(fwd+bwd) and uses {1 / m_ratio:.2f}x its peak memory "
          f"(target: >= 2x the speed at <= 0.5x the memory: "
          f"{'met' if t_ratio >= 2 and 1 / m_ratio <= 0.5 else 'not met'})")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"results": results, "time_ratio": t_ratio, "first_call_ratio": f_ratio,
                       "memory_ratio": m_ratio,
                       "config": vars(args)}, f, indent=2)


if __name__ == "__main__":
    main()
