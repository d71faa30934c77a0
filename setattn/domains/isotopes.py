"""Isotopes are stripped before featurisation: ``[2H]``, ``[13C]`` ... become the plain
element, and hydrogens written as isotopes become implicit like any other hydrogen, so
``[2H]C([2H])([2H])O`` is featurised exactly as ``CO``. The atom features hold no
isotope, and an explicit deuterium atom would be a node no model met in training; the
prediction carries a note saying so (``setattn.domains.atom_notes``). A molecule
without isotopes is left as it is.
"""

from __future__ import annotations

from rdkit import Chem, rdBase

__all__ = ["strip_isotopes"]


def strip_isotopes(mol: Chem.Mol) -> Chem.Mol:
    """``mol`` itself when it has no isotope; else a copy with every isotope set to the
    plain element, hydrogens made implicit and stereochemistry perceived again (a
    centre that was chiral only by its isotopes is no longer)."""
    if not any(atom.GetIsotope() for atom in mol.GetAtoms()):
        return mol
    plain = Chem.Mol(mol)
    for atom in plain.GetAtoms():
        atom.SetIsotope(0)
    with rdBase.BlockLogs():
        plain = Chem.RemoveHs(plain)
    Chem.AssignStereochemistry(plain, cleanIt=True, force=True)
    return plain
