"""The tables of the molecule benchmark, printed as Markdown from the saved run records.

Three tables, one row per (data set, split kind) over the seeds run:

- quality: each tool's metric on the reported part (mean +- standard deviation over
  seeds; the best mean of setattn and the anchors in bold), setattn's network-alone and
  kernel-ridge-alone parts, whether setattn's mean beats every anchor's, on how many
  seeds it beats all anchors, and the mean coverage and Spearman correlation of
  setattn's 90 % conformal intervals (``-`` where a run has none);
- cost: trainable parameters, seconds per run, training molecules per second and the
  ratios of setattn to each anchor;
- matched width: setattn at its defaults against chemprop at width 96, when run.
"""

from __future__ import annotations

import statistics

from molecule_sets import SETS

__all__ = ["NAMES", "cost_table", "matched_width_table", "print_tables", "quality_table"]

NAMES = {"setattn": "setattn", "chemprop": "chemprop 2.3.1",
         "chemprop_rdkit": "chemprop + rdkit_2d", "chemprop_w96": "chemprop width 96"}
QUALITY_ANCHORS = ("chemprop", "chemprop_rdkit")


def _groups(records: list[dict]) -> dict[tuple[str, str], dict[str, list[dict]]]:
    """Records by (data set, split kind), then by tool, in the order first seen."""
    groups: dict[tuple[str, str], dict[str, list[dict]]] = {}
    for r in records:
        tools = groups.setdefault((r["dataset"], r["split"]), {})
        tools.setdefault(r["tool"], []).append(r)
    for tools in groups.values():
        for runs in tools.values():
            runs.sort(key=lambda r: r["seed"])
    return groups


def _values(runs: list[dict], key: str) -> list[float]:
    return [r["result"][key] for r in runs if r["result"].get(key) is not None]


def _mean(runs: list[dict], key: str) -> float | None:
    values = _values(runs, key)
    return statistics.mean(values) if values and len(values) == len(runs) else None


def _mean_std(runs: list[dict], key: str, bold: bool = False) -> str:
    values = _values(runs, key)
    if not runs or len(values) != len(runs):
        return "-"
    text = (f"{values[0]:.3f}" if len(values) == 1
            else f"{statistics.mean(values):.3f} +- {statistics.stdev(values):.3f}")
    return f"**{text}**" if bold else text


def _better(a: float, b: float, metric: str) -> bool:
    return a < b if metric == "rmse" else a > b


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _header(cells: list[str]) -> list[str]:
    return [_row(cells), _row(["---"] * len(cells))]


def _seed_wins(tools: dict[str, list[dict]], anchors: list[str], metric: str) -> str:
    """On how many seeds setattn beats every anchor run on that seed."""
    ours = {r["seed"]: r["result"]["metric"] for r in tools.get("setattn", [])}
    theirs = [{r["seed"]: r["result"]["metric"] for r in tools[a]} for a in anchors]
    seeds = [s for s in ours if all(s in t for t in theirs)]
    if not seeds or not anchors:
        return "-"
    wins = sum(all(_better(ours[s], t[s], metric) for t in theirs) for s in seeds)
    return f"{wins}/{len(seeds)}"


def quality_table(records: list[dict]) -> list[str]:
    """The quality table's Markdown lines (see the module docstring)."""
    lines = _header(["data set", "split", "metric", "seeds", "setattn", "network alone",
                     "kernel ridge alone", NAMES["chemprop"], NAMES["chemprop_rdkit"],
                     "setattn beats both", "setattn wins (seeds)", "90 % coverage",
                     "Spearman \\|error\\| vs width"])
    for (name, kind), tools in _groups(records).items():
        metric = SETS[name].metric
        ours = tools.get("setattn", [])
        anchors = [a for a in QUALITY_ANCHORS if tools.get(a)]
        means = {t: _mean(tools.get(t, []), "metric") for t in ("setattn", *anchors)}
        known = {t: m for t, m in means.items() if m is not None}
        best = (min if metric == "rmse" else max)(known, key=known.get) if known else None
        beats = ("-" if means["setattn"] is None or not anchors else
                 "yes" if all(_better(means["setattn"], means[a], metric) for a in anchors)
                 else "no")
        coverage, spearman = _mean(ours, "coverage"), _mean(ours, "spearman")
        lines.append(_row([
            name, kind, SETS[name].label, " ".join(str(r["seed"]) for r in ours) or "-",
            _mean_std(ours, "metric", best == "setattn"),
            _mean_std(ours, "network"), _mean_std(ours, "kernel"),
            *[_mean_std(tools.get(a, []), "metric", best == a) for a in QUALITY_ANCHORS],
            beats, _seed_wins(tools, anchors, metric),
            "-" if coverage is None else f"{coverage:.3f}",
            "-" if spearman is None else f"{spearman:.3f}",
        ]))
    return lines


def _params(runs: list[dict]) -> str:
    if not runs:
        return "-"
    r = runs[0]["result"]
    extra = r.get("kernel_numbers") or 0
    return f"{r['parameters']:,}" + (f" (+{extra:,} kernel ridge)" if extra else "")


def _ratio(a: float | None, b: float | None, suffix: str = "x") -> str:
    return "-" if a is None or b is None or b == 0 else f"{a / b:.2f}{suffix}"


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def cost_table(records: list[dict]) -> list[str]:
    """The cost table's Markdown lines: parameters, s/run, train mol/s and ratios."""
    tools = ("setattn", *QUALITY_ANCHORS)
    lines = _header(["data set", "split", *[f"{NAMES[t]} params" for t in tools],
                     *[f"{NAMES[t]} s/run" for t in tools],
                     *[f"{NAMES[t]} train mol/s" for t in tools],
                     *[f"throughput vs {NAMES[a]}" for a in QUALITY_ANCHORS],
                     *[f"s/run of {NAMES[a]} / setattn" for a in QUALITY_ANCHORS]])
    for (name, kind), runs in _groups(records).items():
        seconds = {t: _mean(runs.get(t, []), "seconds") for t in tools}
        speed = {t: _mean(runs.get(t, []), "mol_per_s") for t in tools}
        lines.append(_row([
            name, kind, *[_params(runs.get(t, [])) for t in tools],
            *[_num(seconds[t]) for t in tools], *[_num(speed[t]) for t in tools],
            *[_ratio(speed["setattn"], speed[a]) for a in QUALITY_ANCHORS],
            *[_ratio(seconds[a], seconds["setattn"]) for a in QUALITY_ANCHORS],
        ]))
    return lines


def matched_width_table(records: list[dict]) -> list[str]:
    """Throughput at matched width: setattn's defaults (width 96) against chemprop at
    width 96, on the seeds where both ran; empty when chemprop_w96 never ran."""
    lines = _header(["data set", "split", "seeds", "setattn params", "chemprop width 96 params",
                     "setattn train mol/s", "chemprop width 96 train mol/s",
                     "throughput ratio", "setattn s/run", "chemprop width 96 s/run",
                     "chemprop width 96 metric"])
    rows = []
    for (name, kind), tools in _groups(records).items():
        theirs = tools.get("chemprop_w96", [])
        seeds = {r["seed"] for r in theirs}
        ours = [r for r in tools.get("setattn", []) if r["seed"] in seeds]
        if not theirs or not ours:
            continue
        speed = [_mean(ours, "mol_per_s"), _mean(theirs, "mol_per_s")]
        rows.append(_row([
            name, kind, " ".join(str(s) for s in sorted(seeds)), _params(ours),
            _params(theirs), _num(speed[0]), _num(speed[1]), _ratio(*speed),
            _num(_mean(ours, "seconds")), _num(_mean(theirs, "seconds")),
            _mean_std(theirs, "metric"),
        ]))
    return lines + rows if rows else []


def print_tables(records: list[dict], report: str, flags: dict[str, str]) -> None:
    """Print the three tables, saying which part the metrics are on and the flags used."""
    part = ("TEST part" if report == "test" else
            "VALIDATION part (the test part was given to no tool)")
    print(f"metrics on the {part}; flags beyond the defaults: "
          + "; ".join(f"{NAMES[t]}: {f or 'none'}" for t, f in flags.items()))
    for title, lines in (("quality", quality_table(records)), ("cost", cost_table(records)),
                         ("matched width", matched_width_table(records))):
        if lines:
            print(f"\n{title}\n")
            print("\n".join(lines))
