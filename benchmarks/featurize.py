"""Molecule featurisation and batching: setattn against PyG, the pool and the cache.

Run:  .venv/bin/python benchmarks/featurize.py --threads 1     (writes results/featurize.json)
      .venv/bin/python benchmarks/featurize.py --repeats 2 --rows 512 --out x.json

Three tables, every ratio against an anchor measured in the same run:

1. SMILES -> graph: all 7831 Tox21 SMILES (datasets/molecules/tox21.csv), one molecule
   at a time, the cases in interleaved rounds (one pass of each per round, after a
   warm-up round), median pass time and the speed ratio against PyG's ``from_smiles``:

     setattn bonds     59 one-hot atom + 14 one-hot bond features (float), bond edges
     setattn complete  59 atom features + (N*N,) topological distances, no edge list
     PyG from_smiles   9 integer atom + 3 integer bond columns (long), bond edges sorted
     RDKit parse only  Chem.MolFromSmiles alone: the floor both featurisers pay

   The 8 Tox21 SMILES RDKit cannot parse raise ``InvalidSmilesError`` in setattn
   (caught, as ``load_molecule_csv`` does) and give an empty graph in PyG.
2. Training data: the first ``--rows`` Tox21 rows featurised as ``setattn train`` does
   (bond graph + RDKit descriptors, ``featurize_csv``) in one process, by a pool of
   ``--workers`` processes, and read back from the feature cache; wall and CPU seconds
   (user + system of this process and its workers: a pool beats one process only where
   cores are idle).
3. Batching: batches of ``--batch-size`` molecules by PyG's ``Batch.from_data_list``,
   ``collate_molecules`` and ``PackedMolecules.batch`` (median over all batches of one
   shuffled epoch, ``--repeats`` rounds).
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
from collections.abc import Callable
from pathlib import Path

import torch
from rdkit import Chem, RDLogger
from torch_geometric.data import Batch
from torch_geometric.utils import from_smiles

sys.path.insert(0, str(Path(__file__).resolve().parent))
from record import finish, interleaved_seconds, make_record, table  # noqa: E402

from setattn.datasets import DATASETS_DIR, TOX21_TASKS  # noqa: E402
from setattn.domains.descriptors import descriptor_count  # noqa: E402
from setattn.domains.molecules import InvalidSmilesError, mol_to_data  # noqa: E402
from setattn.molprop.batching import PackedMolecules, collate_molecules  # noqa: E402
from setattn.molprop.featurize import featurize_csv  # noqa: E402

TOX21 = DATASETS_DIR / "molecules" / "tox21.csv"


def read_smiles() -> list[str]:
    with open(TOX21, newline="") as handle:
        return [row["smiles"] for row in csv.DictReader(handle)]


def setattn_pass(smiles: list[str], graph: str) -> int:
    """Featurise every molecule; return how many gave a graph."""
    built = 0
    for s in smiles:
        try:
            mol_to_data(s, graph=graph)
        except InvalidSmilesError:
            continue
        built += 1
    return built


def pyg_pass(smiles: list[str]) -> int:
    return sum(1 for s in smiles if from_smiles(s).num_nodes > 0)


def parse_pass(smiles: list[str]) -> int:
    return sum(1 for s in smiles if Chem.MolFromSmiles(s) is not None)


def _subset(rows: int, folder: Path) -> Path:
    with open(TOX21, newline="") as f:
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


def graph_table(repeats: int) -> tuple[dict, dict]:
    """SMILES -> graph, every case in interleaved rounds; (table, raw seconds)."""
    smiles = read_smiles()
    cases: dict[str, Callable[[], int]] = {
        "setattn bonds": lambda: setattn_pass(smiles, "bonds"),
        "setattn complete": lambda: setattn_pass(smiles, "complete"),
        "PyG from_smiles": lambda: pyg_pass(smiles),
        "RDKit parse only": lambda: parse_pass(smiles),
    }
    built = {name: fn() for name, fn in cases.items()}
    median = interleaved_seconds(cases, repeats)
    pyg = median["PyG from_smiles"]
    rows = [[name, str(built[name]), f"{median[name]:.2f}",
             f"{len(smiles) / median[name]:,.0f}", f"{pyg / median[name]:.2f}x"]
            for name in cases]
    return table(f"SMILES -> graph, all {len(smiles)} Tox21 SMILES",
                 ["case", "graphs", "seconds", "mol/s", "vs PyG from_smiles"], rows,
                 f"median of {repeats} interleaved rounds after a warm-up round"), median


def training_tables(rows: int, workers: int, batch_size: int, repeats: int
                    ) -> tuple[list[dict], dict]:
    """Featurisation for training (one process, pool, cache) and batching."""
    with tempfile.TemporaryDirectory() as tmp:
        path = _subset(rows, Path(tmp))
        serial, serial_cpu, data = _featurise(path, 0, "off")
        pool, pool_cpu, _ = _featurise(path, workers, "off")
        _featurise(path, 0, str(Path(tmp) / "cache"))  # featurise and write the cache
        cached, cached_cpu, _ = _featurise(path, 0, str(Path(tmp) / "cache"))
    n = len(data)
    feat = table(f"featurisation for training: first {rows} Tox21 rows, {n} molecules, bond "
                 f"graph + {descriptor_count()} RDKit descriptors",
                 ["featurisation", "seconds", "CPU seconds", "molecules/s", "vs 1 process"], [
        ["1 process", f"{serial:.2f}", f"{serial_cpu:.2f}", f"{n / serial:,.0f}", "1.00x"],
        [f"pool of {workers} processes", f"{pool:.2f}", f"{pool_cpu:.2f}",
         f"{n / pool:,.0f}", f"{serial / pool:.2f}x"],
        ["read from the cache", f"{cached:.2f}", f"{cached_cpu:.2f}", f"{n / cached:,.0f}",
         f"{serial / cached:.0f}x"]],
        "CPU seconds: user + system of this process and its pool workers; a pool beats one "
        "process only where the machine has idle cores for its workers")
    median = batching_seconds(data, batch_size, repeats)
    base = median["PyG Batch.from_data_list"]
    batch = table(f"batching, {batch_size} molecules",
                  ["batching", "ms per batch", "vs PyG Batch.from_data_list"],
                  [[name, f"{m * 1e3:.3f}", f"{base / m:.2f}x"] for name, m in median.items()],
                  f"median over every batch of one shuffled epoch, {repeats} rounds")
    raw = {"featurise_seconds": {"serial": serial, "pool": pool, "cache": cached},
           "batch_seconds": median}
    return [feat, batch], raw


def batching_seconds(data: list, batch_size: int, repeats: int) -> dict[str, float]:
    """Median seconds per batch of the three ways of batching molecules."""
    order = torch.randperm(len(data), generator=torch.Generator().manual_seed(0)).tolist()
    batches = [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
    packed = PackedMolecules(data)
    cases = {
        "PyG Batch.from_data_list": lambda b: Batch.from_data_list([data[i] for i in b]),
        "collate_molecules": lambda b: collate_molecules([data[i] for i in b]),
        "PackedMolecules.batch": packed.batch,
    }
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(repeats):
        for name, fn in cases.items():
            for b in batches:
                t0 = time.perf_counter()
                fn(b)
                times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(t) for name, t in times.items()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="timed rounds (median)")
    parser.add_argument("--rows", type=int, default=2048, help="Tox21 rows for training data")
    parser.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, help="the record (default results/featurize.json)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    RDLogger.DisableLog("rdApp.*")  # PyG's from_smiles does the same; keep stderr quiet
    start = os.getloadavg()[0]
    graphs, graph_raw = graph_table(args.repeats)
    training, raw = training_tables(args.rows, args.workers, args.batch_size, args.repeats)
    raw["graph_seconds"] = graph_raw
    load = max(start, os.getloadavg()[0])
    text = (f"setattn's mol_to_data builds bond graphs {graphs['rows'][0][4]} the speed of "
            f"PyG's from_smiles; the feature cache reads training data "
            f"{training[0]['rows'][2][4]} faster than featurising it, and PackedMolecules "
            f"batches {training[1]['rows'][2][2]} faster than PyG's Batch.from_data_list.")
    if load > 1.5:
        text += f" The machine was shared (load up to {load:.1f}): read the ratios."
    finish(make_record("featurize", "Featurisation and batching of molecules", text,
                       [graphs, *training], args.threads, raw, load=load), args.out)


if __name__ == "__main__":
    main()
