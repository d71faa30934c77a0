"""A default's rule, checked on development records: candidate flags against baseline flags.

A choice of default in issue 15 is made on the validation parts of development seeds
(``molecules.py --report val --seeds 20 21 22``) by a rule written before the candidate
runs (``results/molecules_dev.md``): over a set of (set, split) rows, the geometric mean
of candidate / baseline mean validation metric is at most a bound, and no row is worse
by more than a margin. This prints that comparison from the saved records, so that the
verdict is recomputed, not copied:

    python benchmarks/dev_rule.py --results benchmarks/results/molecules_dev_ens.json \\
        benchmarks/results/molecules_dev_drop.json --baseline "--conv gat" \\
        --candidate "--dropout 0.1" --max-geomean 0.99 --max-worse 0.03

``--baseline-for SET FLAGS`` takes a set's baseline records from another flag string,
where the defaults of that set were last run under other flags (BACE1's kernel ridge,
``--kernel-ridge on``, before ``auto`` fitted it). Only setattn's records of ``--report
val`` count, on the seeds both flag sets ran. Every row (of ``--datasets``) that either
side has run is the rule's: while one has fewer shared seeds than another, or none, the
rule is not judged. For ROC-AUC rows the ratio is baseline / candidate, so below 1 is
better on every row.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from molecule_sets import SETS  # noqa: E402
from util import print_table  # noqa: E402

Row = tuple[str, str]


def _values(records: list[dict], flags: str,
            flags_for: dict[str, str] | None = None) -> dict[Row, dict[int, float]]:
    """setattn's validation metric per (set, split) and seed, for one flag string
    (``flags_for[set]`` instead on the sets it names)."""
    flags_for = flags_for or {}
    out: dict[Row, dict[int, float]] = {}
    for r in records:
        if (r["tool"] == "setattn" and r.get("report") == "val"
                and r["flags"] == flags_for.get(r["dataset"], flags)):
            out.setdefault((r["dataset"], r["split"]), {})[r["seed"]] = r["result"]["metric"]
    return out


def compare(records: list[dict], baseline: str, candidate: str,
            baseline_for: dict[str, str] | None = None) -> list[dict]:
    """Per row that either flag set ran: the seeds both ran (none yet: an empty list and
    no means), both means and the ratio (candidate / baseline for RMSE, baseline /
    candidate for ROC-AUC: < 1 is better). ``baseline_for`` maps a set to the flags
    its baseline records ran with, where they are not ``baseline``."""
    base, cand = _values(records, baseline, baseline_for), _values(records, candidate)
    rows = []
    for key in {**base, **cand}:  # a row either side has run is the rule's
        seeds = sorted(set(base.get(key, {})) & set(cand.get(key, {})))
        if not seeds:
            rows.append({"row": key, "seeds": []})
            continue
        ours, theirs = [cand[key][s] for s in seeds], [base[key][s] for s in seeds]
        b, c = statistics.mean(theirs), statistics.mean(ours)
        rows.append({"row": key, "seeds": seeds, "baseline": theirs, "candidate": ours,
                     "base_mean": b, "cand_mean": c,
                     "ratio": c / b if SETS[key[0]].metric == "rmse" else b / c})
    return rows


def verdict(rows: list[dict], max_geomean: float, max_worse: float) -> tuple[float, float,
                                                                              bool]:
    """The geometric mean of the ratios, the worst ratio, and whether the rule holds."""
    geo = math.exp(statistics.mean(math.log(r["ratio"]) for r in rows))
    worst = max(r["ratio"] for r in rows)
    return geo, worst, geo <= max_geomean and worst <= 1 + max_worse


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", nargs="+", type=Path, required=True,
                        help="results.json files of development runs")
    parser.add_argument("--baseline", default="", help="the baseline's setattn flags")
    parser.add_argument("--baseline-for", nargs=2, action="append", default=[],
                        metavar=("SET", "FLAGS"),
                        help="the baseline's setattn flags on SET's records, where they "
                        "differ from --baseline (repeatable)")
    parser.add_argument("--candidate", required=True, help="the candidate's setattn flags")
    parser.add_argument("--datasets", nargs="+", default=None,
                        help="the rule's sets (default: every set of the baseline's "
                        "records)")
    parser.add_argument("--max-geomean", type=float, required=True,
                        help="largest geometric mean of the ratios the rule accepts")
    parser.add_argument("--max-worse", type=float, required=True,
                        help="largest loss on any row the rule accepts (0.03: 3 %%)")
    args = parser.parse_args(argv)
    records = [r for path in args.results for r in json.loads(path.read_text())
               if args.datasets is None or r["dataset"] in args.datasets]
    baseline_for = dict(args.baseline_for)
    unknown = sorted(set(baseline_for) - set(SETS))
    if unknown:
        parser.error(f"argument --baseline-for: unknown set {unknown[0]!r} (sets: "
                     f"{', '.join(SETS)})")
    everything = compare(records, args.baseline, args.candidate, baseline_for)
    rows = [r for r in everything if r["seeds"]]
    if not rows:
        parser.error(f"no (set, split) row has validation records of both "
                     f"{args.baseline!r} and {args.candidate!r} on a shared seed")
    others = "".join(f" ({name}: {flags!r})" for name, flags in baseline_for.items())
    print(f"baseline {args.baseline!r}{others}, candidate {args.candidate!r}; "
          "validation parts\n")
    print_table(["set", "split", "seeds", "baseline", "candidate", "baseline mean",
                 "candidate mean", "ratio (< 1 better)"],
                [[*r["row"], " ".join(map(str, r["seeds"])),
                  " / ".join(f"{v:.3f}" for v in r["baseline"]),
                  " / ".join(f"{v:.3f}" for v in r["candidate"]), f"{r['base_mean']:.3f}",
                  f"{r['cand_mean']:.3f}", f"{r['ratio']:.3f}"] for r in rows],
                markdown=True)
    geo, worst, holds = verdict(rows, args.max_geomean, args.max_worse)
    most = max(len(r["seeds"]) for r in rows)
    short = [" ".join(r["row"]) for r in everything if len(r["seeds"]) < most]
    judged = ("not judged yet: fewer seeds on " + ", ".join(short) if short
              else f"the rule {'holds' if holds else 'does not hold'}")
    print(f"\n{len(rows)} rows; geometric mean {geo:.3f} (rule: <= {args.max_geomean}), "
          f"worst row {worst:.3f} (rule: <= {1 + args.max_worse:.3f}): {judged}")


if __name__ == "__main__":
    main()
