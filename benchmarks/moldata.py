"""Molecule training data: featurisation (one process vs a pool), the feature cache, batching.

Run:  .venv/bin/python benchmarks/moldata.py [--rows 2048] [--workers 2]

The first ``--rows`` Tox21 rows (datasets/molecules/tox21.csv), featurised as ``setattn
train`` does (bond graph + RDKit descriptors) by ``setattn.molprop.featurize.featurize_csv``:

  featurise, 1 process    cache off, SETATTN_FEATURIZE_WORKERS=0
  featurise, pool         cache off, SETATTN_FEATURIZE_WORKERS=--workers
  cache write + read      the first call featurises and writes the cache, the second
                          reads it (timed)

and batches of 32 molecules built by PyG's ``Batch.from_data_list``, by
``collate_molecules`` and by ``PackedMolecules.batch`` (median over all batches of one
shuffled epoch, interleaved rounds). Every line prints its ratio to the first line of its
group, all measured in this run.
"""

from __future__ import annotations

import argparse
import csv
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch_geometric.data import Batch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from util import load_average, print_table  # noqa: E402

from setattn.datasets import DATASETS_DIR, TOX21_TASKS  # noqa: E402
from setattn.domains.descriptors import descriptor_count  # noqa: E402
from setattn.molprop.batching import PackedMolecules, collate_molecules  # noqa: E402
from setattn.molprop.featurize import featurize_csv  # noqa: E402


def _subset(rows: int, folder: Path) -> Path:
    with open(DATASETS_DIR / "molecules" / "tox21.csv", newline="") as f:
        reader = csv.DictReader(f)
        records = [r for _, r in zip(range(rows), reader)]
        fields = reader.fieldnames
    path = folder / "tox21_subset.csv"
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fields)
        writer.writeheader()
        writer.writerows(records)
    return path


def _cpu_seconds() -> float:
    """CPU time (user + system) of this process and its finished children."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(
        resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _featurise(path: Path, workers: int, cache: str) -> tuple[float, float, list]:
    """(wall seconds, CPU seconds of all processes, molecules)."""
    os.environ["SETATTN_FEATURIZE_WORKERS"] = str(workers)
    os.environ["SETATTN_CACHE_DIR"] = cache
    t0, c0 = time.perf_counter(), _cpu_seconds()
    data = featurize_csv(path, "smiles", list(TOX21_TASKS), descriptor_count()).data
    return time.perf_counter() - t0, _cpu_seconds() - c0, data


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2048)
    parser.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=5, help="batching rounds")
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"load average {load_average()}")

    with tempfile.TemporaryDirectory() as tmp:
        path = _subset(args.rows, Path(tmp))
        serial, serial_cpu, data = _featurise(path, 0, "off")
        pool, pool_cpu, _ = _featurise(path, args.workers, "off")
        _featurise(path, 0, str(Path(tmp) / "cache"))  # featurise and write the cache
        cached, cached_cpu, _ = _featurise(path, 0, str(Path(tmp) / "cache"))
    print(f"\nTox21, first {args.rows} rows, {len(data)} molecules, bond graph + "
          f"{descriptor_count()} RDKit descriptors\n")
    print_table(["featurisation", "seconds", "CPU seconds", "molecules/s", "vs 1 process"], [
        ["featurise, 1 process", f"{serial:.2f}", f"{serial_cpu:.2f}",
         f"{len(data) / serial:,.0f}", "1.00x"],
        [f"featurise, pool of {args.workers}", f"{pool:.2f}", f"{pool_cpu:.2f}",
         f"{len(data) / pool:,.0f}", f"{serial / pool:.2f}x"],
        ["read from the cache", f"{cached:.2f}", f"{cached_cpu:.2f}",
         f"{len(data) / cached:,.0f}", f"{serial / cached:.0f}x"],
    ])
    print("CPU seconds: user + system time of this process and its pool workers; a pool "
          "can only beat one process when the machine has idle cores for its workers")

    order = torch.randperm(len(data), generator=torch.Generator().manual_seed(0)).tolist()
    batches = [order[i:i + args.batch_size] for i in range(0, len(order), args.batch_size)]
    packed = PackedMolecules(data)
    cases = {
        "PyG Batch.from_data_list": lambda b: Batch.from_data_list([data[i] for i in b]),
        "collate_molecules": lambda b: collate_molecules([data[i] for i in b]),
        "PackedMolecules.batch": packed.batch,
    }
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(args.repeats):
        for name, fn in cases.items():
            for b in batches:
                t0 = time.perf_counter()
                fn(b)
                times[name].append(time.perf_counter() - t0)
    median = {name: statistics.median(t) for name, t in times.items()}
    base = median["PyG Batch.from_data_list"]
    print(f"\nbatches of {args.batch_size}, median over {len(batches)} batches x "
          f"{args.repeats} rounds\n")
    print_table(["batching", "ms per batch", "vs PyG"],
                [[name, f"{m * 1e3:.3f}", f"{base / m:.2f}x"] for name, m in median.items()])
    print(f"\nload average {load_average()}")


if __name__ == "__main__":
    main()
