"""torch.compile on the training path of the GAT layers and attention pooling.

Molecule-sized batches (default 32 random molecules of 10-40 atoms: chains with a ring
closure every 6 atoms, bonds in both directions, about 800 atoms and 1700 directed bonds
per batch), node width 64, 4 heads. Three cases, each a forward + backward pass:

* ``GATConv(64, 16, heads=4)`` (PyG's defaults: self loops replaced by the layer);
* ``GATv2Conv(64, 16, heads=4, edge_dim=7, add_self_loops=False)`` on edges that already
  hold one self loop per atom, as ``setattn.molprop``'s model calls it;
* ``GlobalAttentionPool(64, heads=4)`` called with ``batch``, ``ptr`` and ``dim_size``.

A fourth case, ``MoleculeNetwork``, runs ``setattn.molprop``'s model (default settings, no
descriptors) on batches of the first FreeSolv molecules, for the same numbers on the
whole training path.

For each case the table gives:

* graph breaks: ``torch._dynamo.explain`` on the forward pass (the backward graphs
  follow the forward ones), as graphs / breaks, and the distinct break reasons below;
* fullgraph: the graphs ``torch.compile(fullgraph=True)`` captures (a backend that only
  counts them), or "fails" when it cannot capture one;
* cold s: the first compiled fwd+bwd (compilation included);
* warm-up s: the compiled passes over the remaining batches, seen once each (new
  sizes: recompilation or dynamic-shape guards);
* eager ms, compiled ms: median fwd+bwd wall time over ``--repeats`` rounds, each round
  one eager and one compiled pass on the same batch (cycling over ``--batches`` batches
  of different sizes), so that the drifting load of a shared machine hits both alike.

Timings depend on the machine and its load (printed); they are not pass/fail.

    python benchmarks/compile.py                      # writes results/compile.json
    python benchmarks/compile.py --graphs 64 --batches 4 --repeats 20 --out x.json
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

# a fresh compile cache, removed at the end, so that "cold s" is a cold compilation (set
# TORCHINDUCTOR_CACHE_DIR to keep and reuse one)
FRESH_CACHE = None
if "TORCHINDUCTOR_CACHE_DIR" not in os.environ:
    FRESH_CACHE = tempfile.mkdtemp(prefix="setattn_compile_")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = FRESH_CACHE

import torch  # noqa: E402  (after the cache directory is set)
from torch._dynamo.utils import counters  # noqa: E402

from setattn.nn import GATConv, GATv2Conv, GlobalAttentionPool  # noqa: E402

from helpers.engine_cases import molecule_batch  # noqa: E402
from helpers.record import finish, interleaved_seconds, load_average, make_record, table  # noqa: E402

DIM, HEADS, BOND_DIM = 64, 4, 7
FREESOLV = Path(__file__).resolve().parents[1] / "datasets" / "molecules" / "freesolv.csv"


def with_loops(b: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Bonds plus one self loop per atom, loops marked by an extra bond feature."""
    n = b["x"].shape[0]
    loops = torch.arange(n)
    ei = torch.cat([b["edge_index"], torch.stack([loops, loops])], 1)  # (2, E + N)
    ea = torch.cat([b["edge_attr"], torch.zeros(n, BOND_DIM)], 0)  # (E + N, BOND_DIM)
    ea[-n:, -1] = 1.0
    return ei, ea


def freesolv_batches(count: int, size: int) -> list[dict]:
    """``count`` batches of ``size`` FreeSolv molecules, featurised as ``setattn train`` does."""
    import csv

    from setattn.molprop.batching import collate_molecules
    from setattn.molprop.featurize import featurize

    with open(FREESOLV, newline="") as f:
        smiles = [row["smiles"] for row in csv.DictReader(f)][: count * size]
    data = [featurize(s) for s in smiles]
    return [{"batch": collate_molecules(data[i:i + size])} for i in range(0, len(data), size)]


def cases() -> dict[str, tuple[torch.nn.Module, Callable]]:
    """name -> (module, function of (module, batch) giving a scalar loss)."""
    from setattn.molprop.config import NetworkConfig
    from setattn.molprop.network import MoleculeNetwork

    torch.manual_seed(0)

    def gat(m, b):
        return m(b["x"], b["edge_index"]).square().sum()

    def gatv2(m, b):
        return m(b["x"], b["loops"], b["loop_attr"]).square().sum()

    def pool(m, b):
        g = b["ptr"].numel() - 1
        return m(b["x"], b["batch"], b["ptr"], dim_size=g).square().sum()

    return {
        "GATConv": (GATConv(DIM, DIM // HEADS, heads=HEADS), gat),
        "GATv2Conv (model)": (GATv2Conv(DIM, DIM // HEADS, heads=HEADS, edge_dim=BOND_DIM,
                                        add_self_loops=False), gatv2),
        "GlobalAttentionPool": (GlobalAttentionPool(DIM, heads=HEADS), pool),
        "MoleculeNetwork": (MoleculeNetwork(NetworkConfig()), lambda m, b: m(b["batch"]).sum()),
    }


def fwd_bwd(module: torch.nn.Module, call: Callable, batch: dict) -> float:
    """Seconds of one forward + backward (parameter gradients) through ``call``, which runs
    the module or its compiled twin."""
    module.zero_grad(set_to_none=True)
    t0 = time.perf_counter()
    call(batch).backward()
    return time.perf_counter() - t0


def fullgraph_graphs(fn: Callable, batch: dict) -> str:
    """How many graphs ``torch.compile(fullgraph=True)`` captures for ``fn``, or "fails"."""
    graphs = []

    def count(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    try:
        torch.compile(fn, backend=count, fullgraph=True)(batch)
    except Exception:  # noqa: BLE001 - any failure to capture one graph is the answer
        return "fails"
    return str(len(graphs))


def break_report(fn: Callable, batch: dict) -> tuple[str, list[str]]:
    """'graphs / breaks' of the forward pass and the distinct break reasons (with the
    user line where dynamo records one; dynamo's break counter fills in the others)."""
    torch._dynamo.reset()
    counters["graph_break"].clear()
    info = torch._dynamo.explain(fn)(batch)
    reasons, kinds = [], set()
    for r in info.break_reasons:
        frame = r.user_stack[-1] if r.user_stack else None
        where = f" ({Path(frame.filename).name}:{frame.lineno})" if frame else ""
        reasons.append(" ".join(r.reason.split())[:110] + where)
        kinds.add(r.reason.split("\n")[0].strip())
    for message in counters["graph_break"]:  # breaks explain() lists without a reason
        first, _, rest = message.partition("\n")
        if first.strip() not in kinds:
            context = rest.partition("Developer debug context:")[2].partition("\n")[0]
            reasons.append(" ".join(f"{first} {context}".split())[:160])
    return f"{info.graph_count} / {info.graph_break_count}", list(dict.fromkeys(reasons))


def measure(name: str, module: torch.nn.Module, loss_fn: Callable, batches: list[dict],
            repeats: int) -> dict:
    def eager(b):
        return loss_fn(module, b)

    def forward_only(b):
        with torch.no_grad():
            return loss_fn(module, b)

    graphs, reasons = break_report(forward_only, batches[0])
    fullgraph = fullgraph_graphs(forward_only, batches[0])
    torch._dynamo.reset()
    compiled_module = torch.compile(module)

    def compiled(b):
        return loss_fn(compiled_module, b)

    cold = fwd_bwd(module, compiled, batches[0])
    warm = sum(fwd_bwd(module, compiled, b) for b in batches[1:])
    turn = {"eager": 0, "compiled": 0}

    def cycling(mode: str, call: Callable) -> Callable:
        def run():
            b = batches[turn[mode] % len(batches)]
            turn[mode] += 1
            fwd_bwd(module, call, b)
        return run

    seconds = interleaved_seconds({"eager": cycling("eager", eager),
                                   "compiled": cycling("compiled", compiled)}, repeats)
    return {"name": name, "graphs": graphs, "fullgraph": fullgraph, "reasons": reasons,
            "eager": 1e3 * seconds["eager"], "cold": cold, "warm": warm,
            "compiled": 1e3 * seconds["compiled"]}


def compile_table(rows: list[dict], args: argparse.Namespace) -> dict:
    """The record's table: one row per case, eager against compiled."""
    cells = [[r["name"], r["graphs"], r["fullgraph"], f"{r['eager']:.2f}", f"{r['cold']:.1f}",
              f"{r['warm']:.1f}", f"{r['compiled']:.2f}", f"{r['eager'] / r['compiled']:.2f}x"]
             for r in rows]
    reasons = "; ".join(f"{r['name']}: " + " / ".join(r["reasons"]) for r in rows
                        if r["reasons"])
    notes = (f"{args.batches} batches of {args.graphs} molecule-like graphs "
             f"({args.atoms[0]}-{args.atoms[1]} atoms; MoleculeNetwork: FreeSolv molecules), "
             f"width {DIM}, {HEADS} heads, fwd+bwd, medians of {args.repeats} interleaved "
             "rounds. cold s: the first compiled pass, compilation included; warm-up s: the "
             "other batches once each. Break reasons: " + (reasons or "none"))
    return table("torch.compile against eager", ["case", "graphs / breaks", "fullgraph",
                 "eager ms", "cold s", "warm-up s", "compiled ms", "eager / compiled"],
                 cells, notes)


def summary(rows: list[dict]) -> str:
    """The record's summary: graph breaks and the speed of compiled passes."""
    ratios = ", ".join(f"{r['name']} {r['eager'] / r['compiled']:.2f}x" for r in rows)
    breaks = ", ".join(f"{r['name']} {r['graphs']}" for r in rows)
    return ("torch.compile on setattn's GAT layers, attention pooling and the molecule "
            f"model: graphs / breaks {breaks}; eager time / compiled time {ratios} once "
            "compiled (compilation itself takes seconds to minutes, see cold s).")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--graphs", type=int, default=32, help="molecules per batch")
    parser.add_argument("--batches", type=int, default=4, help="batches of different sizes")
    parser.add_argument("--repeats", type=int, default=20, help="timed passes per mode")
    parser.add_argument("--only", nargs="*", help="case names to run (default: all)")
    parser.add_argument("--out", type=Path, help="the record (default results/compile.json)")
    args = parser.parse_args(argv)
    start = os.getloadavg()[0]
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(0)
    batches = []
    for _ in range(args.batches):
        b = molecule_batch(args.graphs, gen)
        b["loops"], b["loop_attr"] = with_loops(b)
        batches.append(b)
    atoms = [b["x"].shape[0] for b in batches]
    print(f"torch {torch.__version__}, 1 thread, {args.batches} batches of {args.graphs} "
          f"molecules ({min(atoms)}-{max(atoms)} atoms), load average {load_average()}",
          file=sys.stderr)
    args.atoms = (min(atoms), max(atoms))
    rows = []
    for name, (module, loss_fn) in cases().items():
        if args.only and name not in args.only:
            continue
        data = freesolv_batches(args.batches, args.graphs) if name == "MoleculeNetwork" else batches
        rows.append(measure(name, module, loss_fn, data, args.repeats))
    load = max(start, os.getloadavg()[0])
    finish(make_record("compile", "torch.compile on the training path", summary(rows),
                       [compile_table(rows, args)], 1, {"cases": rows}, load=load), args.out)
    if FRESH_CACHE is not None:
        shutil.rmtree(FRESH_CACHE, ignore_errors=True)


if __name__ == "__main__":
    main()
