"""The prediction benchmark's pure parts: its input files, the row-by-row check of an
output, and the speed rows (mol/s with and without the start-up, ratios to the anchor)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture()
def bench(monkeypatch):
    """benchmarks/predict.py, importable from benchmarks/ for this test only."""
    monkeypatch.syspath_prepend(str(BENCH))
    import predict

    return predict


def test_inputs_cycle_a_fixed_drug_like_sample(bench, tmp_path):
    sample = bench.drug_like(5)
    assert sample == bench.drug_like(5) and len(set(sample)) == 5
    path = bench.write_input(tmp_path / "in.csv", sample, 12)
    assert bench.read_column(path) == (sample * 3)[:12]


def test_an_output_out_of_order_is_refused(bench, tmp_path):
    data = bench.write_input(tmp_path / "in.csv", ["CCO", "CCN", "CCC"], 3)
    assert bench.check_aligned(data, data) == 3
    swapped = tmp_path / "out.csv"
    with open(swapped, "w", newline="") as handle:
        csv.writer(handle).writerows([["smiles", "y"], ["CCO", "1"], ["CCC", "2"],
                                      ["CCN", "3"]])
    with pytest.raises(SystemExit, match="row 1: 'CCC' where the input has 'CCN'"):
        bench.check_aligned(data, swapped)
    short = tmp_path / "short.csv"
    short.write_text("smiles\nCCO\n")
    with pytest.raises(SystemExit, match="row 1"):
        bench.check_aligned(data, short)


def test_speed_rows_take_the_start_up_off_and_compare_to_the_anchor(bench):
    cases = {"cold": {"seconds": 12.0, "rows": 1000, "startup": 2.0},
             "warm": {"seconds": 3.0, "rows": 1000, "startup": 2.0},
             "instant": {"seconds": 1.0, "rows": 1000, "startup": 2.0}}
    rows = bench.speed_rows(cases, 1000, "cold")
    assert rows[0] == ["cold", "1,000", "12.0", "2.0", "83", "100", "1.00x"]
    assert rows[1] == ["warm", "1,000", "3.0", "2.0", "333", "1,000", "4.00x"]
    assert rows[2][5] == "-"  # faster than its start-up: no rate after it


def test_the_floor_counts_the_set_s_own_descriptors(bench):
    """The C++ parts the floor times are descriptors of the rdkit set, with its values."""
    import numpy as np
    from rdkit import Chem

    from setattn.chem.descriptors import mol_descriptors, set_functions

    names = [name for name, _ in set_functions("rdkit")]
    mol = Chem.MolFromSmiles("CC(=O)Nc1ccc(O)cc1C(=O)N1CCCC1")
    values = dict(zip(names, mol_descriptors(Chem.Mol(mol))[0].tolist()))
    cpp = bench.cpp_functions()
    assert len(cpp) > 20 and {"Chi4v", "Kappa3", "TPSA", "NumRotatableBonds"} <= dict(cpp).keys()
    for name, fn in cpp:
        assert np.float32(fn(Chem.Mol(mol))) == np.float32(values[name]), name
    fragments = [n for n in names if n.startswith("fr_")]
    counts = [len(mol.GetSubstructMatches(p, uniquify=True)) for p in bench.fragment_patterns()]
    assert len(counts) == len(fragments) == 85
    assert counts == [values[n] for n in fragments] and sum(counts) > 0


def test_the_floor_row_adds_the_graph_and_the_c_parts(bench):
    table, ms = bench.cost_table(["CCO", "c1ccccc1O", "not a smiles", "CC(=O)N"], 1)
    parts = [k for k in ms if k.startswith(("atom graph", "of which"))]
    assert len(parts) == 3
    assert ms["floor: atom graph + the C++ parts"] == pytest.approx(sum(ms[k] for k in parts))
    assert [r[0] for r in table["rows"]] == list(ms)
    assert table["title"].startswith("Featurisation of 3 ")
