"""The fast descriptor path gives exactly what RDKit's public functions give, one by one.

``mol_descriptors`` computes the slowest descriptors from intermediate results shared
between them (``setattn.chem.values``); the reference here is RDKit's own
per-descriptor functions (``rdkit.Chem.Descriptors.descList``), called in order on a
fresh copy of the molecule, as the molecule model's descriptors were computed first.
"""

from __future__ import annotations

import csv

import numpy as np
import pytest
import torch
from rdkit import Chem, rdBase
from rdkit.Chem import Descriptors, GraphDescriptors
from rdkit.Chem.EState import EState

from setattn.chem.context import MolContext, atom_terms
from setattn.chem.descriptors import descriptor_count, descriptor_functions, mol_descriptors
from setattn.chem.values import SHARED_VALUES, balaban_j, bertz_ct, morgan_densities
from setattn.datasets import DATASETS_DIR
from setattn.domains.molecules import keep_largest_fragment

NAMES = [name for name, _ in descriptor_functions()]
EDGE_CASES = ["C", "[Na+]", "[CH2]C", "C#N", "[O-][N+](=O)c1ccccc1", "C1CC2CCC1C2",
              "OC(=O)C1=CC=CC=C1", "c1ccc2c(c1)[nH]c1ccccc12", "FC(F)(F)S(=O)(=O)[O-]",
              "CC(=O)Oc1ccccc1C(=O)O.[Na+].[Cl-]", "P(=O)(O)(O)OCC#CI", "[Se]=C=[Se]",
              "C[C@H](N)C(=O)O", "B1OC(C)(C)C(C)(C)O1"]


def bundled_smiles(step: int) -> list[str]:
    """Every ``step``-th SMILES of the four bundled CSV sets (drug-like, solvation,
    solubility, toxicity)."""
    out = []
    for name in ("bace1_chembl", "freesolv", "delaney-processed", "tox21"):
        with open(DATASETS_DIR / "molecules" / f"{name}.csv", newline="") as handle:
            out += [row["smiles"] for row in csv.DictReader(handle)][::step]
    return out


def reference(mol: Chem.Mol) -> torch.Tensor:
    """(1, F_desc): RDKit's public descriptor functions one by one, cleaned as
    ``mol_descriptors`` cleans its values."""
    values = []
    with rdBase.BlockLogs():
        Chem.FastFindRings(mol)
        for _, fn in descriptor_functions():
            try:
                values.append(float(fn(mol)))
            except (RuntimeError, ValueError, ZeroDivisionError, OverflowError):
                values.append(float("nan"))
    row = np.array(values)
    row = np.where(np.abs(row) < 1e30, row, 0.0)
    return torch.from_numpy(np.nan_to_num(row)).float()[None]


def molecule(smiles: str) -> Chem.Mol | None:
    with rdBase.BlockLogs():
        mol = Chem.MolFromSmiles(smiles)
    return None if mol is None else keep_largest_fragment(mol)


def test_equal_to_rdkit_on_bundled_molecules():
    checked = 0
    for smiles in bundled_smiles(step=60) + EDGE_CASES:
        mol = molecule(smiles)
        if mol is None:
            continue
        fast, slow = mol_descriptors(Chem.Mol(mol)), reference(Chem.Mol(mol))
        assert fast.shape == (1, descriptor_count())
        differ = [NAMES[k] for k in torch.nonzero(fast[0] != slow[0]).flatten().tolist()]
        assert not differ, f"{smiles}: {differ}"
        checked += 1
    assert checked > 250


@pytest.mark.parametrize("smiles", ["CCO", "c1ccccc1O", "CC(=O)[O-].[NH4+]", "[Na+]"])
def test_estate_indices_equal_rdkit_bit_for_bit(smiles):
    mol = Chem.MolFromSmiles(smiles)  # several fragments too: pairs across them count 0
    np.testing.assert_array_equal(MolContext(mol).estate, EState.EStateIndices(Chem.Mol(mol)))


def test_atom_terms_count_valence_and_radical_electrons():
    mol = Chem.MolFromSmiles("C[CH2].[NH4+]")
    terms = atom_terms(mol)
    valence, radicals = terms.valence, terms.radicals
    assert valence == Descriptors.NumValenceElectrons(mol) == 7 + 6 + 8  # CH3, CH2 and NH4+
    assert radicals == Descriptors.NumRadicalElectrons(mol) == 1


def test_one_morgan_fingerprint_gives_the_three_densities():
    mol = Chem.MolFromSmiles("CC(=O)Nc1ccc(O)cc1")
    assert morgan_densities(MolContext(mol)) == (Descriptors.FpDensityMorgan1(mol),
                                     Descriptors.FpDensityMorgan2(mol),
                                     Descriptors.FpDensityMorgan3(mol))


def test_every_shared_value_equals_rdkit_bit_for_bit_on_a_fresh_parse():
    functions = dict(descriptor_functions())
    assert set(SHARED_VALUES) <= set(functions)
    for smiles in ("CC(C)Cc1ccc(cc1)C(C)C(=O)O", "C", "C=CC#N", "[O-][N+](=O)c1ccccc1Cl"):
        context = MolContext(Chem.MolFromSmiles(smiles))
        assert bertz_ct(context) == GraphDescriptors.BertzCT(Chem.MolFromSmiles(smiles))
        for name, fn in SHARED_VALUES.items():
            assert fn(context) == functions[name](Chem.MolFromSmiles(smiles)), (smiles, name)


def test_balaban_j_equals_rdkit_bit_for_bit():
    for smiles in bundled_smiles(step=40) + EDGE_CASES:
        mol = molecule(smiles)
        if mol is not None:
            assert balaban_j(MolContext(Chem.Mol(mol))) == GraphDescriptors.BalabanJ(
                Chem.Mol(mol)), smiles


@pytest.mark.parametrize("kind", ["rdkit", "lean", "fast"])
def test_no_rdkit_cache_on_the_molecule_is_written(kind):
    mol = Chem.MolFromSmiles("CC(=O)Nc1ccc(O)cc1")
    mol_descriptors(mol, kind=kind)
    written = set(vars(mol))  # RDKit's own AvgIpc (rdkit set only) caches _adjMat
    assert not written - {"_adjMat"} and (kind == "rdkit" or not written)
