"""setattn vs chemprop 2.3.1 on FreeSolv, ESOL and Tox21: test metric and training wall time.

Run:  .venv/bin/python benchmarks/molecules.py                  (all sets, seeds 0 1 2)
      .venv/bin/python benchmarks/molecules.py --datasets freesolv --seeds 0

Both tools train with their default settings on the same CSV and the same random
80/10/10 split: the split is ``setattn.molprop.splits.random(n, (0.8, 0.1, 0.1), seed)``, which
``setattn train --split random --seed S`` uses, handed to chemprop as a split column.
Rows whose SMILES RDKit cannot parse are dropped first (chemprop stops at the first
such row; Tox21 has 8). Both test metrics are computed by the same code
(``setattn.molprop.metrics.evaluate``) from each tool's test predictions. Wall time is the whole
``train`` command (featurisation with setattn's feature cache off, training, evaluation),
measured here. Training throughput is training molecules x epochs run / training seconds:
for setattn ``train_seconds`` from ``metrics.json`` (the wall time of ``fit``: set-up,
training steps, per-epoch validation, checkpoints, loading the best weights; plus the
kernel ridge's fit), for chemprop the wall time of Lightning's ``Trainer.fit``, read by a
wrapper (``CHEMPROP_TIMED``) that times that call and otherwise runs chemprop's own
command line unchanged. Both tools run
one after another, both limited to the same number of CPU threads (``--threads``, default 1, which
is setattn's default: on a shared 2-core machine two threads per process slowed both
tools several-fold). chemprop is installed on first use into ``benchmarks/.venv-chemprop`` with
``pip install torch==2.13.0 chemprop==2.3.1``.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch
from rdkit import Chem, RDLogger

from setattn.molprop import splits
from setattn.molprop.metrics import evaluate

sys.path.insert(0, str(Path(__file__).resolve().parent))
from util import load_average  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CHEMPROP_VENV = ROOT / "benchmarks" / ".venv-chemprop"
SIZES = (0.8, 0.1, 0.1)

TOX21_TASKS = ["NR-AR", "NR-AR-LBD", "NR-AhR", "NR-Aromatase", "NR-ER", "NR-ER-LBD",
               "NR-PPAR-gamma", "SR-ARE", "SR-ATAD5", "SR-HSE", "SR-MMP", "SR-p53"]
DATASETS = {
    "freesolv": ("molecules/freesolv.csv", ["expt"], "regression", "rmse"),
    "esol": ("molecules/delaney-processed.csv",
             ["measured log solubility in mols per litre"], "regression", "rmse"),
    "tox21": ("molecules/tox21.csv", TOX21_TASKS, "classification", "roc_auc"),
}


def ensure_chemprop() -> Path:
    """The chemprop executable, installing it into its own virtual environment if needed."""
    exe = CHEMPROP_VENV / "bin" / "chemprop"
    if not exe.exists():
        print(f"installing chemprop 2.3.1 into {CHEMPROP_VENV} ...", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", str(CHEMPROP_VENV)], check=True)
        pip = [str(CHEMPROP_VENV / "bin" / "python"), "-m", "pip", "install", "--quiet"]
        subprocess.run([*pip, "torch==2.13.0", "chemprop==2.3.1"], check=True)
    return exe


# Runs chemprop's command line, timing Trainer.fit (training epochs with their validation)
# and counting the epochs it ran; writes {"fit_seconds", "epochs"} to $CHEMPROP_FIT_JSON.
CHEMPROP_TIMED = """
import json, os, sys, time
import lightning.pytorch as pl
from chemprop.cli.main import main

_fit = pl.Trainer.fit

def timed_fit(self, *args, **kwargs):
    start = time.perf_counter()
    out = _fit(self, *args, **kwargs)
    with open(os.environ["CHEMPROP_FIT_JSON"], "w") as f:
        json.dump({"fit_seconds": time.perf_counter() - start,
                   "epochs": self.current_epoch}, f)
    return out

pl.Trainer.fit = timed_fit
sys.argv[0] = "chemprop"
sys.exit(main())
"""


def clean_csv(name: str, seeds: list[int], out: Path) -> tuple[Path, list[str], np.ndarray]:
    """Write the parsable rows of a data set with one split column per seed.

    Returns:
        the CSV path, its SMILES in row order, and the (M, T) targets (NaN if missing).
    """
    rel, targets, _, _ = DATASETS[name]
    RDLogger.DisableLog("rdApp.*")
    with open(ROOT / "datasets" / rel, newline="") as f:
        rows = [r for r in csv.DictReader(f)
                if r["smiles"] and Chem.MolFromSmiles(r["smiles"]) is not None]
    n = len(rows)
    labels = {}
    for seed in seeds:
        part = ["train"] * n
        _, val, test = splits.random(n, SIZES, seed)
        for i in val:
            part[i] = "val"
        for i in test:
            part[i] = "test"
        labels[seed] = part
    path = out / name / "data.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["smiles", *targets, *[f"split{s}" for s in seeds]])
        for i, r in enumerate(rows):
            w.writerow([r["smiles"], *[r[t] for t in targets], *[labels[s][i] for s in seeds]])
    y = np.array([[float(r[t]) if r[t] != "" else np.nan for t in targets] for r in rows])
    return path, [r["smiles"] for r in rows], y


def _timed(cmd: list[str], log: Path, threads: int, **env_extra: str) -> float:
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads),
               **env_extra)
    t0 = time.perf_counter()
    with open(log, "w") as f:
        res = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env)
    seconds = time.perf_counter() - t0
    if res.returncode != 0:
        raise RuntimeError(f"{cmd[0]} failed (exit {res.returncode}); see {log}")
    return seconds


def run_setattn(name: str, data: Path, seed: int, out: Path, threads: int,
                extra: list[str]) -> dict:
    """Train with setattn's defaults (plus ``extra`` flags); returns the test metric, wall
    seconds, throughput."""
    _, targets, task, metric = DATASETS[name]
    run_dir = out / name / f"setattn_seed{seed}"
    cmd = [str(Path(sys.executable).parent / "setattn"), "train", "--data", str(data),
           "--smiles-column", "smiles", "--target-columns", *targets, "--task", task,
           "--split", "random", "--split-sizes", *map(str, SIZES), "--seed", str(seed),
           "--output-dir", str(run_dir), "--num-threads", str(threads), *extra]
    # featurisation from scratch in every run, as chemprop does (no feature cache hit)
    seconds = _timed(cmd, out / name / f"setattn_seed{seed}.log", threads,
                     SETATTN_CACHE_DIR="off")
    metrics = json.loads((run_dir / "metrics.json").read_text())
    epochs = sum(m["epochs_run"] for m in metrics["models"])
    # a regression run blends a kernel ridge into the network: each part's own test metric
    parts = metrics.get("components", {}).get("test", {})
    return {"metric": float(metrics["test"][metric]), "seconds": seconds,
            "mol_per_s": metrics["split"]["train"] * epochs / metrics["train_seconds"],
            "network": float(parts["attention"][metric]) if parts else float("nan"),
            "kernel": float(parts["kernel_ridge"][metric]) if parts else float("nan")}


def run_chemprop(name: str, data: Path, smiles: list[str], y: np.ndarray, seed: int,
                 out: Path, threads: int) -> dict:
    """Train chemprop with its defaults on the same split; returns as ``run_setattn``."""
    _, targets, task, metric = DATASETS[name]
    run_dir = out / name / f"chemprop_seed{seed}"
    python = ensure_chemprop().parent / "python"
    timing = out / name / f"chemprop_seed{seed}_fit.json"
    cmd = [str(python), "-c", CHEMPROP_TIMED, "train", "--data-path", str(data),
           "--smiles-columns", "smiles", "--target-columns", *targets, "--task-type", task,
           "--splits-column", f"split{seed}", "--output-dir", str(run_dir),
           "--pytorch-seed", str(seed), "--data-seed", str(seed)]
    seconds = _timed(cmd, out / name / f"chemprop_seed{seed}.log", threads,
                     CHEMPROP_FIT_JSON=str(timing))
    fit = json.loads(timing.read_text())
    train, _, test = splits.random(len(smiles), SIZES, seed)
    test = sorted(test)  # chemprop keeps file order within the split column's test rows
    with open(run_dir / "model_0" / "test_predictions.csv", newline="") as f:
        pred_rows = list(csv.DictReader(f))
    if [r["smiles"] for r in pred_rows] != [smiles[i] for i in test]:
        raise RuntimeError(f"chemprop's test rows differ from the split in {data}")
    p = torch.tensor([[float(r[t]) for t in targets] for r in pred_rows])  # (M, T)
    result = evaluate(torch.tensor(y[test], dtype=torch.float32), p, task, targets)
    return {"metric": float(result[metric]), "seconds": seconds,
            "mol_per_s": len(train) * fit["epochs"] / fit["fit_seconds"]}


def _mean_std(values: list[float]) -> str:
    if any(v != v for v in values):  # NaN: a part this run does not have
        return "-"
    if len(values) == 1:
        return f"{values[0]:.3f}"
    return f"{statistics.mean(values):.3f} +- {statistics.stdev(values):.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=list(DATASETS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "bench_molecules")
    parser.add_argument("--skip-chemprop", action="store_true", help="only run setattn")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads of each tool")
    parser.add_argument("--print-only", action="store_true",
                        help="train nothing: print the table of the runs saved in --out "
                        "(each data set's results.json) for --datasets")
    parser.add_argument("--setattn-flags", default="", metavar="FLAGS",
                        help="extra flags of setattn's train, one string (e.g. "
                        "\"--hidden 128\"); chemprop keeps its defaults")
    args = parser.parse_args()

    if args.print_only:
        results = [r for name in args.datasets
                   for r in json.loads((args.out / name / "results.json").read_text())]
        print_table(results, args.setattn_flags)
        return
    nan = {"metric": float("nan"), "seconds": float("nan"), "mol_per_s": float("nan")}
    print(f"load average {load_average()}", file=sys.stderr)
    results = []
    for name in args.datasets:
        data, smiles, y = clean_csv(name, args.seeds, args.out)
        metric = DATASETS[name][3]
        for seed in args.seeds:
            ours = run_setattn(name, data, seed, args.out, args.threads,
                               args.setattn_flags.split())
            theirs = nan if args.skip_chemprop else \
                run_chemprop(name, data, smiles, y, seed, args.out, args.threads)
            results.append({"dataset": name, "metric": metric, "seed": seed,
                            "setattn": ours, "chemprop": theirs,
                            "setattn_flags": args.setattn_flags})
            print(f"{name} seed {seed}: setattn {metric} {ours['metric']:.3f} (network "
                  f"{ours['network']:.3f}, kernel ridge {ours['kernel']:.3f}) "
                  f"({ours['seconds']:.0f} s, {ours['mol_per_s']:.0f} mol/s), chemprop "
                  f"{theirs['metric']:.3f} ({theirs['seconds']:.0f} s, "
                  f"{theirs['mol_per_s']:.0f} mol/s)", file=sys.stderr, flush=True)
            done = [r for r in results if r["dataset"] == name]
            (args.out / name / "results.json").write_text(json.dumps(done, indent=2))
    print(f"load average {load_average()}", file=sys.stderr)
    print_table(results, args.setattn_flags)


def print_table(results: list[dict], setattn_flags: str) -> None:
    """One row per data set: mean +- standard deviation over its seeds, and ratios."""
    header = ["data set", "metric", "seeds", "setattn", "network alone", "kernel ridge alone",
              "chemprop 2.3.1", "setattn s/run",
              "chemprop s/run", "time ratio", "setattn train mol/s", "chemprop train mol/s",
              "throughput ratio"]
    flags = {r.get("setattn_flags", setattn_flags) for r in results}
    print(f"setattn train flags beyond the defaults: {' / '.join(sorted(flags)) or 'none'}")
    print("  |  ".join(header))
    for name in dict.fromkeys(r["dataset"] for r in results):
        rs = [r for r in results if r["dataset"] == name]

        def mean(tool: str, key: str, rs: list[dict] = rs) -> float:
            return statistics.mean(r[tool][key] for r in rs)

        print("  |  ".join([
            name, rs[0]["metric"], " ".join(str(r["seed"]) for r in rs),
            _mean_std([r["setattn"]["metric"] for r in rs]),
            _mean_std([r["setattn"]["network"] for r in rs]),
            _mean_std([r["setattn"]["kernel"] for r in rs]),
            _mean_std([r["chemprop"]["metric"] for r in rs]),
            f"{mean('setattn', 'seconds'):.0f}", f"{mean('chemprop', 'seconds'):.0f}",
            f"{mean('chemprop', 'seconds') / mean('setattn', 'seconds'):.2f}x faster",
            f"{mean('setattn', 'mol_per_s'):.0f}", f"{mean('chemprop', 'mol_per_s'):.0f}",
            f"{mean('setattn', 'mol_per_s') / mean('chemprop', 'mol_per_s'):.2f}x",
        ]))

if __name__ == "__main__":
    main()
