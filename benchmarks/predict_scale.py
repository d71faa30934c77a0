"""Large-scale ``setattn predict``: throughput and peak memory against the input size.

Run:  .venv/bin/python benchmarks/predict_scale.py [--n 1000000] [--anchor 100000]
          [--workers 1 2] [--model RUN_DIR] [--workdir DIR] [--out RECORD]
      (writes results/predict_scale.json)

Builds a CSV of N SMILES by cycling through the bundled sets (FreeSolv, ESOL, Tox21:
9601 SMILES, 8 of them unparsable, so the error path is exercised too) and runs
``python -m setattn.cli predict`` on it as a subprocess, once per case:

  anchor rows   --anchor molecules, once per --workers value (1 worker is the speed anchor)
  full row      N molecules with the largest --workers value

Memory is polled every 0.25 s over the predict process and its worker processes
(:func:`watch_tree`): the parent's peak RSS, the largest worker's peak RSS, their sum
(an upper bound: forked workers share the parent's pages, counted again in each RSS)
and the peak total PSS (shared pages split among sharers). Bounded streaming shows
as a memory ratio near 1 between N and the anchor with the same workers; the target
is at most 1 GB whatever N. Every case's output is checked: one row per input row,
the SMILES column equal to the input's, in order.

Without --model a model is trained first (FreeSolv, 1 epoch, the default
architecture but --descriptors none): RDKit descriptors cost about 8 ms per
molecule, which would make a million molecules take hours; pass --model to time a
run of your own. Training time is not part of the table.
"""

from __future__ import annotations

import argparse
import csv
import itertools
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from record import finish, make_record, table  # noqa: E402

from setattn.datasets import DATASETS_DIR  # noqa: E402

SOURCES = [("freesolv.csv", "smiles"), ("delaney-processed.csv", "smiles"),
           ("tox21.csv", "smiles")]


def bundled_smiles() -> list[str]:
    smiles = []
    for name, column in SOURCES:
        with open(DATASETS_DIR / "molecules" / name, newline="") as handle:
            smiles += [row[column] for row in csv.DictReader(handle)]
    return smiles


def write_input(path: Path, n: int) -> None:
    """N rows (id, smiles), cycling through the bundled SMILES."""
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["id", "smiles"])
        for i, s in zip(range(n), itertools.cycle(bundled_smiles())):
            writer.writerow([i, s])


def _column(path: Path, column: str) -> Iterator[str]:
    with open(path, newline="") as handle:
        for row in csv.DictReader(handle):
            yield row[column]


def check_aligned(data: Path, output: Path) -> int:
    """Rows of ``output``; raises unless its SMILES column equals ``data``'s, row by row."""
    rows = 0
    for a, b in itertools.zip_longest(_column(data, "smiles"), _column(output, "smiles")):
        if a != b:
            raise SystemExit(f"{output}: row {rows}: {b!r} where the input has {a!r}")
        rows += 1
    return rows


def _env() -> dict:
    root = str(Path(__file__).resolve().parents[1])
    path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": "1"}


def train_model(out: Path) -> Path:
    cmd = [sys.executable, "-m", "setattn.cli", "train",
           "--data", str(DATASETS_DIR / "molecules" / "freesolv.csv"),
           "--target-columns", "expt", "--epochs", "1", "--descriptors", "none",
           "--output-dir", str(out)]
    subprocess.run(cmd, check=True, env=_env(), stdout=subprocess.DEVNULL)
    return out


def _proc_kb(pid: int, path: str, field: str) -> int:
    """A ``field:  N kB`` line of /proc/PID/PATH in kB (0 if the process is gone)."""
    try:
        with open(f"/proc/{pid}/{path}") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        pass
    return 0


def _descendants(root: int) -> list[int]:
    """PIDs of ``root``'s living descendants, from the parent PIDs in /proc/*/stat."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    # the command name may hold spaces: the fields after ")" are safe
                    parents[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
                continue
    found, frontier = [], [root]
    while frontier:
        pid = frontier.pop()
        children = [c for c, p in parents.items() if p == pid]
        found += children
        frontier += children
    return found


def watch_tree(proc: subprocess.Popen, interval: float = 0.25) -> dict:
    """Wait for ``proc``, polling the memory of it and its descendants.

    Returns:
        MB figures: ``parent_peak`` (VmHWM, the kernel's exact peak RSS of ``proc``),
        ``child_peak`` (the largest VmHWM of a descendant), ``rss_sum`` (the sum of all
        those peaks: an upper bound, as forked workers share their parent's pages and
        RSS counts shared pages in every process), and ``pss_peak`` (the largest total
        proportional set size seen in one poll: shared pages divided among their
        sharers, the tree's actual footprint), plus ``children`` seen.
    """
    hwm: dict[int, int] = {}
    pss_peak = 0
    while proc.poll() is None:
        pids = [proc.pid, *_descendants(proc.pid)]
        for pid in pids:
            hwm[pid] = max(hwm.get(pid, 0), _proc_kb(pid, "status", "VmHWM"))
        pss_peak = max(pss_peak, sum(_proc_kb(pid, "smaps_rollup", "Pss") for pid in pids))
        time.sleep(interval)
    children = [v for pid, v in hwm.items() if pid != proc.pid]
    return {"parent_peak": hwm.get(proc.pid, 0) / 1024,
            "child_peak": max(children, default=0) / 1024,
            "rss_sum": sum(hwm.values()) / 1024, "pss_peak": pss_peak / 1024,
            "children": len(children)}


def run_case(model: Path, data: Path, output: Path, workers: int) -> dict:
    cmd = [sys.executable, "-m", "setattn.cli", "predict", "--model", str(model),
           "--data", str(data), "--output", str(output), "--workers", str(workers)]
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, env=_env(), stdout=subprocess.DEVNULL)
    memory = watch_tree(proc)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"predict failed ({proc.returncode}): {' '.join(cmd)}")
    rows = check_aligned(data, output)
    return {"seconds": seconds, "rows": rows, **memory}


def scale_table(results: dict, args: argparse.Namespace) -> dict:
    """One row per (N, workers), speed against the anchor of 1 worker."""
    base = results[args.anchor, args.workers[0]]
    rows = []
    for (n, w), r in results.items():
        anchor = results[args.anchor, w]
        rows.append([f"{n:,}", str(w), f"{r['rows']:,}", f"{r['seconds']:.1f}",
                     f"{n / r['seconds']:,.0f}",
                     f"{(n / r['seconds']) / (args.anchor / base['seconds']):.2f}x",
                     f"{r['parent_peak']:.0f}", f"{r['child_peak']:.0f}", f"{r['rss_sum']:.0f}",
                     f"{r['pss_peak']:.0f}", f"{r['pss_peak'] / anchor['pss_peak']:.2f}x"])
    model = args.model or "trained here: FreeSolv, 1 epoch, --descriptors none"
    return table("setattn predict on N SMILES cycled from the bundled sets",
                 ["N", "workers", "rows out", "seconds", "mol/s",
                  f"speed vs {args.workers[0]}-worker anchor", "parent RSS MB",
                  "worker RSS MB", "RSS sum MB", "peak PSS MB", "PSS vs anchor"], rows,
                 f"model: {model}. Memory polled every 0.25 s over the process tree; RSS sum "
                 "counts shared pages in every process (an upper bound), PSS splits them.")


def summary(results: dict, args: argparse.Namespace) -> str:
    """The record's summary: the full run's speed and whether memory stayed bounded."""
    full = results[args.n, max(args.workers)]
    worst = max(max(r["pss_peak"], r["parent_peak"]) for r in results.values())
    return (f"setattn predict streamed {args.n:,} molecules at {args.n / full['seconds']:,.0f} "
            f"mol/s with {max(args.workers)} worker(s); the largest peak (PSS or parent RSS) "
            f"of any run was {worst:.0f} MB against {args.anchor:,} molecules' "
            f"{results[args.anchor, max(args.workers)]['pss_peak']:.0f} MB (target <= 1024 MB:"
            f" {'met' if worst <= 1024 else 'not met'}).")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1_000_000, help="molecules in the full run")
    parser.add_argument("--anchor", type=int, default=100_000,
                        help="molecules in the anchor runs (one per --workers value)")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--model", type=Path, help="run directory (default: train one)")
    parser.add_argument("--workdir", type=Path, help="where the CSV files go (default: a "
                        "temporary folder, removed at the end)")
    parser.add_argument("--out", type=Path, help="the record (default "
                        "results/predict_scale.json)")
    args = parser.parse_args(argv)
    start = os.getloadavg()[0]

    with tempfile.TemporaryDirectory() as tmp:
        work = args.workdir or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        model = args.model or train_model(work / "model")
        inputs = {n: work / f"smiles_{n}.csv" for n in {args.anchor, args.n}}
        for n, path in inputs.items():
            write_input(path, n)
        cases = [(args.anchor, w) for w in args.workers] + [(args.n, max(args.workers))]
        results = {}
        for n, w in cases:
            results[n, w] = run_case(model, inputs[n], work / "preds.csv", w)
            r = results[n, w]
            print(f"done: {n} molecules, {w} worker(s): {r['seconds']:.1f} s, "
                  f"peak PSS {r['pss_peak']:.0f} MB", file=sys.stderr)

    load = max(start, os.getloadavg()[0])
    finish(make_record("predict_scale", "Large-scale predict: throughput and memory",
                       summary(results, args), [scale_table(results, args)], 1,
                       {f"{n}x{w}": r for (n, w), r in results.items()}, load=load), args.out)


if __name__ == "__main__":
    main()
