"""MoleculeACE: setattn on 24 activity-cliff sets, beside the paper's methods and chemprop.

Run:  .venv/bin/python benchmarks/moleculeace.py          (all 24 sets, setattn and chemprop
          at setattn's ensemble size; hours; writes results/moleculeace.json)
      .venv/bin/python benchmarks/moleculeace.py --report val --anchors --out runs/ace
          (for choices: setattn alone, scored on the validation tenth of the train rows;
          no tool sees a test row; the record goes to runs/ace/moleculeace.json)

The sets (``datasets/moleculeace/``; van Tilborg, Alenicheva & Grisoni, J Chem Inf Model
2022) come with the authors' fixed ``train`` / ``test`` rows. Every tool trains on the
train rows only: a seeded random tenth of them is the validation part (early stopping,
the kernel ridge's and the intervals' calibration), the rest the training part; the test
rows are predicted once, at the end (``--report val`` leaves them out and scores the
validation tenth instead, which is what choices may look at). Target: ``y [pEC50/pKi]``.
Metrics as in the paper: test RMSE, and the cliff RMSE over the test molecules that are
part of an activity cliff (``cliff_mol``). The paper's results (``published_results.csv``)
are printed beside a test report: SVM, gradient boosting (GBM) and random forests on
ECFP, and its graph networks (GAT, MPNN, AttentiveFP).

``--anchors minimol_krr minimol_mlp`` (beside or instead of ``chemprop``) adds heads on
MiniMol's pretrained fingerprints (``minimol_runs``: a kernel ridge whose gamma and alpha
are chosen on the validation tenth, one model; and the MiniMol authors' MLP, early-stopped
on the validation tenth, an ensemble of setattn's size), on the same split CSV as chemprop,
shown as further columns. Their fingerprints are kept in ``<--out>/minimol/`` by SMILES,
shared by every set of the run. They are not part of the pre-registered reading: a call
with them never writes ``results/moleculeace.json``; their published record is
``--record benchmarks/results/moleculeace_minimol.json`` (``--tables-only --anchors
chemprop minimol_krr minimol_mlp`` rebuilds it from the stored runs).

Each finished run is kept at once as data (``record.store_run``): an anchor's (chemprop's,
MiniMol's) in ``benchmarks/runs/anchors/`` (its test predictions; the molecule benchmark's
store, keyed by the set file, the split's rows, the tool, its flags and version, members,
seed and threads), setattn's record in ``benchmarks/runs/moleculeace/``. A rerun skips
stored runs and starts an interrupted one again; ``--tables-only`` trains nothing.
"""

from __future__ import annotations

import argparse
import csv
import shlex
import shutil
import statistics
import sys
from pathlib import Path

import numpy as np

from helpers.chemprop_runs import (
    anchor_content,
    anchor_material,
    member_predictions,
    run_chemprop,
    stored_result,
)
from helpers.minimol_runs import HEADS as MINIMOL
from helpers.minimol_runs import anchor_content as minimol_content
from helpers.minimol_runs import anchor_material as minimol_material
from helpers.minimol_runs import members_of as minimol_members
from helpers.minimol_runs import run_minimol
from helpers.molecule_jobs import library_digest, setattn_ensemble
from helpers.record import (
    STORE,
    file_digest,
    finish,
    load_average,
    load_stored,
    make_record,
    missing_error,
    rows_digest,
    run_key,
    store_run,
    table,
    timed,
)

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "datasets" / "moleculeace"
TARGET = "y [pEC50/pKi]"
VAL_FRACTION, VAL_SEED = 0.1, 0
ANCHOR_TOOLS = ("chemprop", *MINIMOL)
"""The anchors ``--anchors`` may name: chemprop's defaults and the MiniMol heads."""
MINIMOL_NOTES = {
    "minimol_krr": "a kernel ridge on MiniMol's fingerprints, gamma and alpha chosen on the "
                   "validation tenth",
    "minimol_mlp": "the MiniMol authors' MLP on its fingerprints, early-stopped on the "
                   "validation tenth, at setattn's ensemble size"}
"""What the table's notes say of each MiniMol column."""
PAPER = {"SVM + ECFP": ("SVM", "ECFP"), "GBM + ECFP": ("GBM", "ECFP"), "RF + ECFP": ("RF", "ECFP"),
         "GAT": ("GAT", "GRAPH"), "MPNN": ("MPNN", "GRAPH"), "AttentiveFP": ("AFP", "GRAPH")}


def set_names() -> list[str]:
    """The 24 sets, in the order of ``datasets.csv``."""
    with open(DATA / "datasets.csv", newline="") as handle:
        return [row["Dataset"] for row in csv.DictReader(handle)]


def read_set(name: str) -> list[dict]:
    """The rows of one set: ``smiles``, ``y`` (float), ``cliff`` (bool), ``split``."""
    with open(DATA / f"{name}.csv", newline="") as handle:
        return [{"smiles": r["smiles"], "y": float(r[TARGET]), "cliff": r["cliff_mol"] == "1",
                 "split": r["split"]} for r in csv.DictReader(handle)]


def split_column(rows: list[dict], seed: int = VAL_SEED) -> list[str]:
    """``train`` / ``val`` / ``test`` per row: the authors' test rows, and a seeded random
    ``VAL_FRACTION`` of their train rows as the validation part."""
    train = [i for i, r in enumerate(rows) if r["split"] == "train"]
    chosen = np.random.default_rng(seed).permutation(len(train))[:round(VAL_FRACTION * len(train))]
    val = {train[i] for i in chosen}
    return ["test" if r["split"] == "test" else "val" if i in val else "train"
            for i, r in enumerate(rows)]


def report_rows(rows: list[dict], report: str) -> tuple[list[dict], list[str]]:
    """The rows a run sees and their split labels. ``test``: every row. ``val``: the
    train and validation rows, then the validation rows again labelled ``test`` (marked
    so in ``split``, so ``scores`` scores them); the authors' test rows are left out."""
    labels = split_column(rows)
    if report == "test":
        return rows, labels
    kept = [dict(r, split="train") for r, label in zip(rows, labels) if label != "test"]
    again = [dict(r, split="test") for r, label in zip(rows, labels) if label == "val"]
    return kept + again, [label for label in labels if label != "test"] + ["test"] * len(again)


def write_split(rows: list[dict], labels: list[str], path: Path) -> Path:
    """The CSV every tool reads: ``smiles``, ``y``, ``split``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["smiles", "y", "split"])
        writer.writerows([r["smiles"], repr(r["y"]), label] for r, label in zip(rows, labels))
    return path


def scores(rows: list[dict], predicted: dict[str, float]) -> dict[str, float]:
    """Test RMSE and cliff RMSE of predictions by SMILES (a test molecule without one
    fails the run)."""
    test = [r for r in rows if r["split"] == "test"]
    missing = [r["smiles"] for r in test if r["smiles"] not in predicted]
    if missing:
        raise RuntimeError(f"no prediction for {len(missing)} test molecules, e.g. {missing[0]}")

    def rmse(part: list[dict]) -> float:
        return float(np.sqrt(np.mean([(predicted[r["smiles"]] - r["y"]) ** 2 for r in part])))
    return {"rmse": rmse(test), "cliff_rmse": rmse([r for r in test if r["cliff"]])}


def run_setattn(rows: list[dict], data: Path, run_dir: Path, flags: list[str]) -> dict:
    """setattn trained on the split CSV; its test predictions scored."""
    from setattn.molprop.checkpoint import load_run
    from setattn.molprop.predict import predict_smiles

    exe = Path(sys.executable).parent / "setattn"
    cmd = [str(exe), "train", "--data", str(data), "--smiles-column", "smiles",
           "--target-columns", "y", "--split", "column", "--split-column", "split",
           "--seed", str(VAL_SEED), "--output-dir", str(run_dir), "--num-threads", "1", *flags]
    seconds = timed(cmd, run_dir.parent / f"{run_dir.name}.log", 1)
    ensemble, _ = load_run(run_dir)
    test = [r["smiles"] for r in rows if r["split"] == "test"]
    mean, _, _ = predict_smiles(ensemble, test)
    return {"seconds": seconds, **scores(rows, dict(zip(test, mean[:, 0].tolist())))}


def train_anchor(tool: str, data: Path, run_dir: Path, members: int, cache: Path,
                 describes: dict) -> dict:
    """Train anchor ``tool`` on the split CSV (its ``split`` column; one thread, seed
    ``VAL_SEED``): chemprop 2.3.1 with its defaults in ``run_dir``, or a MiniMol head on
    the fingerprints kept in ``cache``; ``members`` models. What its stored file holds."""
    if tool in MINIMOL:
        result, smiles, preds, member0 = run_minimol(tool, data, "split", ("y",), "regression",
                                                     cache, VAL_SEED, 1, members)
        return minimol_content(result, smiles, preds, member0, describes)
    result, smiles, preds = run_chemprop(data, "split", ("y",), "regression", run_dir,
                                         VAL_SEED, 1, [], members)
    member0 = member_predictions(run_dir, ("y",))[1] if members > 1 else None
    return anchor_content(result, smiles, preds, member0, describes)


def run_anchor(rows: list[dict], data: Path, run_dir: Path, material: dict, store: Path,
               describes: dict, cache: Path) -> dict:
    """An anchor (``material["tool"]``, ``material["members"]`` models) on the same split
    CSV, scored; read from its stored run where there is one, else trained
    (:func:`train_anchor`) and stored."""
    run = load_stored("anchors", run_key(material), store)
    if run is None:
        content = train_anchor(material["tool"], data, run_dir, material["members"], cache,
                               describes)
        run = load_stored("anchors", store_run("anchors", material, content, store).stem, store)
    result, smiles, preds = stored_result(run)
    return {**result, **scores(rows, dict(zip(smiles, preds[:, 0].tolist())))}


def materials(name: str, rows: list[dict], labels: list[str], flags: list[str]
              ) -> dict[str, dict]:
    """Each tool's key material on one set's split (``record.run_key``): the set file's
    and the split rows' digests, the tool, its flags and version, members, seed, threads.
    chemprop and the MiniMol MLP train as many models as setattn, the kernel ridge one."""
    data, split = file_digest(DATA / f"{name}.csv"), rows_digest(
        [r["smiles"] for r in rows], labels)
    members = setattn_ensemble(flags)
    ours = {"kind": "setattn", "data": data, "rows": split, "targets": ["y"],
            "task": "regression", "tool": "setattn", "flags": flags,
            "version": library_digest(), "members": members, "seed": VAL_SEED, "threads": 1}
    minimol = {tool: minimol_material(data, split, ("y",), "regression", tool,
                                      minimol_members(tool, members), VAL_SEED, 1)
               for tool in MINIMOL}
    return {"setattn": ours, "chemprop": anchor_material(
        data, split, ("y",), "regression", "chemprop", [], members, VAL_SEED, 1), **minimol}


def run_all(args: argparse.Namespace) -> dict[str, dict]:
    """Every (set, tool) run not stored yet, each stored as it finishes (an anchor in
    ``benchmarks/runs/anchors/``, setattn's record in ``benchmarks/runs/moleculeace/``);
    with ``args.tables_only`` none is trained (SystemExit naming the missing keys). All
    the runs asked for, by "<set> <part> <tool> <flags>". The MiniMol anchors of every
    set share the fingerprints kept in ``<args.out>/minimol/``."""
    flags = shlex.split(args.setattn_flags)
    cache = args.out / "minimol"
    saved, missing = {}, []
    for name in args.sets:
        rows, labels = report_rows(read_set(name), args.report)
        data = write_split(rows, labels, args.out / name / args.report / "data.csv")
        keyed = materials(name, rows, labels, flags)
        for tool in ("setattn", *args.anchors):
            key = f"{name} {args.report} {tool} {args.setattn_flags}".strip()
            material, ours = keyed[tool], tool == "setattn"
            stored = load_stored("moleculeace" if ours else "anchors", run_key(material),
                                 args.store)
            if ours and stored is not None:
                saved[key] = stored["record"]
                continue
            if args.tables_only and stored is None:
                missing.append((run_key(material), f"{tool} on {name} ({args.report} part)"))
                continue
            run_dir = args.out / name / args.report / tool
            if stored is None:
                shutil.rmtree(run_dir, ignore_errors=True)  # an interrupted run starts again
            result = run_setattn(rows, data, run_dir, flags) if ours else run_anchor(
                rows, data, run_dir, material, args.store,
                {"benchmark": "moleculeace", "set": name, "part": args.report}, cache)
            saved[key] = {"set": name, "report": args.report, "tool": tool, **result}
            if ours:
                store_run("moleculeace", material, {"record": saved[key]}, args.store)
            if stored is None:
                print(f"{name} {tool}: stored {run_key(material)}, {result['seconds']:.0f} s "
                      f"(load {load_average()})", file=sys.stderr, flush=True)
    if missing:
        raise SystemExit(missing_error(missing))
    return saved


def published() -> dict[tuple[str, str], dict[str, float]]:
    """The paper's (set, method) -> {"rmse", "cliff_rmse"} for the methods of ``PAPER``."""
    wanted = {v: k for k, v in PAPER.items()}
    out = {}
    with open(DATA / "published_results.csv", newline="") as handle:
        for r in csv.DictReader(handle):
            method = wanted.get((r["algorithm"], r["descriptor"]))
            if method and r["augmentation"] == "0":
                out[(r["dataset"], method)] = {"rmse": float(r["rmse"]),
                                               "cliff_rmse": float(r["cliff_rmse"])}
    return out


def shown_tools(runs: dict[str, dict], tools: list[str]) -> list[str]:
    """The tools the table shows: those asked for, a MiniMol anchor only where ``runs``
    hold runs of it."""
    ran = {r["tool"] for r in runs.values()}
    return [t for t in tools if t not in MINIMOL or t in ran]


def build_tables(runs: dict[str, dict], sets: list[str], tools: list[str], report: str
                 ) -> tuple[dict, str]:
    """One row per set and a row of means: each tool's (:func:`shown_tools`) and each
    paper method's RMSE (cliff RMSE; the paper's on the test rows, so only beside a
    ``test`` report); the summary sentence."""
    paper = published() if report == "test" else {}
    ours = {(r["set"], r["tool"]): r for r in runs.values()}
    tools = shown_tools(runs, tools)
    minimol = [t for t in tools if t in MINIMOL]
    done = [s for s in sets if all((s, t) in ours for t in tools)]
    columns = [*tools, *(PAPER if paper else ())]

    def cell(s: str, c: str) -> dict:
        return ours[(s, c)] if c in tools else paper[(s, c)]

    rows = [[s, *[f"{cell(s, c)['rmse']:.3f} ({cell(s, c)['cliff_rmse']:.3f})"
                  for c in columns]] for s in done]
    means = {c: {k: statistics.mean(cell(s, c)[k] for s in done) for k in ("rmse", "cliff_rmse")}
             for c in columns} if done else {}
    if done:
        rows.append([f"mean of {len(done)}",
                     *[f"{means[c]['rmse']:.3f} ({means[c]['cliff_rmse']:.3f})" for c in columns]])
    text = (f"setattn on {len(done)} MoleculeACE sets ({report} part): mean RMSE "
            f"{means['setattn']['rmse']:.3f} (cliff {means['setattn']['cliff_rmse']:.3f}).")\
        if done else "no set finished"
    if paper and done:
        svm = sum(ours[(s, "setattn")]["rmse"] < paper[(s, "SVM + ECFP")]["rmse"] for s in done)
        text += (f" The paper's SVM on ECFP: {means['SVM + ECFP']['rmse']:.3f} "
                 f"({means['SVM + ECFP']['cliff_rmse']:.3f}); setattn below it on {svm} of "
                 f"{len(done)} sets.")
    if "chemprop" in tools and done:
        won = sum(ours[(s, "setattn")]["rmse"] < ours[(s, "chemprop")]["rmse"] for s in done)
        text += f" Better than chemprop at the same ensemble size on {won} of {len(done)}."
    for tool in minimol if done else ():
        won = sum(ours[(s, "setattn")]["rmse"] < ours[(s, tool)]["rmse"] for s in done)
        text += f" Better than {tool} on {won} of {len(done)}."
    notes = ("setattn and chemprop: trained here on the authors' train rows (a tenth of "
             "them for validation), the test rows predicted once. The other columns: the "
             "paper's published results.")
    if minimol:
        notes += (" " + "; ".join(f"{t}: {MINIMOL_NOTES[t]}" for t in minimol) + "; trained "
                  "here on the same rows as chemprop, not part of the pre-registered reading.")
    return table(f"{report} RMSE (cliff RMSE) per set, pKi / pEC50 units", ["set", *columns], rows,
                 notes), text


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sets", nargs="+", default=set_names(), metavar="SET")
    p.add_argument("--anchors", nargs="*", default=["chemprop"], choices=list(ANCHOR_TOOLS),
                   help="chemprop at setattn's ensemble size, and minimol_krr / minimol_mlp: "
                   "heads on MiniMol's fingerprints (none: --anchors alone)")
    p.add_argument("--setattn-flags", default="", metavar="FLAGS")
    p.add_argument("--report", choices=("test", "val"), default="test",
                   help="the part scored (val: the validation tenth; no test row is read)")
    p.add_argument("--out", type=Path, default=ROOT / "runs" / "bench_moleculeace")
    p.add_argument("--store", type=Path, default=STORE,
                   help="where finished runs are kept as data (default benchmarks/runs)")
    p.add_argument("--tables-only", action="store_true",
                   help="train nothing: the table and record of the stored runs")
    p.add_argument("--record", type=Path,
                   help="the record (default: results/moleculeace.json for the pre-registered "
                   "reading, all 24 sets, setattn's defaults against chemprop on the test "
                   "rows; <--out>/moleculeace.json for anything else)")
    args = p.parse_args(argv)
    runs = run_all(args)
    whole = (set(args.sets) == set(set_names()) and "chemprop" in args.anchors
             and not set(args.anchors) & set(MINIMOL) and not args.setattn_flags
             and args.report == "test")
    tools = ["setattn", *args.anchors]
    runs = {k: r for k, r in runs.items() if r["report"] == args.report}
    ace, summary = build_tables(runs, args.sets, tools, args.report)
    record = make_record("moleculeace", "MoleculeACE: activity cliffs", summary, [ace], 1,
                         {"runs": runs})
    finish(record, args.record or (None if whole else args.out / "moleculeace.json"))


if __name__ == "__main__":
    main()
