"""Atom attributions measured against known truth (Sanchez-Lengeling et al., NeurIPS 2020).

Two tasks whose per-atom truth is known, built from SMILES:

- **crippen**: target = RDKit's Crippen logP (``Crippen.MolLogP``); truth per heavy atom =
  its ``rdMolDescriptors._CalcCrippenContribs`` contribution plus those of its hydrogens
  (they sum to MolLogP); score = mean per-molecule Kendall tau (scipy), molecules whose
  truth is constant (tau undefined) left out and counted.
- **benzene**: label = the molecule has a benzene ring (SMARTS ``c1ccccc1``); truth =
  the atoms of benzene rings; score = mean per-molecule ROC-AUC (sklearn) over the
  positive molecules that also have an atom outside benzene rings.

Each task is built from the bundled sets (ESOL SMILES for crippen, Tox21 for benzene) and
from SMILES not used for either: the Huuskonen solubility SD files (both tasks). Each is
trained by ``setattn train`` with the command line's defaults (descriptors and, for
regression, the kernel ridge included: what users run) on a random 80/10/10 split, seed
0; the validation part chooses the default method, the test part is reported. Each
method explains the run's ensemble, as ``setattn explain`` does. The molecules are each
SMILES's largest fragment, written as canonical SMILES.

    python benchmarks/attribution.py --limit 250          # everything (~35 min, 1 core)
    python benchmarks/attribution.py --sets bundled --parts val --limit 100 --out x.json

Task CSVs and runs go to ``--work``. Each (task, set) is stored when it finishes, its
scores of every part, in ``benchmarks/runs/attribution/`` (``record.store_run``), keyed by
the ``setattn/`` library, the SMILES source, the methods, the parts and ``--limit``: a
rerun skips the stored ones, so the work lands piece by piece (``--sets bundled --tasks
crippen`` runs one). The record, ``results/attribution.json``, holds the tables of the
stored pieces of the sets and tasks asked for.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch
from rdkit import Chem, RDLogger
from rdkit.Chem import Crippen, rdMolDescriptors
from scipy.stats import kendalltau
from sklearn.metrics import roc_auc_score

from setattn.explain import METHODS
from setattn.molprop.checkpoint import load_run
from setattn.molprop.explain import explain_molecule

from helpers.molecule_jobs import library_digest
from helpers.molecule_jobs import source_files as set_files
from helpers.record import (
    STORE,
    file_digest,
    finish,
    load_stored,
    make_record,
    run_key,
    store_run,
    table,
)

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "datasets" / "molecules"
BENZENE = Chem.MolFromSmarts("c1ccccc1")
PUBLISHED = {  # Sanchez-Lengeling et al. 2020, medians of graph-attribution's results
    "crippen": "GAT attention -0.06; best 0.40 (MPNN + CAM); GAT + IG 0.27",
    "benzene": "GAT attention 0.51 (random 0.61); GAT + CAM 0.99; GAT + IG 0.95",
}
SOURCES = {  # set -> task -> SMILES source
    "bundled": {"crippen": "delaney-processed.csv", "benzene": "tox21.csv"},
    "unused": {"crippen": "solubility.*.sdf", "benzene": "solubility.*.sdf"},
}


def source_files(name: str) -> list[Path]:
    """The files a SMILES source reads (one CSV, or both Huuskonen SD files)."""
    return [DATA / name] if name.endswith(".csv") else set_files("huuskonen")


def source_smiles(name: str) -> list[str]:
    """The SMILES of a bundled CSV, or of both Huuskonen SD files."""
    if name.endswith(".csv"):
        with open(DATA / name, newline="") as handle:
            return [row["smiles"] for row in csv.DictReader(handle)]
    out = []
    for path in source_files(name):
        for mol in Chem.SDMolSupplier(str(path)):
            if mol is not None:
                out.append(Chem.MolToSmiles(mol))
    return out


def largest_fragments(smiles: list[str]) -> list[Chem.Mol]:
    """The largest fragment of each SMILES that parses (canonical, duplicates dropped)."""
    seen, mols = set(), []
    for s in smiles:
        mol = Chem.MolFromSmiles(s)
        if mol is None or mol.GetNumAtoms() == 0:
            continue
        frags = Chem.GetMolFrags(mol, asMols=True)
        canonical = Chem.MolToSmiles(max(frags, key=lambda f: f.GetNumAtoms()))
        if canonical not in seen:
            seen.add(canonical)
            mols.append(Chem.MolFromSmiles(canonical))
    return mols


def crippen_truth(mol: Chem.Mol) -> np.ndarray:
    """(N,) each heavy atom's Crippen logP contribution plus its hydrogens'."""
    with_h = Chem.AddHs(mol)
    contribs = [c[0] for c in rdMolDescriptors._CalcCrippenContribs(with_h)]
    truth = np.array(contribs[: mol.GetNumAtoms()])
    for atom in with_h.GetAtoms():
        if atom.GetIdx() >= mol.GetNumAtoms():
            truth[atom.GetNeighbors()[0].GetIdx()] += contribs[atom.GetIdx()]
    return truth


def benzene_truth(mol: Chem.Mol) -> np.ndarray:
    """(N,) 1 for atoms of benzene rings, else 0."""
    truth = np.zeros(mol.GetNumAtoms())
    for match in mol.GetSubstructMatches(BENZENE):
        truth[list(match)] = 1.0
    return truth


def write_task(task: str, source: str, path: Path) -> int:
    """The task's CSV (``smiles`` and its target) from a source's SMILES; returns rows."""
    mols = largest_fragments(source_smiles(source))
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as handle:
        out = csv.writer(handle)
        out.writerow(["smiles", task])
        for mol in mols:
            value = (f"{Crippen.MolLogP(mol):.6f}" if task == "crippen"
                     else str(int(mol.HasSubstructMatch(BENZENE))))
            out.writerow([Chem.MolToSmiles(mol), value])
    return len(mols)


def train(task: str, data: Path, run: Path) -> dict:
    """``setattn train`` with the defaults (seed 0); an existing finished run is reused."""
    if not (run / "metrics.json").is_file():
        command = [sys.executable, "-m", "setattn.cli", "train", "--data", str(data),
                   "--target-columns", task, "--output-dir", str(run), "--seed", "0"]
        if task == "benzene":
            command += ["--task", "classification"]
        print("$", " ".join(command), flush=True)
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    return json.loads((run / "metrics.json").read_text())


def score(task: str, mol: Chem.Mol, values: np.ndarray) -> float | None:
    """Kendall tau (crippen) or ROC-AUC (benzene) of one molecule; None if undefined."""
    if task == "crippen":
        truth = crippen_truth(mol)
        if np.ptp(truth) == 0:
            return None
        return float(kendalltau(truth, values).statistic)
    truth = benzene_truth(mol)
    if truth.min() == truth.max():
        return None
    # an atom a method gives no value (NaN) ranks last; sklearn refuses infinities
    finite = values[np.isfinite(values)]
    lowest = float(finite.min()) - 1.0 if finite.size else 0.0
    return float(roc_auc_score(truth, np.where(np.isfinite(values), values, lowest)))


def evaluate(task: str, run: Path, part: str, methods: list[str], limit: int) -> dict:
    """Mean score per method (and a random baseline) over a part of the split."""
    models = load_run(run)[0]  # the ensemble, as ``setattn explain`` explains it
    rows = list(csv.DictReader(open(json.loads((run / "config.json").read_text())["data"])))
    index = json.loads((run / "split.json").read_text())[part]
    if task == "benzene":  # only positive molecules are scored
        index = [r for r in index if rows[r][task] == "1"]
    index = index[:limit] if limit else index
    rng = np.random.default_rng(0)
    scores = {m: [] for m in [*methods, "random"]}
    gaps, seconds = [], dict.fromkeys(methods, 0.0)
    for r in index:
        mol = Chem.MolFromSmiles(rows[r]["smiles"])
        if score(task, mol, np.zeros(mol.GetNumAtoms())) is None:
            continue
        scores["random"].append(score(task, mol, rng.random(mol.GetNumAtoms())))
        for method in methods:
            start = time.perf_counter()
            e = explain_molecule(models, rows[r]["smiles"], method)
            seconds[method] += time.perf_counter() - start
            scores[method].append(score(task, mol, e.attribution.values.numpy()))
            if e.attribution.complete:
                gaps.append(abs(e.attribution.gap()) - e.attribution.delta)
    return {"molecules": len(scores["random"]), "left_out": len(index) - len(scores["random"]),
            "members": len(models),
            "scores": {m: float(np.mean(s)) for m, s in scores.items()},
            "seconds_per_molecule": {m: s / max(len(index), 1) for m, s in seconds.items()},
            "largest_sum_gap_beyond_delta": max(gaps) if gaps else None}


SCORE = {"crippen": "Kendall tau", "benzene": "ROC-AUC"}
SMILES_NAMES = {"delaney-processed.csv": "ESOL", "tox21.csv": "Tox21",
                "solubility.*.sdf": "Huuskonen"}
TABLE_METHODS = ("integrated-gradients", "occlusion", "attention", "random")


def part_table(results: dict, part: str) -> dict:
    """One table of a part: per (task, SMILES set) the mean score of every method."""
    rows = []
    for key, r in results.items():
        task, _, key_part = key.split("/")
        if key_part != part:
            continue
        scores = r["scores"]
        best = max((m for m in scores if m != "random"), key=scores.get)
        rows.append([f"{task} ({SCORE[task]})", SMILES_NAMES.get(r["source"], r["source"]),
                     str(r["molecules"]),
                     *[f"{scores[m]:.3f}" + (" (best)" if m == best else "") if m in scores
                       else "-" for m in TABLE_METHODS]])
    title = ("test parts" if part == "test" else
             "validation parts (the bundled ones chose the default method)")
    return table(f"attribution against known per-atom truth, {title}",
                 ["task", "SMILES", "molecules", *TABLE_METHODS], rows,
                 "Published (GAT/GCN/MPNN without descriptors, medians of "
                 f"graph-attribution): crippen: {PUBLISHED['crippen']}; benzene: "
                 f"{PUBLISHED['benzene']}.")


def attribution_record(results: dict, threads: int = 1, **extra) -> dict:
    """The record of the scored parts (validation and test)."""
    parts = [p for p in ("test", "val") if any(k.endswith("/" + p) for k in results)]
    tables = [part_table(results, p) for p in parts]
    test = {f"{k.split('/')[0]} on {SMILES_NAMES.get(r['source'], r['source'])}":
            r["scores"].get("integrated-gradients") for k, r in results.items()
            if k.endswith("/test")}
    text = ("Per-atom attributions of setattn's default models (an ensemble of 3 with "
            "descriptors and kernel ridge, explained as setattn explain does) scored against "
            "known truth: Crippen logP contributions (Kendall tau) and benzene-ring atoms "
            "(ROC-AUC). Integrated gradients, the default, on the test parts: "
            + ", ".join(f"{k} {v:.3f}" for k, v in test.items()) + ".")
    return make_record("attribution", "Attributions against known truth", text, tables,
                       threads, {"parts": results}, **extra)


def piece_material(task: str, name: str, parts: list[str], methods: list[str], limit: int,
                   library: str) -> dict:
    """The key material of one stored (task, set) piece: what its scores depend on."""
    return {"kind": "attribution", "task": task, "set": name,
            "source": file_digest(source_files(SOURCES[name][task])), "parts": sorted(parts),
            "methods": sorted(methods), "limit": limit, "version": library}


def run_piece(task: str, name: str, parts: list[str], methods: list[str], limit: int,
              work: Path, library: str) -> dict:
    """Train one (task, set) and score its parts: ``{"<task>/<set>/<part>": result}``. The
    run's folder in ``work`` carries the library's digest, so that a run of another
    library is never reused."""
    data = work / f"{task}_{name}.csv"
    rows = write_task(task, SOURCES[name][task], data)
    run = work / f"{task}_{name}_{library[:12]}"
    metrics = train(task, data, run)
    results = {}
    for part in parts:
        result = evaluate(task, run, part, methods, limit)
        result.update(rows=rows, source=SOURCES[name][task], limit=limit,
                      model_test=metrics["test"], published=PUBLISHED[task])
        results[f"{task}/{name}/{part}"] = result
        print(f"{task:8s} {name:8s} {part:5s} n={result['molecules']:4d} " + "  ".join(
            f"{m} {s:.3f}" for m, s in result["scores"].items()), flush=True)
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sets", nargs="+", default=["bundled", "unused"], choices=SOURCES)
    parser.add_argument("--tasks", nargs="+", default=["crippen", "benzene"])
    parser.add_argument("--parts", nargs="+", default=["val", "test"])
    parser.add_argument("--methods", nargs="+", default=[m for m in METHODS if m != "readout"])
    parser.add_argument("--limit", type=int, default=0, help="molecules per part (0: all)")
    parser.add_argument("--work", type=Path, default=ROOT / "runs" / "attribution")
    parser.add_argument("--store", type=Path, default=STORE,
                        help="where finished pieces are kept (default benchmarks/runs)")
    parser.add_argument("--out", type=Path, help="the record (default "
                        "results/attribution.json)")
    args = parser.parse_args(argv)
    RDLogger.DisableLog("rdApp.*")
    torch.set_num_threads(1)
    start = os.getloadavg()[0]
    library = library_digest()
    results = {}
    for name in args.sets:
        for task in args.tasks:
            material = piece_material(task, name, args.parts, args.methods, args.limit, library)
            stored = load_stored("attribution", run_key(material), args.store)
            if stored is None:
                started = time.perf_counter()
                piece = run_piece(task, name, args.parts, args.methods, args.limit, args.work,
                                  library)
                path = store_run("attribution", material, {
                    "describes": {"task": task, "set": name},
                    "seconds": time.perf_counter() - started, "results": piece}, args.store)
                print(f"stored {path}", flush=True)
            else:
                piece = stored["results"]
                print(f"{task} {name}: stored ({run_key(material)})", flush=True)
            results.update(piece)
    load = max(start, os.getloadavg()[0])
    finish(attribution_record(results, load=load), args.out)


if __name__ == "__main__":
    main()
