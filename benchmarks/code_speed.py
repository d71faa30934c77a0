"""Training speed of two versions of setattn's code, whole ``setattn train`` runs in turn.

A change meant to make training faster without changing what it computes (a cheaper
CSR layout, fewer checkpoint writes) is measured here: the same ``setattn train``
command runs from two source trees (``--base``, e.g. a ``git worktree`` of the commit
before the change, and ``--new``, by default this checkout), one after the other, the
order alternating each round, so that a shared machine's drifting load meets both
alike. For each data set and split it prints the median over rounds of the training
throughput (training molecules x epochs / ``train_seconds``, the benchmark report's
definition), the median of the per-round ratios new / base, and whether every round of
the two trees gave the same test metrics and epochs to the last digit (a speed change
must not change the numbers).

    git worktree add ../wt-base <commit>
    python benchmarks/code_speed.py --base ../wt-base --datasets freesolv esol --rounds 4

Splits use development seed 20 by default (the report seeds 10-14 are for the report).
Timings depend on the machine and its load (printed); they are not pass/fail.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from molecule_sets import SETS, load_set, write_csv  # noqa: E402
from util import load_average, print_table  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def train_once(tree: Path, csv: Path, targets: list[str], task: str, split: str, seed: int,
               out: Path) -> dict:
    """One ``setattn train`` (defaults, 1 thread) with ``tree`` first on the path;
    returns its ``metrics.json``."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    cmd = [sys.executable, "-m", "setattn.cli", "train", "--data", str(csv),
           "--smiles-column", "smiles", "--target-columns", *targets, "--task", task,
           "--split", split, "--seed", str(seed), "--num-threads", "1",
           "--output-dir", str(out)]
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
    return json.loads((out / "metrics.json").read_text())


def throughput(metrics: dict) -> float:
    """Training molecules x epochs run (all members) / training seconds."""
    epochs = sum(m["epochs_run"] for m in metrics["models"])
    return metrics["split"]["train"] * epochs / metrics["train_seconds"]


def same_numbers(a: dict, b: dict) -> bool:
    """Whether two runs' ``metrics.json`` give the same test and validation metrics and the
    same members (epochs run, best epoch, test metrics), to the last digit."""
    return a["test"] == b["test"] and a["val"] == b["val"] and a["models"] == b["models"]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", type=Path, required=True, help="source tree before the change")
    ap.add_argument("--new", type=Path, default=ROOT, help="source tree after the change")
    ap.add_argument("--datasets", nargs="+", default=["freesolv"], choices=sorted(SETS))
    ap.add_argument("--splits", nargs="+", default=["random", "scaffold"],
                    choices=["random", "scaffold"])
    ap.add_argument("--seed", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=4)
    args = ap.parse_args(argv)
    trees = {"base": args.base.resolve(), "new": args.new.resolve()}
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.datasets:
            spec, table = SETS[name], load_set(name)
            csv = write_csv(Path(tmp) / f"{name}.csv", table, spec.targets, {})
            for split in args.splits:
                speed = {"base": [], "new": []}
                same = True
                for r in range(args.rounds):
                    order = ["base", "new"] if r % 2 == 0 else ["new", "base"]
                    got = {}
                    for which in order:
                        out = Path(tmp) / f"{name}_{split}_{which}_{r}"
                        got[which] = train_once(trees[which], csv, list(spec.targets),
                                                spec.task, split, args.seed, out)
                        speed[which].append(throughput(got[which]))
                    same &= same_numbers(got["base"], got["new"])
                ratios = [n / b for n, b in zip(speed["new"], speed["base"])]
                rows.append([name, split, args.seed, args.rounds,
                             f"{statistics.median(speed['base']):.0f}",
                             f"{statistics.median(speed['new']):.0f}",
                             f"{statistics.median(ratios):.3f}x",
                             f"{min(ratios):.3f}x to {max(ratios):.3f}x",
                             "yes" if same else "NO"])
    print(f"setattn train (defaults, 1 thread): base {trees['base']}, new {trees['new']}; "
          f"load average at the end {load_average()}")
    print_table(["set", "split", "seed", "rounds", "base train mol/s", "new train mol/s",
                 "new / base", "its range", "same numbers"], rows, markdown=True)


if __name__ == "__main__":
    main()
