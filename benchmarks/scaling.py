"""Scaling curves: attention time and memory against set size for three topologies.

Run:  .venv/bin/python benchmarks/scaling.py --threads 1
      (prints the table, writes benchmarks/results/scaling.json and scaling.png)

One set of N items, 4 heads x 16, q = k = v leaves, ``setattn.attend`` forward +
backward (loss = sum of the output), for

  complete  every item attends to every item: N^2 edges, dense blocks (SDPA);
  window    items within radius r = 8 of each other: N (2r + 1) edges, gathered windows;
  sparse    a random graph with 16 incoming edges per item: 16 N edges, the path plan()
            picks: FUSED_DOT's compiled loops up to FUSED_MAX_EDGES (N = 4,096), the CSR
            kernels above, whose step shows in the curve.

Time is the median of several passes after a warm-up pass; memory is the peak RSS growth
of one pass in a fresh subprocess (see benchmarks/helpers/record.py). The plot puts both on log-log
axes with N and N^2 guide lines: complete attention's time grows as N^2 and the other two
linearly; the memory of all three grows linearly, because the dense path never holds the
(N, N) matrix (SDPA's CPU kernel works in tiles) and the sparse path keeps only the
(E, H) weights.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import torch

import setattn
from setattn.engine.plan import FUSED_MAX_EDGES

from helpers.record import (
    RESULTS,
    finish,
    load_average,
    make_record,
    peak_mb_here,
    subprocess_json,
    table,
    time_it,
)

HEADS, HEAD_DIM = 4, 16
RADIUS = 8
DEGREE = 16
SIZES = [256, 512, 1024, 2048, 4096, 8192, 16384]
TOPOLOGIES = ("complete", "window", "sparse")
PICTURE = RESULTS / "scaling.png"


def num_edges(kind: str, n: int) -> int:
    """Edges of the topology on one set of n items (window: clipped at the ends)."""
    if kind == "complete":
        return n * n
    if kind == "window":
        return sum(min(i + RADIUS, n - 1) - max(i - RADIUS, 0) + 1 for i in range(n))
    return DEGREE * n


def topology(kind: str, n: int):
    ptr = setattn.topology.ptr_from_sizes([n])
    if kind == "complete":
        return setattn.complete(ptr)
    if kind == "window":
        return setattn.window(ptr, RADIUS)
    g = torch.Generator().manual_seed(0)
    src = torch.randint(0, n, (DEGREE * n,), generator=g)  # (E,)
    dst = torch.arange(n).repeat_interleave(DEGREE)  # (E,) DEGREE incoming edges each
    return setattn.edges(torch.stack([src, dst]), n)


def build(case: str):
    """A closure running forward + backward for ``case`` = "KIND:N"."""
    kind, n = case.split(":")
    n = int(n)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(n, HEADS, HEAD_DIM, generator=g).requires_grad_() for _ in range(3))
    top = topology(kind, n)
    return lambda: setattn.attend(q, k, v, top).sum().backward()


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, key, label in ((axes[0], "ms", "forward + backward (ms)"),
                           (axes[1], "mb", "peak memory growth (MB)")):
        for kind, marker in zip(TOPOLOGIES, "osd"):
            pts = [(r["n"], r[key]) for r in rows if r["kind"] == kind and r[key] > 0]
            if pts:
                ax.plot(*zip(*pts), marker=marker, label=kind)
        ns = sorted({r["n"] for r in rows})
        ref = [r[key] for r in rows if r["kind"] == "window" and r["n"] == ns[0] and r[key] > 0]
        if ref:  # guide lines through the window curve's first point
            ax.plot(ns, [ref[0] * n / ns[0] for n in ns], "k:", lw=1, label="~ N")
            ax.plot(ns, [ref[0] * (n / ns[0]) ** 2 for n in ns], "k--", lw=1, label="~ N^2")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("set size N (items)")
        ax.set_ylabel(label)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend()
    fig.suptitle(f"setattn.attend, one set, {HEADS} heads x {HEAD_DIM}, {torch.get_num_threads()}"
                 f" thread(s): complete (N^2 edges), window r={RADIUS} (N(2r+1)), "
                 f"sparse ({DEGREE}N)", fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)


def measure(args: argparse.Namespace) -> list[dict]:
    """Time and memory of every (size, topology)."""
    rows = []
    for n in args.sizes:
        for kind in TOPOLOGIES:
            case = f"{kind}:{n}"
            seconds = time_it(build(case), repeats=args.repeats, warmup=1)
            mb = float("nan") if args.no_memory else float(subprocess_json(
                __file__, case, ["--threads", str(args.threads)])["peak_mb"])
            rows.append({"kind": kind, "n": n, "edges": num_edges(kind, n),
                         "ms": seconds * 1e3, "mb": mb})
            print(f"  {case}: {seconds * 1e3:.1f} ms, {mb:.1f} MB", file=sys.stderr, flush=True)
    return rows


def scaling_table(rows: list[dict]) -> dict:
    """One row per N: time and memory of each topology."""
    cells = {(r["kind"], r["n"]): r for r in rows}
    out = []
    for n in sorted({r["n"] for r in rows}):
        line = [f"{n:,}"]
        for kind in TOPOLOGIES:
            r = cells[kind, n]
            line += [f"{r['ms']:.1f}", f"{r['mb']:.1f}"]
        out.append(line)
    columns = ["N"] + [f"{kind} {unit}" for kind in TOPOLOGIES for unit in ("ms", "MB")]
    return table(f"attend forward + backward on one set of N items, {HEADS} heads x "
                 f"{HEAD_DIM}", columns, out,
                 f"complete: N^2 edges; window: radius {RADIUS}, N (2r + 1) edges; sparse: "
                 f"{DEGREE} random incoming edges per item. ms: median of passes after a "
                 "warm-up; MB: peak RSS growth of one pass in a fresh process. Picture: "
                 "scaling.png.")


def growth(rows: list[dict], kind: str, key: str) -> float:
    """How much ``key`` grows from the smallest to the largest N, per doubling of N."""
    pts = sorted((r["n"], r[key]) for r in rows if r["kind"] == kind)
    (n0, a), (n1, b) = pts[0], pts[-1]
    doublings = max(len(bin(n1 // n0)) - 3, 1)
    return (b / a) ** (1 / doublings) if a > 0 else float("nan")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memory", metavar="CASE", help=argparse.SUPPRESS)
    parser.add_argument("--sizes", type=int, nargs="+", default=SIZES)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--no-memory", action="store_true", help="skip the memory runs")
    parser.add_argument("--out", type=Path, help="the record (default results/scaling.json)")
    parser.add_argument("--picture", type=Path, default=PICTURE, help="the PNG to write")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.memory:
        fn = build(args.memory)
        fn()  # warm-up: kernels and the topology's cached layouts
        print(json.dumps({"peak_mb": peak_mb_here(fn)}))
        return
    start = os.getloadavg()[0]
    print(f"torch {torch.__version__}, {args.threads} thread(s), load average "
          f"{load_average()}", file=sys.stderr)
    rows = measure(args)
    plot(rows, args.picture)
    load = max(start, os.getloadavg()[0])
    text = ("Time and memory of setattn.attend against set size for three topologies: per "
            f"doubling of N, complete attention's time grows {growth(rows, 'complete', 'ms'):.1f}x"
            f" (N^2), the window's {growth(rows, 'window', 'ms'):.1f}x and the sparse graph's "
            f"{growth(rows, 'sparse', 'ms'):.1f}x (N on each path; plan() changes the sparse "
            f"graph's path at {FUSED_MAX_EDGES:,} edges); memory grows about "
            f"{growth(rows, 'complete', 'mb'):.1f}x for complete attention (no N x N matrix).")
    if load > 1.5:
        text += f" The machine was shared (load up to {load:.1f}): read the growth, not the times."
    finish(make_record("scaling", "Scaling of attend with set size", text,
                       [scaling_table(rows)], args.threads, {"points": rows}, load=load),
           args.out)


if __name__ == "__main__":
    main()
