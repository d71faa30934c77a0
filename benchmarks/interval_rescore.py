"""Saved regression runs of the benchmark with their 90 % intervals calibrated anew.

The prediction intervals are computed after training (``scoring.ensemble_scores``):
where only the interval step changes, a saved run of ``benchmarks/molecules.py`` becomes
the run today's code would make by scoring it again. For every setattn regression run
folder under ``--runs`` this script reloads the ensemble as saved (networks and kernel
ridge), scores its validation and test parts with the function ``setattn train`` calls,
checks that the test and validation metrics equal the run's records (so the models and
parts are the run's), and writes under ``--out`` the run folder (its files copied as
they are, with the new ``metrics.json``: its ``uncertainty`` replaced, everything else
as saved) and the record in ``results.json`` with the new coverage, Spearman
correlation and mean width. Nothing is trained or fitted, and no time is measured
again: costs are the saved run's.

    python benchmarks/interval_rescore.py --runs runs/report9_a runs/report9_b --out runs/report10
"""

from __future__ import annotations

import json
from pathlib import Path

from kernel_rescore import copy_run, keep, part_data, rescore_args, saved_record
from molecule_jobs import load_results, record_key, setattn_result
from molecule_sets import SETS
from recalibrate import open_run, run_folders

from setattn.molprop.scoring import ensemble_scores

TOLERANCE = 1e-6
"""Largest relative difference between a metric scored again and the run's record."""


def _check(recorded: float, again: float, what: str, folder: Path) -> None:
    if abs(again - recorded) > TOLERANCE * max(1.0, abs(recorded)):
        raise SystemExit(f"{folder}: scored again, the {what} is {again:.8f}; the record has "
                         f"{recorded:.8f}: not the run's models or data")


def rescored_metrics(folder: Path) -> tuple[dict, object]:
    """The run's ``metrics.json`` with its intervals computed again, and the opened run."""
    run = open_run(folder)
    old = run.metrics
    if old["task"] != "regression":
        raise SystemExit(f"{folder}: a {old['task']} run has no prediction intervals")
    val, test = (part_data(run, run.split[p]) for p in ("val", "test"))
    scores = ensemble_scores(run.models, val, test, old["task"], old["targets"],
                             old.get("components", {}).get("kernel"))
    for part in ("test", "val"):
        _check(old[part]["rmse"], scores[part]["rmse"], f"{part} RMSE", folder)
    return {**old, "uncertainty": scores["uncertainty"]}, run


def rescore(folder: Path, out: Path) -> dict:
    """Score one saved run's intervals again, write its folder under ``out`` and return its
    record (the saved record with the new coverage, Spearman correlation and width)."""
    metrics, run = rescored_metrics(folder)
    dataset, column = folder.parent.parent.name, folder.parent.name
    target = out / dataset / column / "setattn"
    copy_run(folder, target, run.data, metrics)
    record = saved_record(folder, run)
    again = setattn_result(metrics, target, SETS[dataset].metric)
    result = {**record["result"], **{k: again[k] for k in ("coverage", "spearman",
                                                            "mean_width")}}
    return {**record, "result": result, "interval_rescore": {
        "from": str(folder), "spread": metrics["uncertainty"]["calibration"]["spread"],
        "before": {k: record["result"][k] for k in ("coverage", "spearman", "mean_width")}}}


def main(argv: list[str] | None = None) -> None:
    args = rescore_args(argv, __doc__, "molecules.py --out folders holding saved runs")
    done = {record_key(r) for r in load_results(args.out)}
    for folder in run_folders(args.runs):
        if json.loads((folder / "metrics.json").read_text())["task"] != "regression":
            print(f"{folder}: classification, no intervals: skipped", flush=True)
            continue
        record = rescore(folder, args.out)
        keep(args.out, done, folder, record)
        r, before = record["result"], record["interval_rescore"]["before"]
        print(f"{folder}: coverage {r['coverage']:.3f} (was {before['coverage']:.3f}), "
              f"Spearman {r['spearman']:.3f} (was {before['spearman']:.3f}), width "
              f"{r['mean_width']:.3f} (was {before['mean_width']:.3f})", flush=True)


if __name__ == "__main__":
    main()
