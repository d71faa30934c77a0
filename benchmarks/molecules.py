"""setattn vs chemprop 2.3.1 on six molecule sets, random and scaffold splits.

Run:  .venv/bin/python benchmarks/molecules.py                       (the report: all
          sets, random and scaffold splits, seeds 10-14, test part, both anchors)
      .venv/bin/python benchmarks/molecules.py --report val --seeds 20 21 22
          (for choices: the validation part of dev seeds; the test part is given to no tool)
      .venv/bin/python benchmarks/molecules.py --print-only           (tables of saved runs)
      .venv/bin/python benchmarks/molecules.py --print-only --out runs/all \
          --import-results runs/a/results.json runs/b/results.json  (slices run apart)

Sets (``molecule_sets.SETS``, files in ``datasets/``): FreeSolv (RMSE), ESOL (RMSE), Tox21
(mean ROC-AUC over 12 tasks), Huuskonen solubility (train and test SD files merged, RMSE),
BACE1 from ChEMBL as ``bace1`` (pIC50, RMSE) and ``bace1_active`` (active, ROC-AUC). Rows
whose SMILES RDKit cannot parse are dropped first.

Splits: 80/10/10 by ``setattn.molprop.splits.random`` or ``.scaffold`` (balanced Bemis-
Murcko scaffold groups, like chemprop's ``scaffold_balanced``) with the run's seed,
written as a column of a CSV that BOTH tools read (setattn ``--split column``, chemprop
``--splits-column``), so both train, validate and test on identical molecules; the
script checks each tool's part sizes and test rows against the column. Seeds 10-14 are
the report's, and no choice of architecture, default or blend weight may look at them:
choices are made with ``--report val`` on other seeds. There each split's CSV holds only
its training and validation rows, the validation rows a second time labelled ``test``;
every "test" number printed is then a validation number, and no tool sees a test
molecule. (Both tools also pick their best epoch on that validation part.)

What each tool gets: its defaults, plus ``--setattn-flags`` / ``--chemprop-flags`` when
given (recorded with each run). Anchors: ``chemprop`` (defaults) and ``chemprop_rdkit``
(defaults plus ``--molecule-featurizers v1_rdkit_2d_normalized``, chemprop 1's
normalised RDKit 2D descriptors); ``--matched-width`` adds ``chemprop_w96``
(``--message-hidden-dim 96 --ffn-hidden-dim 96``, setattn's default width) on the first
seed of each (set, split), for throughput at matched width. setattn runs with
``--num-threads T`` and its feature cache off; both tools run one after the other with
``OMP_NUM_THREADS=MKL_NUM_THREADS=T`` (``--threads``, default 1: on a shared 2-core
machine two threads per process slowed both tools several-fold). chemprop is installed
on first use (``chemprop_anchor``). Both tools' test metrics are computed by
``setattn.molprop.metrics.evaluate`` (setattn's inside ``train``, chemprop's here from its
``test_predictions.csv``).

Timing: s/run is the wall time of the whole ``train`` command (start-up, featurisation,
training, evaluation, writing). Training throughput is training molecules x epochs run /
training seconds: for setattn ``train_seconds`` of ``metrics.json`` (its ``fit`` calls:
set-up, steps, per-epoch validation, checkpoints, loading the best weights, plus the
kernel ridge's fit), for chemprop the wall time of Lightning's ``Trainer.fit`` (timed by
a wrapper around chemprop's own command line). Parameters: trainable parameters of the
trained model(s); setattn's regression kernel ridge also keeps its training
descriptors and dual weights (printed as "+N kernel ridge"), which no gradient trains.
Uncertainty: the coverage and Spearman correlation of setattn's split-conformal 90 %
intervals on the reported part, from ``metrics["uncertainty"]["test"]`` when a run has
them (with ``--report val`` they are calibrated on the very part they are scored on, so
the coverage there says nothing). The split seed also seeds each tool's initialisation
and batch order (setattn ``--seed``, chemprop ``--pytorch-seed``).

After the tables, a test report prints issue #15's acceptance lines checked on the rows
whose three tools have run on every seed (``molecule_acceptance``); with ``--in-turn``
the cost lines are also judged on ``matched_width.py``'s rounds of the tools in turn.

Each finished run is saved at once in ``<--out>/results.json``; a rerun skips runs saved
with the same settings, so an interrupted benchmark resumes (``molecule_jobs``).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import molecule_sets  # noqa: E402
from molecule_acceptance import acceptance_table, latest_rounds  # noqa: E402
from molecule_jobs import (  # noqa: E402
    RunSettings,
    import_results,
    load_results,
    record_key,
    run_job,
    split_data,
    tool_flags,
)
from molecule_sets import SETS, SPLIT_KINDS  # noqa: E402
from molecule_tables import print_tables  # noqa: E402
from util import load_average  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
REPORT_SEEDS = (10, 11, 12, 13, 14)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=list(SETS), choices=list(SETS))
    parser.add_argument("--splits", nargs="+", default=list(SPLIT_KINDS), choices=SPLIT_KINDS)
    parser.add_argument("--seeds", nargs="+", type=int, default=list(REPORT_SEEDS),
                        help="split seeds (default: the report's, 10-14)")
    parser.add_argument("--report", choices=("test", "val"), default="test",
                        help="the part whose metric is printed (val: the test part is "
                        "left out of every CSV)")
    parser.add_argument("--anchors", nargs="*", default=["chemprop", "chemprop_rdkit"],
                        choices=["chemprop", "chemprop_rdkit"])
    parser.add_argument("--skip-chemprop", action="store_true", help="only run setattn")
    parser.add_argument("--matched-width", action="store_true",
                        help="also run chemprop at width 96 on each set and split's first "
                        "seed, for throughput at matched width")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "bench_molecules")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads of each tool")
    parser.add_argument("--print-only", action="store_true",
                        help="train nothing: print the tables of the runs saved in --out "
                        "that match the other arguments")
    parser.add_argument("--setattn-flags", default="", metavar="FLAGS",
                        help="extra flags of setattn's train, one string (e.g. "
                        "\"--epochs 3\")")
    parser.add_argument("--chemprop-flags", default="", metavar="FLAGS",
                        help="extra flags of every chemprop run, one string (e.g. "
                        "\"--epochs 3\")")
    parser.add_argument("--import-results", nargs="+", type=Path, default=[], metavar="FILE",
                        help="first add the records of these results files (slices of "
                        "the benchmark run in other --out folders) to --out's")
    parser.add_argument("--in-turn", nargs="+", type=Path, default=[], metavar="FILE",
                        help="records of benchmarks/matched_width.py --save (tools timed in "
                        "turn): the acceptance's cost lines are also judged on them; a "
                        "(set, split) in several files takes its rounds from the last one")
    args = parser.parse_args(argv)
    if args.skip_chemprop:
        args.anchors = []
    return args


def _tools(args: argparse.Namespace, seed: int) -> list[str]:
    """The tools of one split: setattn, the anchors, and chemprop_w96 on the first seed."""
    width = ["chemprop_w96"] if args.matched_width and seed == args.seeds[0] else []
    return ["setattn", *args.anchors, *width]


def wanted(records: list[dict], args: argparse.Namespace, settings: RunSettings) -> list[dict]:
    """The saved records this call asks for, in the order of its sets, splits and seeds."""
    keys = {(name, kind, seed, args.report, tool, tool_flags(tool, settings))
            for name in args.datasets for kind in args.splits for seed in args.seeds
            for tool in _tools(args, seed)}
    chosen = [r for r in records if record_key(r) in keys]
    order = {name: i for i, name in enumerate(args.datasets)}
    return sorted(chosen, key=lambda r: (order[r["dataset"]], args.splits.index(r["split"]),
                                         r["seed"]))


def run_set(name: str, args: argparse.Namespace, settings: RunSettings,
            done: set[tuple]) -> None:
    """All runs of one data set that are not saved yet, printing a line after each."""
    spec = SETS[name]
    table = molecule_sets.load_set(name)
    columns = {molecule_sets.column_name(kind, seed):
               molecule_sets.split_labels(kind, table.smiles, seed)
               for kind in args.splits for seed in args.seeds}
    if args.report == "test":
        molecule_sets.write_csv(args.out / name / "data.csv", table, spec.targets, columns)
    for kind in args.splits:
        for seed in args.seeds:
            job = split_data(name, table, kind, seed, settings, columns)
            for tool in _tools(args, seed):
                record = run_job(job, tool, settings, done)
                if record is not None:
                    r = record["result"]
                    print(f"{name} {kind} seed {seed} {tool}: {spec.metric} {r['metric']:.3f} "
                          f"({args.report} part), {r['seconds']:.0f} s, "
                          f"{r['mol_per_s']:.0f} train mol/s, {r['parameters']:,} parameters",
                          file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    settings = RunSettings(args.out, args.report, args.threads,
                           tuple(shlex.split(args.setattn_flags)),
                           tuple(shlex.split(args.chemprop_flags)))
    flags = {t: tool_flags(t, settings) for t in ("setattn", *args.anchors)}
    if args.import_results:
        added = import_results(args.out, args.import_results)
        print(f"{added} records imported into {args.out / 'results.json'}", file=sys.stderr)
    if not args.print_only:
        print(f"load average {load_average()}", file=sys.stderr)
        done = {record_key(r) for r in load_results(args.out)}
        for name in args.datasets:
            run_set(name, args, settings, done)
        print(f"load average {load_average()}", file=sys.stderr)
    records = wanted(load_results(args.out), args, settings)
    print_tables(records, args.report, flags)
    if args.report == "test":
        rounds = (latest_rounds([json.loads(f.read_text()) for f in args.in_turn])
                  if args.in_turn else None)
        print("\nacceptance of issue #15\n\n" + "\n".join(acceptance_table(records, rounds)))


if __name__ == "__main__":
    main()
