"""Descriptors split over atoms: every column adds up to RDKit's value, and the additive
ones are split as their definitions say."""

from __future__ import annotations

import numpy as np
import pytest
from rdkit import Chem, rdBase
from rdkit.Chem import Crippen, Descriptors, rdMolDescriptors
from test_descriptors import bundled_smiles, molecule

from setattn.chem.descriptors import descriptor_functions, mol_descriptors
from setattn.chem.fragments import FRAGMENT_SMARTS
from setattn.chem.shares import additive_descriptors, descriptor_shares

NAMES = [name for name, _ in descriptor_functions()]
MOLECULES = ["CN(C)C(=O)c1ccc(cc1)OC", "OC(=O)c1ccccc1O", "c1ccc2ccccc2c1",
             "C1CCNCC1", "CC(C)(C)Cl", "[NH3+]CC([O-])=O", "C"]


def shares_of(smiles: str) -> tuple[Chem.Mol, np.ndarray, np.ndarray, list[bool]]:
    mol = Chem.MolFromSmiles(smiles)
    values = mol_descriptors(mol)[0].double().numpy()
    shares, additive = descriptor_shares(mol, values)
    return mol, values, shares, additive


@pytest.mark.parametrize("smiles", MOLECULES)
def test_every_column_sums_to_the_descriptor(smiles):
    mol, values, shares, _ = shares_of(smiles)
    assert shares.shape == (mol.GetNumAtoms(), len(NAMES))
    np.testing.assert_allclose(shares.sum(0), values, atol=1e-9, rtol=1e-9)


@pytest.mark.parametrize("smiles", MOLECULES[:4])
def test_logp_is_split_into_crippen_contributions_with_hydrogens(smiles):
    mol, _, shares, additive = shares_of(smiles)
    k = NAMES.index("MolLogP")
    assert additive[k]
    with_h = Chem.AddHs(mol)
    contribs = [c[0] for c in rdMolDescriptors._CalcCrippenContribs(with_h)]
    for atom in mol.GetAtoms():
        hs = [n.GetIdx() for n in with_h.GetAtomWithIdx(atom.GetIdx()).GetNeighbors()
              if n.GetAtomicNum() == 1]
        expected = contribs[atom.GetIdx()] + sum(contribs[h] for h in hs)
        assert shares[atom.GetIdx(), k] == pytest.approx(expected, rel=1e-5, abs=1e-5)
    assert shares[:, k].sum() == pytest.approx(Crippen.MolLogP(mol), abs=1e-4)


def test_benzene_count_sits_on_the_benzene_atoms_only():
    mol, _, shares, additive = shares_of("OCCc1ccccc1")  # O C C then six ring carbons
    k = NAMES.index("fr_benzene")
    assert additive[k]
    assert shares[:3, k].tolist() == [0.0, 0.0, 0.0]
    np.testing.assert_allclose(shares[3:, k], 1 / 6)


def test_non_additive_descriptors_are_split_evenly():
    mol, values, shares, additive = shares_of("CCOc1ccccc1")
    k = NAMES.index("BertzCT")
    assert not additive[k]
    np.testing.assert_allclose(shares[:, k], values[k] / mol.GetNumAtoms())


def test_the_common_additive_families_are_recognised():
    mol = Chem.MolFromSmiles("CN(C)C(=O)c1ccc(cc1)OC")
    names = set(additive_descriptors(mol, mol_descriptors(mol)[0].double().numpy()))
    expected = {"MolLogP", "MolMR", "TPSA", "HeavyAtomCount", "MolWt", "RingCount",
                "fr_benzene", "fr_amide", "SlogP_VSA1", "PEOE_VSA1", "EState_VSA1"}
    assert expected <= names
    assert len(names) > 150  # of the 206 descriptors


def test_each_fragment_pattern_counts_what_rdkit_counts():
    functions = dict(descriptor_functions())
    assert {name for name in functions if name.startswith("fr_")} == set(FRAGMENT_SMARTS)
    assert len(FRAGMENT_SMARTS) == len([n for n, _ in Descriptors.descList if n[:3] == "fr_"])
    patterns = {name: Chem.MolFromSmarts(smarts) for name, smarts in FRAGMENT_SMARTS.items()}
    for smiles in bundled_smiles(step=120):
        mol = molecule(smiles)
        if mol is None:
            continue
        with rdBase.BlockLogs():
            Chem.FastFindRings(mol)
        for name, pattern in patterns.items():
            count = len(mol.GetSubstructMatches(pattern, uniquify=True))
            assert count == functions[name](mol), (smiles, name)
