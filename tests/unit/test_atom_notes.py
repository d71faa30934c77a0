"""Isotopes stripped, dummy atoms and unusual elements noted: the notes' text, and
featurisation equal to the plain molecule's."""

from __future__ import annotations

import pytest
import torch

from setattn.domains.atom_notes import atom_note, molecule_note
from setattn.domains.molecules import mol_to_data


@pytest.mark.parametrize("smiles", ["CCO", "C[C@@H](O)CC", "c1cc[nH]c1", "[Na+].[Cl-]",
                                    "C[Se]C", "c1cc[se]c1", "[O-]C(=O)C", "C1CC"])
def test_ordinary_atoms_get_no_note(smiles):
    assert atom_note(smiles) == ""


@pytest.mark.parametrize(("smiles", "needle"), [
    ("[2H]C([2H])([2H])O", "isotopes stripped (3 x [2H])"),
    ("[13CH3]C", "isotopes stripped (1 x [13C])"),
    ("*C", "1 dummy atom '*'"),
    ("[*]CC[*]", "2 dummy atoms '*'"),
    ("C[Xe]", "element Xe outside the model's element list"),
    ("c1cc[te]c1", "element Te outside"),
])
def test_unusual_atoms_are_noted(smiles, needle):
    assert needle in atom_note(smiles)


def test_notes_join_the_fragment_note():
    note = molecule_note("[2H]OC.Cl")
    assert note.startswith("2 fragments") and "isotopes stripped (1 x [2H])" in note


@pytest.mark.parametrize(("isotopic", "plain"), [
    ("[2H]C([2H])([2H])O", "CO"),
    ("[13CH3]C(=O)O", "CC(=O)O"),
    ("[2H][C@@H](C)O", "C(C)O"),  # chiral only by its isotope: no longer a stereocentre
    ("[2H]c1ccccc1", "c1ccccc1"),
])
def test_isotopes_are_featurised_as_the_plain_molecule(isotopic, plain):
    a = mol_to_data(isotopic, descriptors=True)
    b = mol_to_data(plain, descriptors=True)
    for key in ("x", "edge_index", "edge_attr", "descriptors"):
        assert torch.equal(a[key], b[key]), key
