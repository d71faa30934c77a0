"""Issue #15's acceptance lines, checked on the saved run records of the molecule benchmark.

One Markdown row per line of the issue, each computed from the same records as the
quality, cost and matched-width tables (``molecule_tables``):

- quality: setattn's mean metric better than both chemprop anchors' (RMSE lower, ROC-AUC
  higher), on every (set, split) row;
- moonshot: the random-split means of FreeSolv (RMSE <= 0.80) and ESOL (<= 0.50);
- throughput: setattn's training molecules/s >= 2x chemprop's at matched width (width
  96, on the seeds where chemprop at width 96 ran);
- wall time: setattn's mean s/run <= chemprop's (defaults);
- coverage: the mean coverage of setattn's 90 % intervals within 88-92 % on the
  regression rows.

Given the records of ``matched_width.py`` (tools run in turn, several rounds), two more
lines judge the cost lines on those: the median over a row's rounds of the ratio taken
within each round. Single runs made minutes or sessions apart measure the load of their
hour as much as the tools (``results/matched_width.md``), so these are the lines to read.

Only *complete* rows count: rows where setattn and both anchors ran on the same seeds,
as many seeds as the most complete row of the records has. Rows still running are
named in the table's first line, so a partial report says what it does not yet cover,
and a line they may still miss reads "met so far".
"""

from __future__ import annotations

import statistics

from molecule_sets import SETS
from molecule_tables import QUALITY_ANCHORS

__all__ = ["MOONSHOTS", "acceptance_table", "complete_rows", "in_turn_ratios", "latest_rounds"]

MOONSHOTS = {"freesolv": 0.80, "esol": 0.50}
"""Random-split RMSE lines of issue #15 (AttentiveFP published 0.736 / 0.503)."""
THROUGHPUT_RATIO = 2.0
COVERAGE_BAND = (0.88, 0.92)

Row = tuple[str, str]
Runs = dict[str, list[dict]]


def _by_row(records: list[dict]) -> dict[Row, Runs]:
    rows: dict[Row, Runs] = {}
    for r in records:
        rows.setdefault((r["dataset"], r["split"]), {}).setdefault(r["tool"], []).append(r)
    return rows


def _seeds(runs: list[dict]) -> frozenset[int]:
    return frozenset(r["seed"] for r in runs)


def complete_rows(records: list[dict]) -> tuple[dict[Row, Runs], list[Row]]:
    """The rows whose three tools ran on the same seeds, as many as the most complete row
    has, and the names of the other (unfinished) rows, both in the order first seen."""
    rows = _by_row(records)
    tools = ("setattn", *QUALITY_ANCHORS)
    shared = {key: _seeds(runs.get("setattn", [])) for key, runs in rows.items()
              if all(_seeds(runs.get(t, [])) == _seeds(runs.get("setattn", [])) for t in tools)}
    most = max((len(s) for s in shared.values()), default=0)
    done = {key: rows[key] for key, seeds in shared.items() if seeds and len(seeds) == most}
    return done, [key for key in rows if key not in done]


def _mean(runs: list[dict], key: str) -> float | None:
    values = [r["result"].get(key) for r in runs]
    return None if not values or None in values else statistics.mean(values)


def _better(a: float, b: float, metric: str) -> bool:
    return a < b if metric == "rmse" else a > b


def _name(key: Row) -> str:
    return f"{key[0]} {key[1]}"


def _verdict(met: list[Row], measured: list[Row]) -> str:
    if not measured:
        return "not measured"
    return "met" if len(met) == len(measured) else "not met"


def _line(label: str, target: str, measured: list[Row], met: list[Row], values: str) -> list[str]:
    missed = [_name(k) for k in measured if k not in met]
    return [label, target, f"{len(met)}/{len(measured)}", ", ".join(missed) or "-", values,
            _verdict(met, measured)]


def _quality(rows: dict[Row, Runs]) -> list[str]:
    measured, met = [], []
    for key, runs in rows.items():
        metric = SETS[key[0]].metric
        ours = _mean(runs["setattn"], "metric")
        measured.append(key)
        if all(_better(ours, _mean(runs[a], "metric"), metric) for a in QUALITY_ANCHORS):
            met.append(key)
    return _line("quality", "mean better than both chemprop anchors", measured, met, "-")


def _moonshot(rows: dict[Row, Runs]) -> list[str]:
    measured, met, values = [], [], []
    for name, line in MOONSHOTS.items():
        key = (name, "random")
        if key in rows:
            value = _mean(rows[key]["setattn"], "metric")
            measured.append(key)
            met += [key] if value <= line else []
            values.append(f"{name} {value:.3f} (line {line:.2f})")
    return _line("moonshot", "random-split RMSE: FreeSolv <= 0.80, ESOL <= 0.50", measured,
                 met, "; ".join(values) or "-")


def _ratios(rows: dict[Row, Runs], records: list[dict]) -> dict[Row, float]:
    """setattn / chemprop-at-width-96 training molecules/s, on the seeds of the latter."""
    theirs = {k: runs.get("chemprop_w96", []) for k, runs in _by_row(records).items()}
    ratios = {}
    for key, runs in rows.items():
        seeds = _seeds(theirs.get(key, []))
        ours = [r for r in runs["setattn"] if r["seed"] in seeds]
        if ours:
            ratios[key] = _mean(ours, "mol_per_s") / _mean(theirs[key], "mol_per_s")
    return ratios


def _spread(values: list[float], fmt: str) -> str:
    return "-" if not values else f"{fmt.format(min(values))} to {fmt.format(max(values))}"


def _ratio_line(label: str, target: str, ratios: dict[Row, float], bound: float) -> list[str]:
    """A cost line: the rows whose ratio reaches ``bound`` are met."""
    met = [k for k, v in ratios.items() if v >= bound]
    return _line(label, target, list(ratios), met, _spread(list(ratios.values()), "{:.2f}x"))


def _throughput(rows: dict[Row, Runs], records: list[dict]) -> list[str]:
    return _ratio_line("throughput", f">= {THROUGHPUT_RATIO:.0f}x chemprop at matched width "
                       "(96)", _ratios(rows, records), THROUGHPUT_RATIO)


def _wall_time(rows: dict[Row, Runs]) -> list[str]:
    ratios = {k: _mean(runs["chemprop"], "seconds") / _mean(runs["setattn"], "seconds")
              for k, runs in rows.items()}
    return _ratio_line("wall time", "s/run <= chemprop's (chemprop s/run / setattn >= 1)",
                       ratios, 1.0)


def _coverage(rows: dict[Row, Runs]) -> list[str]:
    low, high = COVERAGE_BAND
    values = {k: _mean(runs["setattn"], "coverage") for k, runs in rows.items()
              if SETS[k[0]].task == "regression"}
    values = {k: v for k, v in values.items() if v is not None}
    met = [k for k, v in values.items() if low <= v <= high]
    return _line("coverage", f"90 % intervals cover {low:.0%}-{high:.0%} (regression)",
                 list(values), met, _spread(list(values.values()), "{:.1%}"))


def latest_rounds(files: list[list[dict]]) -> list[dict]:
    """The records of several ``matched_width.py`` files as one list: each (set, split)
    keeps the records of the last file that has it (a later measurement, e.g. of newer
    code, replaces a row's rounds rather than mixing with them)."""
    last = {(r["dataset"], r["split"]): i for i, records in enumerate(files) for r in records}
    return [r for i, records in enumerate(files) for r in records
            if last[(r["dataset"], r["split"])] == i]


def by_round(rounds: list[dict]) -> dict[tuple, dict[str, dict]]:
    """``matched_width.py``'s records (each with its ``round``) grouped by (set, split,
    seed, round): each tool's ``result`` in that round."""
    grouped: dict[tuple, dict[str, dict]] = {}
    for r in rounds:
        grouped.setdefault((r["dataset"], r["split"], r["seed"], r["round"]),
                           {})[r["tool"]] = r["result"]
    return grouped


def in_turn_ratios(rounds: list[dict]) -> dict[Row, tuple[float, float]]:
    """Per (set, split) of ``matched_width.py``'s records (each with its ``round``): the
    medians over its rounds of setattn / chemprop-at-width-96 training molecules/s, and of
    chemprop's default run's seconds / setattn's. Rounds missing a tool are left out."""
    pairs: dict[Row, list[tuple[float, float]]] = {}
    for (name, kind, _, _), tools in by_round(rounds).items():
        if all(t in tools for t in ("setattn", "chemprop_w96", "chemprop")):
            ours = tools["setattn"]
            pairs.setdefault((name, kind), []).append(
                (ours["mol_per_s"] / tools["chemprop_w96"]["mol_per_s"],
                 tools["chemprop"]["seconds"] / ours["seconds"]))
    return {key: (statistics.median(p[0] for p in v), statistics.median(p[1] for p in v))
            for key, v in pairs.items()}


def _in_turn(rows: dict[Row, Runs], rounds: list[dict]) -> list[list[str]]:
    """The throughput and wall-time lines on the rounds of the report's complete rows."""
    ratios = {k: v for k, v in in_turn_ratios(rounds).items() if k in rows}
    lines = [_ratio_line("throughput, in turn", f">= {THROUGHPUT_RATIO:.0f}x chemprop at "
                         "width 96, median of rounds", {k: v[0] for k, v in ratios.items()},
                         THROUGHPUT_RATIO),
             _ratio_line("wall time, in turn", "chemprop s/run / setattn's >= 1, median of "
                         "rounds", {k: v[1] for k, v in ratios.items()}, 1.0)]
    for cells in lines:
        if len(ratios) < len(rows) and cells[-1] == "met":
            cells[-1] = "met so far"  # complete rows not measured in turn may still miss it
    return lines


def acceptance_table(records: list[dict], rounds: list[dict] | None = None) -> list[str]:
    """Markdown lines: which rows are complete, then one row per acceptance line.

    Args:
        records: the benchmark's run records.
        rounds: ``matched_width.py``'s records, each with its ``round``; when given, the
            cost lines are also judged on them (only the complete rows they cover count).
    """
    rows, unfinished = complete_rows(records)
    seeds = sorted(_seeds(next(iter(rows.values()))["setattn"])) if rows else []
    lines = [f"complete rows (seeds {' '.join(map(str, seeds)) or '-'}): "
             f"{', '.join(_name(k) for k in rows) or 'none'}; unfinished: "
             f"{', '.join(_name(k) for k in unfinished) or 'none'}", ""]
    header = ["line of #15", "target", "rows met", "rows not met", "measured", "verdict"]
    lines += ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    for cells in (_quality(rows), _moonshot(rows), _throughput(rows, records),
                  _wall_time(rows), *(_in_turn(rows, rounds) if rounds else []),
                  _coverage(rows)):
        if unfinished and cells[-1] == "met":
            cells[-1] = "met so far"  # an unfinished row may still miss it
        lines.append("| " + " | ".join(cells) + " |")
    return lines
