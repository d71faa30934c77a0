"""setattn vs chemprop 2.3.1 on six molecule sets, random and scaffold splits.

Run (the pre-registered report, benchmarks/PREREGISTRATION.md, in parts):
      .venv/bin/python benchmarks/molecules.py --report-part A --anchors-only   (the anchors)
      .venv/bin/python benchmarks/molecules.py --report-part A          (setattn's side)
      .venv/bin/python benchmarks/molecules.py --report-part B --skip-chemprop --train-only
          (setattn's side alone, no table: beside anchor jobs still running)
      .venv/bin/python benchmarks/molecules.py --report-part all --tables-only   (the record)
      .venv/bin/python benchmarks/molecules.py --report val --seeds 20 21 22 --out runs/dev
          (for choices: the validation part of other seeds; the test part reaches no tool)

Sets (``molecule_jobs.SETS``): FreeSolv (RMSE), ESOL (RMSE), Tox21 (mean ROC-AUC over 12
tasks), Huuskonen solubility (RMSE), BACE1 from ChEMBL as ``bace1`` (pIC50, RMSE) and
``bace1_active`` (ROC-AUC). Each split (80/10/10, random or balanced Bemis-Murcko
scaffold, the run's seed) is a column of a CSV that BOTH tools read, so both train,
validate and test on identical molecules; the script checks each tool's part sizes and
test rows against the column. The report seeds (``REPORT_SEEDS``, ``REPORT_PARTS``) are
read once: no default is chosen on them (choices use ``--report val`` on development
seeds, 0-34). Both tools' test metrics are computed by ``setattn.molprop.metrics``.

Tools: setattn with its defaults; ``chemprop`` (its defaults) and ``chemprop_rdkit``
(plus chemprop 1's normalised RDKit 2D descriptors, for Report B's sets made once per set
and read with ``--descriptors-path``: ``--check-descriptors``); ``--setattn-flags`` /
``--chemprop-flags`` add flags. Each anchor trains as many models as setattn
(``--ensemble-size`` of ``--setattn-flags``, else setattn's default 3;
``--anchor-ensemble-size`` sets another), averages their test predictions and sums their
fit times; a one-model anchor is member 0 of the stored ensemble. ``--anchors minimol_krr
minimol_mlp`` adds heads on MiniMol's pretrained fingerprints (``minimol_runs``: a kernel
ridge chosen on the validation rows, and the MiniMol authors' MLP, an ensemble of as many
models), shown as further columns; they are not part of the pre-registered report, and a
call with them never writes its maintained record. Every tool runs with
``--threads`` CPU threads (default 1), setattn with its feature cache off, one at a time.

Cost, in turn (``--rounds R``): on the first seed's split of every (set, split), setattn's
defaults, chemprop at setattn's width, depth and batch size (``chemprop_w96``: hidden 96,
one message-passing step, batches of 96) and chemprop's defaults run one after another,
the order rotating each round; each ratio is taken within a round and the median
printed. Training throughput = training molecules x epochs / training seconds (setattn:
its ``train_seconds``, every member's fit and the kernel ridges, the compiled CPU kernels
being loaded before the fits; chemprop: Lightning's ``Trainer.fit``); s/run is the whole
command.
An untimed setattn run of one model and one epoch goes first (``warm_up``), so that no
round times the compilation of the CPU kernels into Numba's cache, which a checkout's
first run makes once per machine.
Intervals: coverage, Spearman of |error| with the width, and mean width of setattn's
split-conformal 90 % intervals on the test part (regression sets).

Each finished run is kept at once as data under ``--store`` (``molecule_jobs``); a rerun
skips stored runs, so an interrupted benchmark resumes, and ``--tables-only`` makes the
tables and record from the stored runs alone. Progress lines count runs, never a metric.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
from pathlib import Path

from helpers.chemprop_runs import same_descriptors
from helpers.minimol_runs import HEADS
from helpers.molecule_jobs import (
    SETS,
    SPLIT_KINDS,
    RunSettings,
    column_name,
    library_digest,
    load_set,
    run_job,
    run_material,
    setattn_ensemble,
    split_data,
    split_labels,
    stored_record,
    tool_flags,
    warm_up,
    write_csv,
)
from helpers.record import (
    STORE,
    better,
    finish,
    load_average,
    make_record,
    markdown_table,
    mean_std,
    missing_error,
    paired,
    ratio_cells,
    run_key,
    table,
)

ROOT = Path(__file__).resolve().parents[1]
REPORT_SEEDS = (696, 707, 718, 753, 974)
REPORT_PARTS = {"A": (("freesolv", "esol", "huuskonen"), REPORT_SEEDS),
                "B": (("tox21", "bace1", "bace1_active"), REPORT_SEEDS[:3])}
"""The pre-registered report's parts (benchmarks/PREREGISTRATION.md): sets and seeds;
``--report-part all`` is both, each set with its part's seeds."""


def part_seeds(part: str | None) -> dict[str, list[int]]:
    """The sets of a report part (None or "all": both parts) and each set's seeds."""
    parts = [part] if part in REPORT_PARTS else list(REPORT_PARTS)
    return {name: list(REPORT_PARTS[p][1]) for p in parts for name in REPORT_PARTS[p][0]}
ANCHORS = ("chemprop", "chemprop_rdkit")
"""The pre-registered anchors: the default of ``--anchors``."""
MINIMOL_ANCHORS = tuple(HEADS)
ALL_ANCHORS = (*ANCHORS, *MINIMOL_ANCHORS)
ROUND_TOOLS = ("setattn", "chemprop_w96", "chemprop")
NAMES = {"setattn": "setattn", "chemprop": "chemprop 2.3.1",
         "chemprop_rdkit": "chemprop + rdkit_2d", "chemprop_w96": "chemprop width 96, depth 1",
         "minimol_krr": "MiniMol + kernel ridge", "minimol_mlp": "MiniMol + MLP"}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (see the module docstring)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--report-part", choices=[*sorted(REPORT_PARTS), "all"],
                   help="one part of the pre-registered report, its sets and seeds "
                   "(benchmarks/PREREGISTRATION.md; default: all, both parts)")
    p.add_argument("--datasets", nargs="+", choices=list(SETS),
                   help="default: the report part's sets")
    p.add_argument("--splits", nargs="+", default=list(SPLIT_KINDS), choices=SPLIT_KINDS)
    p.add_argument("--seeds", nargs="+", type=int,
                   help="split seeds of every set (default: each set's report part's)")
    p.add_argument("--report", choices=("test", "val"), default="test",
                   help="the part whose metric is printed (val: no tool sees the test part)")
    p.add_argument("--anchors", nargs="*", default=list(ANCHORS), choices=list(ALL_ANCHORS),
                   help="the anchors beside setattn (default: the two chemprop ones; "
                   "minimol_krr / minimol_mlp: heads on MiniMol's fingerprints)")
    p.add_argument("--skip-chemprop", action="store_true",
                   help="run no chemprop anchor: setattn only, and the MiniMol anchors asked "
                   "for in --anchors")
    p.add_argument("--anchors-only", action="store_true",
                   help="only train the anchors not stored yet; no table, no record")
    p.add_argument("--train-only", action="store_true",
                   help="train the runs not stored yet (and --rounds), then stop: no table, "
                   "no record, no metric printed (setattn alone: with --skip-chemprop)")
    p.add_argument("--rounds", type=int, default=0,
                   help="cost rounds of the three tools in turn on the first seed's split")
    p.add_argument("--out", type=Path, default=ROOT / "runs" / "bench_molecules",
                   help="where the runs' working files go")
    p.add_argument("--store", type=Path, default=STORE,
                   help="where finished runs are kept as data (default benchmarks/runs)")
    p.add_argument("--setattn-library", metavar="DIGEST",
                   help="read setattn's stored runs of this library digest (as their files "
                   "give it) instead of setattn/ as it is now")
    p.add_argument("--record", type=Path, help="the record (default: results/molecules.json "
                   "for the whole report, <--out>/molecules_<part>.json for one whole report "
                   "part, <--out>/molecules.json for less; only written for the test part)")
    p.add_argument("--threads", type=int, default=1, help="CPU threads of each tool")
    p.add_argument("--anchor-ensemble-size", type=int, metavar="K",
                   help="models per chemprop run (default: setattn's ensemble size, the "
                   "one in --setattn-flags or its default); a one-model anchor is member 0 "
                   "of the stored ensemble of setattn's default size where there is one")
    p.add_argument("--check-descriptors", action="store_true",
                   help="train nothing else: on the first split, whether chemprop + RDKit 2D "
                   "predicts the same with the features computed once (--descriptors-path)")
    p.add_argument("--tables-only", "--print-only", action="store_true", dest="tables_only",
                   help="train nothing: the tables and record of the stored runs (an "
                   "error naming the keys of any that are missing)")
    p.add_argument("--setattn-flags", default="", metavar="FLAGS",
                   help="extra flags of setattn's train, one string (e.g. \"--epochs 3\")")
    p.add_argument("--chemprop-flags", default="", metavar="FLAGS",
                   help="extra flags of every chemprop run, one string")
    args = p.parse_args(argv)
    sets = part_seeds(args.report_part)
    args.datasets = args.datasets or list(sets)
    args.set_seeds = {name: args.seeds or sets.get(name, list(REPORT_SEEDS))
                      for name in args.datasets}
    if args.skip_chemprop:
        args.anchors = [a for a in args.anchors if a in MINIMOL_ANCHORS]
    if (args.anchors_only or args.train_only) and args.tables_only:
        p.error("--anchors-only and --train-only train, --tables-only does not: give one")
    return args


def settings_of(args: argparse.Namespace) -> RunSettings:
    setattn_flags = shlex.split(args.setattn_flags)
    anchors = args.anchor_ensemble_size or setattn_ensemble(setattn_flags)
    return RunSettings(args.out, args.report, args.threads, tuple(setattn_flags),
                       tuple(shlex.split(args.chemprop_flags)), anchors,
                       members_of=setattn_ensemble([]), store=args.store,
                       library=args.setattn_library, rdkit_once=REPORT_PARTS["B"][0])


def tools_of(args: argparse.Namespace) -> list[str]:
    """The tools this call runs, in order: setattn (unless --anchors-only), the anchors."""
    return [*([] if args.anchors_only else ["setattn"]), *args.anchors]


def splits_of(args: argparse.Namespace, settings: RunSettings):
    """Every (set, split, seed) job of the call, in order, the set's CSV written first."""
    for name in args.datasets:
        spec = SETS[name]
        data, columns = _columns(name, args.splits, args.set_seeds[name])
        if args.report == "test":
            write_csv(args.out / name / "data.csv", data, spec.targets, columns)
        for kind in args.splits:
            for seed in args.set_seeds[name]:
                yield split_data(name, data, kind, seed, settings, columns)


def wanted(args: argparse.Namespace, settings: RunSettings) -> list[dict]:
    """The stored records this call asks for, in the order of its sets, splits and seeds.

    Raises:
        SystemExit: naming the keys of the runs that are not stored.
    """
    records, missing = [], []
    for job in splits_of(args, settings):
        for tool in ("setattn", *args.anchors):
            record = stored_record(job, tool, settings)
            if record is None:
                key = run_key(run_material(job, tool, settings)[1])
                missing.append((key, f"{tool} on {job.dataset} {job.kind} seed {job.seed} "
                                     f"({settings.report} part)"))
            else:
                records.append(record)
    if missing:
        raise SystemExit(missing_error(missing))
    return records


def _columns(name: str, kinds: list[str], seeds: list[int]) -> tuple:
    table_ = load_set(name)
    return table_, {column_name(kind, seed): split_labels(kind, table_.smiles, seed)
                    for kind in kinds for seed in seeds}


def run_all(args: argparse.Namespace, settings: RunSettings) -> int:
    """Every run of the call that is not stored yet, a line after each: which run it was
    and its seconds, no metric (results stay unread until the tables). Returns the count."""
    tools = tools_of(args)
    total = sum(map(len, args.set_seeds.values())) * len(args.splits) * len(tools)
    count = ran = 0
    for job in splits_of(args, settings):
        for tool in tools:
            count += 1
            done = run_job(job, tool, settings)
            if done is not None:
                ran += 1
                print(f"[{count}/{total}] {job.dataset} {job.kind} seed {job.seed} {tool}: "
                      f"stored {done['key']}, {done['seconds']:.0f} s (load {load_average()})",
                      file=sys.stderr, flush=True)
    print(f"{ran} run(s) trained, {total - ran} already stored", file=sys.stderr, flush=True)
    return ran


def _order(round_index: int, tools: tuple[str, ...] = ROUND_TOOLS) -> tuple[str, ...]:
    """The tools rotated by the round: each goes first in every len(tools)-th round."""
    shift = round_index % len(tools)
    return tools[shift:] + tools[:shift]


def run_rounds(name: str, kind: str, seed: int, args: argparse.Namespace) -> None:
    """The three tools in turn on split (kind, seed) of ``name``, ``args.rounds`` times,
    each run stored at once (``molecules_rounds/``)."""
    spec = SETS[name]
    data, columns = _columns(name, [kind], [seed])
    warm = False
    for r in range(args.rounds):
        settings = round_settings(args.out / f"round{r}", args.threads, r, args.store)
        write_csv(settings.out / name / "data.csv", data, spec.targets, columns)
        job = split_data(name, data, kind, seed, settings, columns)
        if not warm and any(stored_record(job, t, settings) is None for t in ROUND_TOOLS):
            seconds = warm_up(job, settings)  # Numba's cache filled before any timing
            print(f"warm-up run (untimed) {name} {kind} seed {seed}: {seconds:.0f} s",
                  file=sys.stderr, flush=True)
            warm = True
        for tool in _order(r):
            if run_job(job, tool, settings) is not None:
                record = stored_record(job, tool, settings)
                print(f"round {r} {name} {kind} seed {seed} {tool}: "
                      f"{record['result']['mol_per_s']:.0f} train mol/s "
                      f"(load average {load_average()})", file=sys.stderr, flush=True)


def round_settings(out: Path, threads: int = 1, index: int = 0, store: Path = STORE
                   ) -> RunSettings:
    """The cost rounds' settings: setattn's defaults, each chemprop run an ensemble of
    setattn's default size, round ``index``."""
    return RunSettings(out, "test", threads, anchor_ensemble=setattn_ensemble([]),
                       store=store, round=index)


def load_rounds(store: Path, datasets: list[str] | None = None,
                kinds: list[str] | None = None, library: str | None = None
                ) -> dict[tuple[str, str, int], list[dict[str, dict]]]:
    """Stored rounds by (set, split, seed), of the given sets and split kinds (default
    all), timed at setattn library ``library`` (default: ``setattn/`` as it is now): per
    round, each tool's record; rounds missing one of the three tools are left out, and so
    are rounds of another library."""
    plain = {t: tool_flags(t, round_settings(store)) for t in ROUND_TOOLS}
    library = library or library_digest()
    per: dict[tuple[str, str, int], dict[int, dict[str, dict]]] = {}
    for path in sorted((store / "molecules_rounds").glob("*.json")):
        run = json.loads(path.read_text())
        rec = run["record"]
        if run["material"].get("setattn") != library:
            continue
        if (rec["tool"] in ROUND_TOOLS and rec["flags"] == plain[rec["tool"]]
                and rec["dataset"] in (datasets or SETS)
                and rec["split"] in (kinds or SPLIT_KINDS)):
            per.setdefault((rec["dataset"], rec["split"], rec["seed"]), {}).setdefault(
                run["material"]["round"], {})[rec["tool"]] = rec
    return {key: [tools for _, tools in sorted(rounds.items())
                  if all(t in tools for t in ROUND_TOOLS)]
            for key, rounds in per.items()
            if any(all(t in tools for t in ROUND_TOOLS) for tools in rounds.values())}


# --------------------------------------------------------------------------------------
# tables


def _groups(records: list[dict]) -> dict[tuple[str, str], dict[str, list[dict]]]:
    """Records by (data set, split kind), then by tool, each tool's runs by seed."""
    groups: dict[tuple[str, str], dict[str, list[dict]]] = {}
    for r in records:
        groups.setdefault((r["dataset"], r["split"]), {}).setdefault(r["tool"], []).append(r)
    for tools in groups.values():
        for runs in tools.values():
            runs.sort(key=lambda r: r["seed"])
    return groups


def _shown(value: float | None) -> str:
    """A mean to 3 decimals, "-" where some run has none (one network: no spread to rank
    errors by)."""
    return "-" if value is None else f"{value:.3f}"


def _mean(runs: list[dict], key: str) -> float | None:
    values = [r["result"][key] for r in runs if r["result"].get(key) is not None]
    return statistics.mean(values) if values and len(values) == len(runs) else None


def seed_wins(tools: dict[str, list[dict]], anchors: list[str], metric: str) -> str:
    """On how many seeds setattn beats every anchor run on that seed."""
    ours = {r["seed"]: r["result"]["metric"] for r in tools.get("setattn", [])}
    theirs = [{r["seed"]: r["result"]["metric"] for r in tools[a]} for a in anchors]
    seeds = [s for s in ours if all(s in t for t in theirs)]
    if not seeds or not anchors:
        return "-"
    wins = sum(all(better(ours[s], t[s], metric) for t in theirs) for s in seeds)
    return f"{wins}/{len(seeds)}"


def shown_anchors(records: list[dict]) -> list[str]:
    """The anchor columns of the quality table: the chemprop ones, and the MiniMol ones
    that have runs among ``records``."""
    ran = {r["tool"] for r in records}
    return [*ANCHORS, *[a for a in MINIMOL_ANCHORS if a in ran]]


def quality_table(records: list[dict], part: str) -> dict:
    """Per (set, split): each tool's mean +- std over seeds, the best mean, seed wins."""
    rows, shown = [], shown_anchors(records)
    for (name, kind), tools in _groups(records).items():
        metric = SETS[name].metric
        anchors = [a for a in shown if tools.get(a)]
        means = {t: _mean(tools.get(t, []), "metric") for t in ("setattn", *anchors)}
        known = {t: m for t, m in means.items() if m is not None}
        best = (min if metric == "rmse" else max)(known, key=known.get) if known else None
        ours = tools.get("setattn", [])
        rows.append([name, kind, SETS[name].label, " ".join(str(r["seed"]) for r in ours) or "-",
                     mean_std(ours), mean_std(ours, "network"), mean_std(ours, "kernel"),
                     *[mean_std(tools.get(a, [])) for a in shown],
                     NAMES[best] if best else "-", seed_wins(tools, anchors, metric)])
    return table(f"quality on the {part} part, mean +- std over seeds",
                 ["data set", "split", "metric", "seeds", "setattn", "network alone",
                  "kernel ridge alone", *[NAMES[a] for a in shown], "best mean",
                  "setattn wins (seeds)"], rows,
                 "RMSE: lower is better; ROC-AUC: higher. network alone / kernel ridge alone: "
                 "the two parts of setattn's blended prediction scored apart. setattn wins: "
                 "seeds on which setattn beats every anchor of the row.")


def paired_table(records: list[dict]) -> dict:
    """Per (set, split) and anchor: setattn's paired advantage over the seeds."""
    rows = []
    for (name, kind), tools in _groups(records).items():
        for anchor in ALL_ANCHORS:
            if tools.get(anchor) and tools.get("setattn"):
                rows.append([name, kind, NAMES[anchor],
                             *paired(tools["setattn"], tools[anchor], SETS[name].metric)])
    return table("setattn against each anchor, seed by seed",
                 ["data set", "split", "anchor", "mean advantage", "seeds won",
                  "Wilcoxon p"], rows,
                 "advantage: the anchor's RMSE minus setattn's (ROC-AUC: setattn's minus the "
                 "anchor's), so positive favours setattn; the same seeds and split for both. "
                 "Wilcoxon: two-sided signed-rank test of the per-seed differences.")


def round_row(name: str, kind: str, seed: int, rounds: list[dict[str, dict]]) -> list[str]:
    """One cost row: medians of the tools' numbers and of the per-round ratios."""
    def values(tool: str, key: str) -> list[float]:
        return [r[tool]["result"][key] for r in rounds]

    ours, theirs = values("setattn", "mol_per_s"), values("chemprop_w96", "mol_per_s")
    whole = [r["setattn"]["result"].get("mol_per_s_all", 0) / r["chemprop_w96"]["result"][
        "mol_per_s_all"] for r in rounds if "mol_per_s_all" in r["chemprop_w96"]["result"]]
    ours_s, default_s = values("setattn", "seconds"), values("chemprop", "seconds")
    params = rounds[0]["setattn"]["result"]["parameters"]
    return [name, kind, str(seed), str(len(rounds)), f"{params:,}",
            f"{statistics.median(ours):.0f}", f"{statistics.median(theirs):.0f}",
            *ratio_cells([a / b for a, b in zip(ours, theirs)]),
            f"{statistics.median(whole):.2f}x" if whole else "-",
            f"{statistics.median(ours_s):.0f}", f"{statistics.median(default_s):.0f}",
            *ratio_cells([b / a for a, b in zip(ours_s, default_s)])]


def cost_table(rounds: dict[tuple[str, str, int], list[dict[str, dict]]]) -> dict:
    """The in-turn cost table, in the order of SETS and SPLIT_KINDS."""
    order = {(n, k): i for i, (n, k) in enumerate((n, k) for n in SETS for k in SPLIT_KINDS)}
    rows = [round_row(*key, found) for key, found in
            sorted(rounds.items(), key=lambda kv: (order[kv[0][:2]], kv[0][2]))]
    return table("cost, the tools in turn: setattn's defaults against chemprop at width 96 "
                 "(throughput) and chemprop's defaults (wall time)",
                 ["data set", "split", "seed", "rounds", "setattn params",
                  "setattn train mol/s", "chemprop width 96 train mol/s", "throughput ratio",
                  "its range", "ratio, featurising counted", "setattn s/run", "chemprop s/run",
                  "chemprop s / setattn s",
                  "its range"], rows,
                 "Ratios: median over rounds of the ratio within each round. setattn params: "
                 "trainable parameters of its ensemble (the kernel ridge's stored "
                 "descriptors and coefficients are not counted).")


def coverage_band(runs: list[dict]) -> tuple[float, int, str]:
    """Pooled coverage of the runs' 90 % intervals, the test molecules it pools, and
    whether it lies in the binomial 95 % band of an exactly calibrated interval for that
    many molecules ("-" when the runs do not say how many)."""
    from scipy.stats import binom

    sizes = [r["result"].get("test_molecules") for r in runs]
    if not all(sizes):
        return statistics.mean(r["result"]["coverage"] for r in runs), 0, "-"
    n = sum(sizes)
    covered = sum(r["result"]["coverage"] * k for r, k in zip(runs, sizes))
    low, high = binom.interval(0.95, n, 0.9)
    band = f"{100 * low / n:.1f}-{100 * high / n:.1f} %"
    return covered / n, n, f"{band}, {'in' if low <= round(covered) <= high else 'OUT'}"


def interval_table(records: list[dict]) -> dict:
    """Coverage (pooled, with its binomial band), Spearman and width of setattn's 90 %
    intervals (rows that have them), and a last row pooling every row."""
    rows, pooled = [], []
    for (name, kind), tools in _groups(records).items():
        ours = tools.get("setattn", [])
        if _mean(ours, "coverage") is None:
            continue
        pooled += ours
        coverage, n, band = coverage_band(ours)
        rows.append([name, kind, f"{100 * coverage:.1f} %", str(n or "-"), band,
                     _shown(_mean(ours, "spearman")), _shown(_mean(ours, "mean_width"))])
    if pooled:
        coverage, n, band = coverage_band(pooled)
        rows.append(["all rows", "", f"{100 * coverage:.1f} %", str(n or "-"), band, "", ""])
    return table("setattn's 90 % prediction intervals on the test part, pooled over seeds",
                 ["data set", "split", "coverage", "test molecules", "binomial 95 % band",
                  "Spearman |error| vs width", "mean width"],
                 rows, "Split-conformal intervals calibrated on the validation part. The band: "
                 "where an exactly calibrated 90 % interval's coverage of that many test "
                 "molecules falls 95 % of the time; the target for the pooled row is 88-92 %.")


def setattn_seconds(records: list[dict]) -> tuple[int, float]:
    """How many of the records are setattn's runs and their wall seconds summed (each run
    on one core, one after another): what rerunning setattn's side costs once the
    anchors' runs are stored."""
    ours = [r["result"]["seconds"] for r in records if r["tool"] == "setattn"]
    return len(ours), float(sum(ours))


def summary(quality: dict, cost: dict, records: list[dict] | None = None,
            round_runs: list[dict] | None = None) -> str:
    """The record's summary: rows won, the in-turn cost ratios, what setattn's runs took
    in all and what the cost rounds took."""
    rows, best = quality["rows"], quality["columns"].index("best mean")
    won = sum(r[best] == "setattn" for r in rows)
    text = (f"setattn's defaults against chemprop 2.3.1 (its defaults, and with RDKit 2D "
            f"descriptors) on {len({r[0] for r in rows})} molecule sets, random and scaffold "
            f"splits: setattn has the best mean test metric on {won} of {len(rows)} rows.")
    runs, seconds = setattn_seconds(records or [])
    if runs:
        text += (f" setattn's {runs} runs took {seconds / 60:.0f} min on one core in all "
                 f"(the anchors' runs are stored, not trained again).")
    timed = [r["result"]["seconds"] for r in round_runs or [] if r["result"].get("seconds")]
    if timed:
        text += (f" The cost rounds' {len(timed)} runs (every tool's) took "
                 f"{sum(timed) / 60:.0f} min.")
    if cost["rows"]:
        cols = cost["columns"]
        speed = [float(r[cols.index("throughput ratio")].rstrip("x")) for r in cost["rows"]]
        wall = [float(r[cols.index("chemprop s / setattn s")].rstrip("x")) for r in cost["rows"]]
        text += (f" Run in turn, its training throughput is {min(speed):.2f}x to "
                 f"{max(speed):.2f}x chemprop's at the same width, and chemprop's default "
                 f"run takes {min(wall):.2f}x to {max(wall):.2f}x setattn's wall time.")
    return text


def build_record(records: list[dict], rounds: dict, args: argparse.Namespace) -> dict:
    """The molecules record of the saved runs (test part) and cost rounds."""
    quality, cost = quality_table(records, args.report), cost_table(rounds)
    tables = [t for t in (quality, paired_table(records), interval_table(records), cost)
              if t["rows"]]
    raw = {"runs": records,
           "rounds": [{"round": i, **rec} for found in rounds.values()
                      for i, tools in enumerate(found) for rec in tools.values()]}
    part = f", Report {args.report_part}" if args.report_part in REPORT_PARTS else ""
    single = ", one model each" if setattn_ensemble(shlex.split(args.setattn_flags)) == 1 else ""
    record = make_record("molecules", f"Molecules{part}: setattn against chemprop 2.3.1{single}",
                         summary(quality, cost, records, raw["rounds"]), tables, args.threads,
                         raw)
    # the digest setattn's stored runs are keyed by: --setattn-library rebuilds the record
    # from them after the library has changed
    now = library_digest()
    record["setattn_library"] = args.setattn_library or now
    if record["setattn_library"] != now:  # another library's runs: the record is not today's
        record["library"] = {"paths": {}, "tree": f"setattn {record['setattn_library']}"}
    return record


def record_path(args: argparse.Namespace) -> Path | None:
    """Where the record goes: ``--record``; else the maintained record for the whole
    benchmark (None: ``results/molecules.json``) or a whole report part
    (``results/molecules_<part>.json``), and ``<--out>/molecules.json`` for a part of
    either (a set, a seed, no anchors, other flags), which must not replace a record."""
    if args.record is not None:
        return args.record
    plain = (set(args.splits) == set(SPLIT_KINDS) and not args.skip_chemprop
             and set(args.anchors) == set(ANCHORS) and not args.setattn_flags
             and not args.chemprop_flags)
    whole = plain and args.set_seeds == part_seeds(args.report_part)
    if whole and args.report_part in REPORT_PARTS:  # half the report: no maintained record
        return args.out / f"molecules_{args.report_part.lower()}.json"
    return None if whole else args.out / "molecules.json"


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    settings = settings_of(args)
    if args.check_descriptors:  # the first split: predictions compared, no metric
        job = next(splits_of(args, settings))
        spec = SETS[job.dataset]
        sys.exit(0 if same_descriptors(job.data, job.column, spec.targets, spec.task,
                                       job.seed, args.threads, args.out) else 1)
    if not args.tables_only:
        print(f"load average {load_average()}", file=sys.stderr)
        run_all(args, settings)
        if args.anchors_only:
            return  # no table: the anchors' results stay unread
        for name in args.datasets:
            for kind in args.splits:
                if args.rounds > 0:
                    run_rounds(name, kind, args.set_seeds[name][0], args)
        if args.train_only:
            return  # the results stay unread until the tables
    records = wanted(args, settings)
    flags = "; ".join(f"{NAMES[t]}: {tool_flags(t, settings) or 'none'}"
                      for t in ("setattn", *args.anchors))
    print(f"metrics on the {args.report.upper()} part; flags beyond the defaults: {flags}",
          file=sys.stderr)
    rounds = load_rounds(args.store, args.datasets, args.splits, args.setattn_library)
    record = build_record(records, rounds, args)
    if args.report == "test":
        finish(record, record_path(args))
    else:  # choices on validation parts are no result: printed, not recorded
        print(markdown_table(record["tables"][0]))


if __name__ == "__main__":
    main()
