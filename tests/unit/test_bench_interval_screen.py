"""``benchmarks/interval_screen.py``: its scales on a saved run, and the rule's verdict."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from molecule_runs import saved_bench_run

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture()
def screen(monkeypatch):
    """``benchmarks/interval_screen.py``, importable for this test only."""
    monkeypatch.syspath_prepend(str(BENCH))
    import interval_screen

    return interval_screen


def _record(dataset: str, split: str, seed: int, spearman: tuple, coverage: tuple,
            width: float) -> dict:
    names = ("std", "kernel")
    return {"dataset": dataset, "split": split, "seed": seed,
            "spearman": {**dict.fromkeys(("disagree", "std+disagree", "gp", "std+gp"), 0.0),
                         **dict(zip(names, spearman))},
            "coverage": {**dict.fromkeys(("disagree", "std+disagree", "gp", "std+gp"), 0.9),
                         **dict(zip(names, coverage))},
            "width": {**dict.fromkeys(("disagree", "std+disagree", "gp", "std+gp"), 1.0),
                      "std": 1.0, "kernel": width}}


def test_rows_average_seeds_and_the_verdict_needs_all_three_conditions(screen):
    records = [_record("esol", "random", 20, (0.1, 0.3), (0.90, 0.90), 0.9),
               _record("esol", "random", 21, (0.2, 0.2), (0.91, 0.89), 0.8),
               _record("freesolv", "scaffold", 20, (0.0, 0.1), (0.89, 0.90), 0.95)]
    rows = screen.row_means(records)
    esol = rows[("esol", "random")]
    assert esol["seeds"] == [20, 21] and esol["spearman"]["kernel"] == pytest.approx(0.25)
    assert esol["width"]["kernel"] == pytest.approx(0.85)
    held, lines = screen.verdict(rows)
    # Spearman gain: ((0.25 - 0.15) + (0.1 - 0.0)) / 2 = 0.1; widths sqrt(0.85 * 0.95)
    assert held and "+0.100" in lines[0] and f"{math.sqrt(0.85 * 0.95):.3f}" in lines[1]
    wide = screen.row_means([*records[:2], _record("freesolv", "scaffold", 20, (0.0, 0.1),
                                                   (0.89, 0.90), 1.05)])
    held, lines = screen.verdict(wide)
    assert not held and lines[1].startswith("fails: ") and "worst row 1.050" in lines[1]
    low = screen.row_means([*records[:2], _record("freesolv", "scaffold", 20, (0.0, 0.1),
                                                  (0.89, 0.87), 0.9)])
    assert not screen.verdict(low)[0]
    flat = screen.row_means([_record("esol", "random", 20, (0.1, 0.12), (0.9, 0.9), 0.9)])
    held, lines = screen.verdict(flat)
    assert not held and lines[0].startswith("fails: ")


def test_the_screen_reproduces_a_saved_run_and_its_gp_is_the_library_posterior_std(
        screen, tmp_path, monkeypatch):
    folder = saved_bench_run(tmp_path, "random21")
    run = screen.screen_run(folder)
    assert run["split"] == "random" and run["seed"] == 21
    scales = run["scales"]
    assert set(scales) == set(screen.SCALES)
    models = screen.open_run(folder).models
    data = [screen.featurize(s, models[0].config.descriptor_dim) for s in run["smiles"]]
    descriptors = torch.cat([d.descriptors for d in data])  # (M, F)
    library = models[0].kernel.posterior_std(descriptors)  # (M,)
    torch.testing.assert_close(scales["kernel"][:, 0], library, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(scales["gp"], scales["kernel"])  # fewer centres than the cap
    result = screen.evaluate(run, repeats=3)
    # halves of 12 validation molecules are too few for a 90 % interval: unbounded ones
    assert all(result["coverage"][name] == 1.0 for name in screen.SCALES)
    assert set(result["spearman"]) == set(screen.SCALES)
    monkeypatch.setattr(screen, "REPORT_SEEDS", range(21, 22))
    with pytest.raises(SystemExit, match="report seed"):
        screen.screen_run(folder)
