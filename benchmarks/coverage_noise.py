"""How far can a perfectly exchangeable split-conformal interval miss the 88-92 % band?

Issue 15 asks that setattn's 90 % intervals cover 88-92 % of the test molecules, as the
mean over report seeds 10-14. Split conformal calibration on n validation molecules
(``setattn.molprop.conformal``) gives intervals whose coverage, over the draw of the
validation part, follows Beta(k, n + 1 - k) with k = ceil((n + 1) * 0.9) (Vovk et al.
2005; Angelopoulos & Bates 2021, section 3.2), when the validation and test molecules
are exchangeable and the scores have no ties. The m test molecules then count the hits of
Binomial(m, coverage). Both draws are small on these sets (64 validation and 64 test
molecules on FreeSolv), so even a method with exact marginal coverage lands outside the
band by chance. ``--rule interpolated`` models the quantile interpolated at position
``(n + 1) * 0.9`` instead (``setattn.molprop.conformal.quantile``).
``--calibration-scale S`` asks what more calibration molecules would buy: S times as
many exchangeable scores as each validation part has (for example S = 3 for three members
each calibrated on its own validation fold, an approximation of CV+), ``inf`` for an
interval whose coverage given the calibration is exactly the expected one, so that only
the test draw is left. This script says how
often, row by row, from the split sizes the benchmark's own split code makes for the
seeds in the records, by simulation:

* ``expected``: position / (n + 1) averaged over the seeds, the mean coverage of an exact
  method;
* ``sd of the mean``: the spread of the seeds' mean coverage;
* ``P(in band)``: the chance that the mean lands in 88-92 %;
* ``observed``, ``z``: setattn's mean coverage in the records and how many of those
  spreads it lies from ``expected``. |z| > 2 points at something beyond chance, such as
  a scaffold split whose test scaffolds are not exchangeable with the validation ones.

    python benchmarks/coverage_noise.py
    python benchmarks/coverage_noise.py --results benchmarks/results/molecules_report.json
    python benchmarks/coverage_noise.py --results benchmarks/results/molecules_report7.json \
        --calibration-scale inf
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path

import numpy as np
from molecule_acceptance import COVERAGE_BAND, complete_rows
from molecule_sets import SETS, MoleculeTable, load_set, split_labels
from util import print_table

from setattn.molprop.conformal import LEVEL

ROOT = Path(__file__).resolve().parent.parent


def part_sizes(table: MoleculeTable, kind: str, seed: int) -> tuple[int, int]:
    """Labelled (validation, test) molecules of ``table``'s split (kind, seed)."""
    labels = split_labels(kind, table.smiles, seed)
    labelled = [label for label, cells in zip(labels, table.cells) if cells[0] != ""]
    return labelled.count("val"), labelled.count("test")


def _position(n: int, guarantee: bool) -> float:
    """The 1-based position of the conformal quantile among n scores (see
    ``setattn.molprop.conformal.quantile``)."""
    return math.ceil((n + 1) * LEVEL) if guarantee else (n + 1) * LEVEL


def calibration_size(n: int, scale: float) -> int | None:
    """Scores calibrating a part of n validation molecules when there are ``scale`` times
    as many (None: infinitely many)."""
    return None if math.isinf(scale) else max(round(n * scale), 1)


def calibrated(n: int | None, guarantee: bool, draws: int, rng: np.random.Generator
               ) -> np.ndarray:
    """(draws,) coverage of the quantile of n exchangeable validation scores, given them
    (n None: infinitely many, which cover exactly the level).

    The j-th of n sorted uniform scores covers Beta(j, n + 1 - j) (the guaranteed rank,
    or a position that is a whole number); between the j-th and the next, at j + w, the
    interpolated quantile covers (A + w B) / (A + B + C) with A ~ Gamma(j), B ~ Gamma(1)
    and C ~ Gamma(n - j), as those two scores are A / (A + B + C) and (A + B) / (A + B + C).
    """
    if n is None:
        return np.full(draws, LEVEL)
    position = _position(n, guarantee)
    if position > n:
        return np.ones(draws)  # too few scores: an infinite interval
    j = max(math.floor(position), 1)  # before the first score: the first
    w = position - j if position >= 1 else 0.0
    if w == 0:
        return rng.beta(j, n + 1 - j, size=draws)
    a = rng.gamma(j, size=draws)  # (draws,)
    b = rng.gamma(1.0, size=draws)  # (draws,)
    c = rng.gamma(n - j, size=draws)  # (draws,); n > j, as j < position <= n
    return (a + w * b) / (a + b + c)


def simulate(sizes: list[tuple[int, int]], draws: int, rng: np.random.Generator,
             guarantee: bool = True, scale: float = 1.0) -> np.ndarray:
    """Mean test coverage over the seeds of an exact split-conformal method, ``draws`` times.

    Args:
        sizes: (validation, test) molecules of each seed's split.
        draws: simulated report runs.
        rng: the random generator.
        guarantee: the conformal quantile (the guaranteed rank, or interpolated).
        scale: calibration scores per validation molecule (``calibration_size``).

    Returns:
        (draws,) mean coverage over the seeds.
    """
    total = np.zeros(draws)
    for n, m in sizes:
        scores = calibration_size(n, scale)
        coverage = calibrated(scores, guarantee, draws, rng)  # (draws,) given the calibration
        total += rng.binomial(m, coverage) / m  # (draws,) share of test hits
    return total / len(sizes)


def expected_coverage(sizes: list[tuple[int, int]], guarantee: bool = True,
                      scale: float = 1.0) -> float:
    """position / (n + 1) averaged over the seeds' calibration sizes n (``scale`` times
    the validation sizes; the level itself for infinitely many)."""
    if math.isinf(scale):
        return LEVEL
    return statistics.fmean(_position(c, guarantee) / (c + 1)
                            for c in (calibration_size(n, scale) for n, _ in sizes))


def _span(values: list[int]) -> str:
    low, high = min(values), max(values)
    return str(low) if low == high else f"{low}-{high}"


def noise_rows(records: list[dict], draws: int, seed: int, guarantee: bool = True,
               scale: float = 1.0) -> tuple[list[list[str]], float]:
    """One table row per complete regression (set, split) row of the records, and the
    chance that an exact method has every row in the band (rows independent)."""
    rows, _ = complete_rows(records)
    rng = np.random.default_rng(seed)
    low, high = COVERAGE_BAND
    out, all_inside = [], 1.0
    for (name, kind), runs in rows.items():
        if SETS[name].task != "regression":
            continue
        ours = [r for r in runs["setattn"] if r["result"].get("coverage") is not None]
        table = load_set(name)
        sizes = [part_sizes(table, kind, r["seed"]) for r in ours]
        means = simulate(sizes, draws, rng, guarantee, scale)  # (draws,)
        expected, spread = expected_coverage(sizes, guarantee, scale), float(means.std())
        observed = statistics.fmean(r["result"]["coverage"] for r in ours)
        inside = float(((means >= low) & (means <= high)).mean())
        all_inside *= inside
        out.append([name, kind, str(len(ours)), _span([n for n, _ in sizes]),
                    _span([m for _, m in sizes]), f"{expected:.1%}",
                    f"{spread:.1%}", f"{inside:.0%}", f"{observed:.1%}",
                    f"{(observed - expected) / spread:+.1f}"])
    return out, all_inside


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--results", type=Path,
                        default=ROOT / "benchmarks/results/molecules_report2.json",
                        help="records of benchmarks/molecules.py (its results.json)")
    parser.add_argument("--draws", type=int, default=200_000, help="simulated report runs")
    parser.add_argument("--seed", type=int, default=0, help="seed of the simulation")
    parser.add_argument("--rule", choices=("guarantee", "interpolated"), default="guarantee",
                        help="the conformal quantile the records were calibrated with")
    parser.add_argument("--calibration-scale", type=float, default=1.0, metavar="S",
                        help="calibration scores per validation molecule (inf: exact "
                             "coverage given the calibration, the test draw alone)")
    args = parser.parse_args()
    if not (args.calibration_scale > 0):
        parser.error(f"argument --calibration-scale: must be positive (or inf), got "
                     f"{args.calibration_scale}")
    try:
        records = json.loads(args.results.read_text())
    except (OSError, json.JSONDecodeError) as err:
        parser.error(f"argument --results: cannot read {args.results}: {err}")
    header = ["set", "split", "seeds", "validation n", "test m", "expected",
              "sd of the mean", "P(in band)", "observed", "z"]
    print(f"records: {args.results}; {args.draws:,} simulated runs of an exact method, "
          f"quantile: {args.rule}; calibration scores per validation molecule: "
          f"{args.calibration_scale:g}")
    rows, all_inside = noise_rows(records, args.draws, args.seed, args.rule == "guarantee",
                                  args.calibration_scale)
    print_table(header, rows, markdown=True)
    print(f"\nchance that an exact method has all {len(rows)} rows in the band: {all_inside:.0%}")


if __name__ == "__main__":
    main()
