"""Prediction speed: featurisation, ``setattn predict`` cold and warm, chemprop, scale.

Run:  .venv/bin/python benchmarks/predict.py          (writes results/predict.json)
      .venv/bin/python benchmarks/predict.py --n 500 --large 2000 --skip-chemprop --out x.json

The molecules are drug-like: the ChEMBL BACE-1 set (``datasets/molecules/bace1_chembl.csv``,
5,739 SMILES), a random sample of ``--n`` (seed 0) for the speed tables, cycled to
``--large`` rows for the large-scale run. Every process runs one torch thread
(``OMP_NUM_THREADS=1``); each table says what its ratios are against, measured in the
same run. Six tables:

1. SMILES -> graph: all 7831 Tox21 SMILES one at a time, ``mol_to_data``'s bond graph
   against PyG's ``from_smiles`` and RDKit's parse alone (interleaved rounds, medians).
2. RDKit descriptors: per molecule of the sample (its first ``--desc-n``), RDKit's public
   functions one by one (``Descriptors.descList`` less the left-out ones: the way the
   models' descriptors were first computed) against ``mol_descriptors`` for each set
   (``rdkit``, ``lean``, ``fast``), whose slowest descriptors come from shared
   intermediate results; the ``rdkit`` values are checked equal to RDKit's.
3. Featurisation part by part: the atom graph, the ``rdkit`` set,
   the descriptors of it that RDKit computes in C++ and the ``fr_`` SMARTS counts, the
   Morgan count fingerprint; the graph plus the C++ parts is a floor on one molecule's
   cost with this descriptor set.
4. ``setattn predict``: the command line on the sample with the model of ``--model``
   (default ``runs/freesolv``, the ``make demo`` run: an ensemble of 3 with the kernel
   ridge and RDKit descriptors; trained with the demo's command when absent): with a
   new, empty feature cache (cold) and again with the cache it wrote (warm), with 1 and 2
   worker processes; a run on 10 molecules gives the start-up (imports, model loading).
5. ``chemprop predict`` (chemprop 2.3.1 in ``benchmarks/.venv-chemprop``, installed on
   first use) on the same molecules and threads: a model trained 3 epochs on FreeSolv
   (prediction time does not depend on training), without descriptors and with chemprop
   1's normalised RDKit 2D descriptors (``v1_rdkit_2d_normalized``), ``--num-workers 0``.
6. Large scale: ``--large`` molecules (default 100,000, cycling all 5,739 BACE-1 SMILES)
   through ``setattn predict`` with 2 workers, with a new cache folder and again with it
   warm: the time, and the memory of the process tree polled every 0.25 s (parent and
   worker peak RSS, their sum, the peak total PSS: shared pages split among sharers)
   against the sample's cold run with 2 workers. Every output is checked: one row per
   input row, the SMILES column equal to the input's, in order.

``--kernel-only`` writes ``results/predict_kernel.json`` instead, one table: the
ensemble of ``--model`` predicting the featurised sample in-process with its kernel part
evaluated once per batch (``Ensemble.member_predictions``) against once per member (each
member predicted alone, ``Ensemble.member(k)``, as models that each held a copy of the
kernel part did), interleaved rounds, medians; the two outputs are checked equal.
"""

from __future__ import annotations

import argparse
import csv
import functools
import itertools
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
from rdkit import Chem, RDLogger, rdBase
from rdkit.Chem import rdMolDescriptors
from torch_geometric.utils import from_smiles

from setattn.chem.descriptors import (
    DESCRIPTOR_SETS,
    descriptor_count,
    descriptor_functions,
    descriptor_set,
    mol_descriptors,
    set_functions,
)
from setattn.datasets import DATASETS_DIR
from setattn.domains.fingerprints import count_fingerprint
from setattn.domains.molecules import InvalidSmilesError, mol_to_data

from helpers.chemprop_runs import ensure_chemprop
from helpers.record import (
    finish,
    interleaved_seconds,
    make_record,
    table,
    timed,
    watch_tree,
)

ROOT = Path(__file__).resolve().parents[1]
MOLECULES = DATASETS_DIR / "molecules"
DEMO_TRAIN = ["--data", str(MOLECULES / "freesolv.csv"), "--smiles-column", "smiles",
              "--target-columns", "expt", "--split", "random", "--seed", "0"]


def read_column(path: Path, column: str = "smiles") -> list[str]:
    with open(path, newline="") as handle:
        return [row[column] for row in csv.DictReader(handle)]


def drug_like(n: int) -> list[str]:
    """A random sample (seed 0) of ``n`` ChEMBL BACE-1 SMILES."""
    smiles = read_column(MOLECULES / "bace1_chembl.csv")
    return random.Random(0).sample(smiles, min(n, len(smiles)))


def write_input(path: Path, smiles: list[str], n: int) -> Path:
    """A CSV of ``n`` rows (id, smiles), cycling through ``smiles``."""
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["id", "smiles"])
        for i, s in zip(range(n), itertools.cycle(smiles)):
            writer.writerow([i, s])
    return path


def check_aligned(data: Path, output: Path, column: str = "smiles") -> int:
    """Rows of ``output``; raises unless its SMILES column equals ``data``'s, row by row."""
    rows = 0
    for a, b in itertools.zip_longest(read_column(data), read_column(output, column)):
        if a != b:
            raise SystemExit(f"{output}: row {rows}: {b!r} where the input has {a!r}")
        rows += 1
    return rows


def env(**extra: str) -> dict:
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": "1",
            "OPENBLAS_NUM_THREADS": "1", **extra}


# --------------------------------------------------------------------------------------
# tables 1 and 2: featurisation in this process


def graph_table(repeats: int) -> tuple[dict, dict]:
    """SMILES -> graph, every case in interleaved rounds; (table, raw seconds)."""
    smiles = read_column(MOLECULES / "tox21.csv")

    def setattn_pass() -> int:
        built = 0
        for s in smiles:
            try:
                mol_to_data(s)
            except InvalidSmilesError:
                continue
            built += 1
        return built

    cases: dict[str, Callable[[], int]] = {
        "setattn mol_to_data": setattn_pass,
        "PyG from_smiles": lambda: sum(1 for s in smiles if from_smiles(s).num_nodes > 0),
        "RDKit parse only": lambda: sum(1 for s in smiles if Chem.MolFromSmiles(s) is not None),
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


def _rdkit_one_by_one(mol: Chem.Mol) -> list[float]:
    values = []
    for _, fn in descriptor_functions():
        try:
            values.append(float(fn(mol)))
        except (RuntimeError, ValueError, ZeroDivisionError, OverflowError):
            values.append(float("nan"))
    return values


def descriptor_table(smiles: list[str], repeats: int) -> tuple[dict, dict]:
    """RDKit's descriptor functions one by one against ``mol_descriptors``."""
    with rdBase.BlockLogs():
        mols = [Chem.MolFromSmiles(s) for s in smiles]
    mols = [m for m in mols if m is not None]
    for m in mols:
        Chem.FastFindRings(m)
    equal = sum(torch.equal(mol_descriptors(Chem.Mol(m)),
                            _as_row(_rdkit_one_by_one(Chem.Mol(m)))) for m in mols)

    def run(fn: Callable[[Chem.Mol], object]) -> Callable[[], None]:
        def each() -> None:
            with rdBase.BlockLogs():
                for m in mols:
                    fn(Chem.Mol(m))  # a fresh copy: both would cache on the molecule
        return each

    cases = {f"RDKit functions one by one ({len(descriptor_functions())})":
             run(_rdkit_one_by_one)}
    for kind in reversed(DESCRIPTOR_SETS):
        cases[f"setattn {kind} set ({descriptor_count(kind)})"] = run(
            lambda m, kind=kind: mol_descriptors(m, kind=kind))
    median = interleaved_seconds(cases, repeats)
    base = next(iter(median.values()))
    rows = [[name, f"{s / len(mols) * 1e3:.2f}", f"{len(mols) / s:,.0f}", f"{base / s:.2f}x"]
            for name, s in median.items()]
    return table(f"RDKit descriptors of {len(mols)} drug-like molecules",
                 ["computation (descriptors)", "ms per molecule", "mol/s",
                  "vs RDKit one by one"], rows,
                 f"median of {repeats} interleaved rounds; rdkit set values equal (float32) "
                 "to RDKit's functions for "
                 f"{equal} of {len(mols)} molecules"), {**median, "equal": equal}


def _as_row(values: list[float]) -> torch.Tensor:
    row = torch.tensor(values, dtype=torch.float64)
    row = torch.where(row.abs() < 1e30, row, torch.zeros_like(row))
    return torch.nan_to_num(row, nan=0.0).float()[None]


# --------------------------------------------------------------------------------------
# table 3: featurisation part by part (the floor the C++ parts set)


@functools.cache
def cpp_functions() -> tuple[tuple[str, Callable[[Chem.Mol], object]], ...]:
    """(name, ``rdMolDescriptors.Calc<name>``) for the ``rdkit`` set's descriptors that
    RDKit computes in C++ under that name."""
    names = (name for name, _ in set_functions("rdkit"))
    return tuple((name, getattr(rdMolDescriptors, f"Calc{name}")) for name in names
                 if hasattr(rdMolDescriptors, f"Calc{name}"))


@functools.cache
def fragment_patterns() -> tuple[Chem.Mol, ...]:
    """The SMARTS query of each ``fr_`` descriptor of the ``rdkit`` set."""
    from rdkit.Chem import Fragments

    patterns = {name: fn.__defaults__[1] for name, fn in Fragments.fns}  # (unique, pattern)
    return tuple(patterns[name] for name, _ in set_functions("rdkit") if name in patterns)


def _each(mols: list[Chem.Mol], fn: Callable[[Chem.Mol], object]) -> Callable[[], None]:
    """One pass of ``fn`` over fresh copies of ``mols`` (RDKit caches on a molecule)."""
    def run() -> None:
        with rdBase.BlockLogs():
            for m in mols:
                fn(Chem.Mol(m))
    return run


def _graphs(smiles: list[str]) -> Callable[[], None]:
    def run() -> None:
        for s in smiles:
            try:
                mol_to_data(s)
            except InvalidSmilesError:
                continue
    return run


def _cpp_descriptors(mol: Chem.Mol) -> None:
    for _, fn in cpp_functions():
        fn(mol)


def _fragment_counts(mol: Chem.Mol) -> None:
    for pattern in fragment_patterns():
        len(mol.GetSubstructMatches(pattern, uniquify=True))


def cost_table(smiles: list[str], repeats: int) -> tuple[dict, dict]:
    """Milliseconds per molecule of each part of featurisation; (table, raw seconds)."""
    with rdBase.BlockLogs():
        mols = [m for m in (Chem.MolFromSmiles(s) for s in smiles) if m is not None]
    for m in mols:
        Chem.FastFindRings(m)
    cpp = f"of which C++: rdMolDescriptors.Calc<name> ({len(cpp_functions())})"
    fragments = f"of which C++: fr_ SMARTS counts ({len(fragment_patterns())})"
    cases = {
        "atom graph (parse, atoms, bonds)": _graphs(smiles),
        f"rdkit descriptor set ({len(set_functions('rdkit'))})": _each(mols, mol_descriptors),
        cpp: _each(mols, _cpp_descriptors),
        fragments: _each(mols, _fragment_counts),
        "Morgan count fingerprint": _each(mols, count_fingerprint),
    }
    median = interleaved_seconds(cases, repeats)
    ms = {name: s / len(mols) * 1e3 for name, s in median.items()}
    ms["floor: atom graph + the C++ parts"] = (
        ms["atom graph (parse, atoms, bonds)"] + ms[cpp] + ms[fragments])
    rows = [[name, f"{v:.3f}", f"{1e3 / v:,.0f}"] for name, v in ms.items()]
    return table(f"Featurisation of {len(mols)} drug-like molecules, part by part",
                 ["part", "ms per molecule", "mol/s if it were all"], rows,
                 f"median of {repeats} interleaved rounds on fresh copies of the parsed "
                 "molecules; the C++ parts are RDKit's own calls, which no rewrite in Python "
                 "makes faster, so the floor bounds one core's featurisation with this "
                 "descriptor set from above (in mol/s)"), ms


# --------------------------------------------------------------------------------------
# tables 4 to 6: command lines


def setattn_predict(model: Path, data: Path, output: Path, workers: int, cache: Path) -> dict:
    """One ``setattn predict`` run: wall seconds, rows checked, memory of the tree."""
    cmd = [sys.executable, "-m", "setattn.cli", "predict", "--model", str(model),
           "--data", str(data), "--output", str(output), "--workers", str(workers)]
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env(SETATTN_CACHE_DIR=str(cache)),
                            stdout=subprocess.DEVNULL)
    memory = watch_tree(proc)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"predict failed ({proc.returncode}): {' '.join(cmd)}")
    return {"seconds": seconds, "rows": check_aligned(data, output), **memory}


def setattn_cases(model: Path, data: Path, tiny: Path, work: Path) -> dict[str, dict]:
    """Cold and warm caches with 1 and 2 workers (each cold run with a new cache folder,
    its warm run right after it with that folder); each case carries the seconds of a
    run on 10 molecules (``startup``: imports, model loading)."""
    startup = setattn_predict(model, tiny, work / "p.csv", 1, work / "cache-tiny")["seconds"]
    out = {}
    for workers in (1, 2):
        cache = work / f"cache-{workers}"
        for state in ("cold", "warm"):
            out[f"{state} cache, {workers} worker(s)"] = {
                **setattn_predict(model, data, work / "p.csv", workers, cache),
                "startup": startup}
        print(f"setattn predict, {workers} worker(s): done", file=sys.stderr)
    return out


def chemprop_cases(data: Path, tiny: Path, work: Path) -> dict[str, dict]:
    """chemprop predict without and with RDKit descriptors, each with its start-up."""
    chemprop = [str(ensure_chemprop().parent / "chemprop")]
    out: dict[str, dict] = {}
    for name, flags in (("chemprop", []),
                        ("chemprop + RDKit 2D", ["--molecule-featurizers",
                                                 "v1_rdkit_2d_normalized"])):
        run_dir = work / name.replace(" ", "_").replace("+", "plus")
        timed([*chemprop, "train", "--data-path", str(MOLECULES / "freesolv.csv"),
               "--smiles-columns", "smiles", "--target-columns", "expt", "--epochs", "3",
               "--num-workers", "0", "--output-dir", str(run_dir), *flags],
              run_dir / "train.log", 1)
        (model,) = sorted(run_dir.rglob("best*.pt"))[:1]
        runs = {}
        for label, path in (("startup", tiny), ("run", data)):
            preds = run_dir / f"{label}.csv"
            seconds = timed([*chemprop, "predict", "--test-path", str(path), "--model-paths",
                             str(model), "--smiles-columns", "smiles", "--num-workers", "0",
                             "--preds-path", str(preds), *flags], run_dir / "predict.log", 1)
            runs[label] = {"seconds": seconds, "rows": check_aligned(path, preds)}
        out[name] = {**runs["run"], "startup": runs["startup"]["seconds"]}
        print(f"{name}: done", file=sys.stderr)
    return out


def speed_rows(cases: dict[str, dict], n: int, anchor: str) -> list[list[str]]:
    """One row per case of ``n`` molecules: seconds, mol/s with and without the case's
    start-up (10 molecules; "-" where the run took less than a second beyond it, too
    little to divide by), and the speed against ``anchor``."""
    base, rows = cases[anchor]["seconds"], []
    for name, r in cases.items():
        work = r["seconds"] - r["startup"]
        rows.append([name, f"{r['rows']:,}", f"{r['seconds']:.1f}", f"{r['startup']:.1f}",
                     f"{n / r['seconds']:,.0f}", f"{n / work:,.0f}" if work >= 1 else "-",
                     f"{base / r['seconds']:.2f}x"])
    return rows


def speed_table(title: str, cases: dict, n: int, anchor: str, note: str) -> dict:
    return table(title, ["case", "rows", "seconds", "start-up s", "mol/s",
                         "mol/s after start-up", f"vs {anchor}"],
                 speed_rows(cases, n, anchor), note)


def scale_table(runs: dict[str, dict], anchor: str) -> dict:
    rows = []
    for name, r in runs.items():
        rows.append([name, f"{r['rows']:,}", f"{r['seconds']:.1f}",
                     f"{r['rows'] / r['seconds']:,.0f}", f"{r['parent_peak']:.0f}",
                     f"{r['child_peak']:.0f}", f"{r['rss_sum']:.0f}", f"{r['pss_peak']:.0f}",
                     f"{r['pss_peak'] / runs[anchor]['pss_peak']:.2f}x"])
    return table("setattn predict at scale, 2 workers",
                 ["run", "rows out", "seconds", "mol/s", "parent RSS MB", "worker RSS MB",
                  "RSS sum MB", "peak PSS MB", "PSS vs the first"], rows,
                 "the large input cycles all 5,739 BACE-1 SMILES, so its blocks of 250 never "
                 "repeat within a run; memory polled every 0.25 s over the process tree; the "
                 "RSS sum adds the peaks of every process seen, the short-lived ones that "
                 "featurise a molecule of over 150 atoms under a deadline included, and "
                 "counts shared pages in each (an upper bound); PSS splits them")


def large_runs(model: Path, n: int, work: Path) -> dict[str, dict]:
    """``n`` molecules with 2 workers, a new cache folder (cold), then again (warm)."""
    data = write_input(work / "large.csv", read_column(MOLECULES / "bace1_chembl.csv"), n)
    out = {}
    for state in ("cold", "warm"):
        out[f"{n:,} molecules, {state} cache"] = setattn_predict(
            model, data, work / "p.csv", 2, work / "cache-large")
        print(f"{n} molecules, {state}: done", file=sys.stderr)
    return out


def demo_model(model: Path | None, work: Path) -> Path:
    """``--model``, else ``runs/freesolv`` if it exists, else the demo's run trained."""
    if model is not None:
        return model
    if (ROOT / "runs" / "freesolv" / "config.json").exists():
        return ROOT / "runs" / "freesolv"
    out = work / "freesolv"
    subprocess.run([sys.executable, "-m", "setattn.cli", "train", *DEMO_TRAIN,
                    "--output-dir", str(out)], check=True, env=env(), stdout=subprocess.DEVNULL)
    return out


def model_descriptors(model: Path) -> str:
    """The descriptor set of a run's models, in words."""
    from setattn.molprop.checkpoint import load_run

    ensemble, _ = load_run(model)
    kind = descriptor_set(ensemble.descriptor_dim)
    kernel = ", kernel ridge" if ensemble.kernel is not None else ""
    return (f"{len(ensemble)} model(s){kernel}, "
            + (f"the {kind} descriptor set" if kind else "no descriptors"))


def kernel_table(model: Path, smiles: list[str], repeats: int) -> tuple[dict, dict]:
    """Table 7: the ensemble's predictions with its kernel part once per batch against
    once per member, on the featurised ``smiles``; (table, median seconds)."""
    from setattn.molprop.checkpoint import load_run
    from setattn.molprop.featurize import featurize

    ensemble, _ = load_run(model)
    data = []
    for s in smiles:
        try:
            data.append(featurize(s, ensemble.descriptor_dim))
        except InvalidSmilesError:
            continue
    members = range(len(ensemble))
    once = ensemble.member_predictions(data)  # (K, M, T)
    each = torch.stack([ensemble.member(k).member_predictions(data)[0] for k in members])
    if not torch.equal(once, each):
        raise SystemExit("the kernel part once and once per member gave other predictions")
    seconds = interleaved_seconds({
        "once per batch": lambda: ensemble.member_predictions(data),
        "once per member": lambda: [ensemble.member(k).member_predictions(data)
                                    for k in members]}, repeats)
    rows = [[name, f"{len(data):,}", f"{t:.3f}", f"{len(data) / t:,.0f}",
             f"{seconds['once per member'] / t:.2f}x"] for name, t in seconds.items()]
    title = (f"The kernel part once per batch, an ensemble of {len(ensemble)}, "
             f"{len(data):,} featurised molecules")
    return table(title, ["kernel part", "molecules", "seconds", "mol/s",
                         "speed vs once per member"], rows,
                 f"{model_descriptors(model)}; featurisation excluded; the same predictions "
                 f"to the last bit; medians of {repeats} interleaved rounds"), seconds


def kernel_record(args: argparse.Namespace, smiles: list[str], loads: list[float]) -> None:
    """``--kernel-only``: table 7 alone, as the record ``predict_kernel``."""
    with tempfile.TemporaryDirectory() as tmp:
        kernel, seconds = kernel_table(demo_model(args.model, Path(tmp)), smiles, args.repeats)
    loads.append(os.getloadavg()[0])
    speed = seconds["once per member"] / seconds["once per batch"]
    finish(make_record("predict_kernel", "The kernel part evaluated once per prediction",
                       f"Predicting {kernel['rows'][0][1]} molecules with the demo ensemble, "
                       f"the kernel part once per batch is {speed:.2f}x as fast as once per "
                       f"member, with the same predictions.", [kernel], 1,
                       {"seconds": seconds, "loads": loads}, load=max(loads)),
           args.out or ROOT / "benchmarks" / "results" / "predict_kernel.json")


def summary(setattn: dict, chemprop: dict, large: dict, n: int, load: float,
            described: str) -> str:
    def rate(name: str, cases: dict = setattn) -> str:
        return f"{n / cases[name]['seconds']:,.0f}"

    cold1, cold2 = "cold cache, 1 worker(s)", "cold cache, 2 worker(s)"
    warm = setattn[cold1]["seconds"] / setattn["warm cache, 1 worker(s)"]["seconds"]
    r, warm_big = large.values()
    text = (f"setattn predict with the demo model ({described}) "
            f"ran {rate(cold1)} drug-like molecules/s on one core with a cold cache "
            f"(start-up included), {rate(cold2)}/s with 2 workers, and a warm cache was "
            f"{warm:.1f}x faster; {r['rows']:,} molecules took {r['seconds'] / 60:.1f} "
            f"minutes with 2 workers, {r['seconds'] / warm_big['seconds']:.1f}x the warm run.")
    if chemprop:
        text += (f" chemprop predict (one model): {rate('chemprop', chemprop)}/s; with RDKit "
                 f"2D descriptors, like for like with setattn's model, which computes them "
                 f"too, {rate('chemprop + RDKit 2D', chemprop)}/s.")
    if load > 1.5:
        text += f" The machine was shared (load up to {load:.1f}): read the ratios."
    return text


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=4000, help="drug-like molecules per run")
    parser.add_argument("--desc-n", type=int, default=300, help="molecules of tables 2 and 3")
    parser.add_argument("--large", type=int, default=100_000, help="molecules at scale")
    parser.add_argument("--repeats", type=int, default=5, help="rounds of tables 1 and 2")
    parser.add_argument("--model", type=Path, help="run directory (default: the demo's)")
    parser.add_argument("--skip-chemprop", action="store_true")
    parser.add_argument("--out", type=Path, help="the record (default results/predict.json)")
    parser.add_argument("--kernel-only", action="store_true",
                        help="only table 7, into results/predict_kernel.json")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    RDLogger.DisableLog("rdApp.*")  # PyG's from_smiles does the same; keep stderr quiet
    loads = [os.getloadavg()[0]]
    smiles = drug_like(args.n)
    if args.kernel_only:
        kernel_record(args, smiles, loads)
        return
    n = len(smiles)
    graphs, graph_raw = graph_table(args.repeats)
    descriptors, desc_raw = descriptor_table(smiles[:args.desc_n], args.repeats)
    costs, cost_ms = cost_table(smiles[:args.desc_n], args.repeats)
    loads.append(os.getloadavg()[0])
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        model = demo_model(args.model, work)
        described = model_descriptors(model)
        data = write_input(work / "drug_like.csv", smiles, n)
        tiny = write_input(work / "tiny.csv", smiles, 10)
        setattn = setattn_cases(model, data, tiny, work)
        loads.append(os.getloadavg()[0])
        chemprop = {} if args.skip_chemprop else chemprop_cases(data, tiny, work)
        large = large_runs(model, args.large, work)
        loads.append(os.getloadavg()[0])
    anchor = "cold cache, 1 worker(s)"
    tables = [graphs, descriptors, costs,
              speed_table(f"setattn predict, {n:,} drug-like molecules", setattn, n, anchor,
                          "the demo model; a new cache folder for each cold run, "
                          "the same folder again for its warm run, which reads the cached "
                          "features and predictions")]
    if chemprop:
        tables.append(speed_table(f"chemprop predict, the same {n:,} molecules", chemprop, n,
                                  "chemprop", "chemprop 2.3.1, one model, 1 thread. The "
                                  "like-for-like row is chemprop + RDKit 2D: like setattn's "
                                  "model it computes RDKit descriptors of every molecule; "
                                  "plain chemprop reads the graph alone. setattn's demo "
                                  "model is 3 networks and 2 kernel ridges, chemprop's one "
                                  "network."))
    small = {f"{n:,} molecules, cold cache": setattn["cold cache, 2 worker(s)"]}
    tables.append(scale_table({**small, **large}, next(iter(small))))
    raw = {"graph_seconds": graph_raw, "descriptor_seconds": desc_raw,
           "featurisation_ms": cost_ms, "setattn": setattn,
           "chemprop": chemprop, "large": large, "loads": loads}
    load = max(loads)
    finish(make_record("predict", "Prediction speed: featurisation, setattn predict, chemprop",
                       summary(setattn, chemprop, large, n, load, described), tables, 1, raw,
                       load=load), args.out)


if __name__ == "__main__":
    main()
