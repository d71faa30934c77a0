"""The descriptor sets: named, fixed subsets of RDKit's, their values, and widths that
name them.

The reference is RDKit's own descriptor functions called on a freshly parsed molecule
(the ring information a SMILES parse gives), so the shared intermediates
(``setattn.chem.context``) must give what RDKit gives, not only what the ``rdkit`` set
gives.
"""

from __future__ import annotations

import csv

import numpy as np
import pytest
from rdkit import Chem, rdBase

from setattn.chem.descriptors import (
    DESCRIPTOR_SETS,
    GRAPH_INDICES,
    descriptor_count,
    descriptor_set,
    descriptor_set_named,
    mol_descriptors,
    set_functions,
)
from setattn.chem.shares import additive_descriptors, descriptor_shares
from setattn.datasets import DATASETS_DIR
from setattn.domains.molecules import mol_to_data
from setattn.molprop.config import SettingError, descriptor_dim
from setattn.molprop.featurize import featurize

EDGE_CASES = ["C", "[Na+]", "[CH2]C", "C#N", "[O-][N+](=O)c1ccccc1", "C1CC2CCC1C2",
              "c1ccc2c(c1)[nH]c1ccccc12", "FC(F)(F)S(=O)(=O)[O-]", "P(=O)(O)(O)OCC#CI",
              "[Se]=C=[Se]", "C[C@H](N)C(=O)O", "B1OC(C)(C)C(C)(C)O1"]


def bundled(step: int) -> list[str]:
    """Every ``step``-th single-fragment SMILES of three bundled sets."""
    out = []
    for name in ("bace1_chembl", "freesolv", "tox21"):
        with open(DATASETS_DIR / "molecules" / f"{name}.csv", newline="") as handle:
            out += [row["smiles"] for row in csv.DictReader(handle)][::step]
    return [s for s in out if "." not in s]


def rdkit_fresh(smiles: str, kind: str = "fast") -> np.ndarray:
    """(F,) RDKit's functions of the set ``kind`` on a fresh parse, cleaned as
    ``mol_descriptors`` cleans them (float32; non-finite and huge values 0)."""
    values = []
    with rdBase.BlockLogs():
        for _, fn in set_functions(kind):
            try:
                values.append(float(fn(Chem.MolFromSmiles(smiles))))
            except (RuntimeError, ValueError, ZeroDivisionError, OverflowError):
                values.append(float("nan"))
    row = np.array(values)
    row = np.nan_to_num(np.where(np.abs(row) < 1e30, row, 0.0))
    return row.astype(np.float32).astype(np.float64)


def test_the_sets_are_the_rdkit_set_less_the_slow_families():
    full = [name for name, _ in set_functions("rdkit")]
    fast = [name for name, _ in set_functions("fast")]
    lean = [name for name, _ in set_functions("lean")]
    assert fast == [name for name in full if not name.startswith(("fr_", *GRAPH_INDICES))]
    assert lean == [name for name in full if not name.startswith(GRAPH_INDICES)]
    assert len(fast) < len(lean) < len(full)
    assert {"MolLogP", "TPSA", "SlogP_VSA1", "PEOE_VSA14", "MaxEStateIndex"} <= set(fast)
    assert not any(name.startswith("fr_") for name in fast)
    assert set(lean) - set(fast) == {name for name in full if name.startswith("fr_")}


@pytest.mark.parametrize("kind", ["fast", "lean"])
def test_values_equal_rdkit_on_bundled_molecules(kind):
    for text in bundled(50) + EDGE_CASES:
        ours = mol_descriptors(Chem.MolFromSmiles(text), kind=kind)[0].double().numpy()
        ref = rdkit_fresh(text, kind)
        np.testing.assert_allclose(ours, ref, rtol=2e-6, atol=1e-5, err_msg=text)


def test_a_fragment_without_ring_information_gets_rdkit_ring_counts():
    whole = Chem.MolFromSmiles("C1CCOC1.c1ccccc1CC1CC1")
    fragment = Chem.GetMolFrags(whole, asMols=True, sanitizeFrags=False)[1]
    ours = mol_descriptors(fragment, kind="lean")[0].double().numpy()
    np.testing.assert_allclose(ours, rdkit_fresh("c1ccccc1CC1CC1", "lean"), rtol=2e-6,
                               atol=1e-5)


def test_a_set_is_found_by_its_name():
    assert DESCRIPTOR_SETS == ("fast", "lean", "rdkit")
    for kind in DESCRIPTOR_SETS:
        found = descriptor_set_named(kind)
        assert found.name == kind and found.width == len(found.names) == descriptor_count(kind)
        assert found.names == [name for name, _ in set_functions(kind)]
    with pytest.raises(ValueError, match="descriptor set must be one of"):
        descriptor_set_named("all")


def test_a_width_names_its_set_and_an_unknown_width_says_retrain():
    for kind in DESCRIPTOR_SETS:
        assert descriptor_set(descriptor_count(kind)) == kind
        assert descriptor_dim(kind) == descriptor_count(kind)
    assert descriptor_set(0) is None and descriptor_dim("none") == 0
    with pytest.raises(ValueError, match="retrain with this RDKit"):
        descriptor_set(descriptor_count("rdkit") + 1)
    with pytest.raises(SettingError, match="fast, lean, rdkit or none"):
        descriptor_dim("all")
    with pytest.raises(ValueError, match="descriptor set must be one of"):
        mol_descriptors(Chem.MolFromSmiles("CCO"), kind="all")


def test_featurize_computes_the_set_of_the_model_width():
    dim = descriptor_count("fast")
    data = featurize("CCOc1ccccc1", dim)
    assert data.descriptors.shape == (1, dim)
    direct = mol_to_data("CCOc1ccccc1", descriptors="fast", fingerprint=True)
    assert np.array_equal(data.descriptors.numpy(), direct.descriptors.numpy())
    assert np.array_equal(data.fingerprint.numpy(), direct.fingerprint.numpy())
    assert "fingerprint" not in featurize("CCO"), "no descriptors: no fingerprint"
    assert np.array_equal(mol_to_data("CCO", descriptors=True).descriptors.numpy(),
                          mol_descriptors(Chem.MolFromSmiles("CCO")).numpy())


def test_fast_descriptors_split_over_atoms_add_up():
    mol = Chem.MolFromSmiles("CC(=O)Nc1ccc(O)cc1")
    values = mol_descriptors(Chem.Mol(mol), kind="fast")[0].double().numpy()
    shares, additive = descriptor_shares(mol, values, "fast")
    assert shares.shape == (mol.GetNumAtoms(), len(values))
    np.testing.assert_allclose(shares.sum(axis=0), values, rtol=1e-5, atol=1e-6)
    names = additive_descriptors(mol, values, "fast")
    assert {"MolLogP", "TPSA", "LabuteASA"} <= set(names)


def test_descriptors_and_the_fingerprint_are_asked_for_apart():
    assert "fingerprint" not in mol_to_data("CCO", descriptors="fast")
    only = mol_to_data("c1ccccc1O", fingerprint=True)
    assert "descriptors" not in only and only.fingerprint.shape == (1, 2048)
