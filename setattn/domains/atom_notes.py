"""Atoms a molecule model has never seen the like of: isotopes, dummy atoms, elements
outside the feature vocabulary, each said in a note beside the prediction.

- **isotopes are stripped** (``setattn.domains.isotopes``): ``[2H]C([2H])([2H])O`` is
  featurised exactly as ``CO``, with a note.
- **dummy atoms** (``*``) and **elements outside** ``molecules.ELEMENTS`` fall in the
  element group's "other" slot: predicted, with a note that the model has likely never
  seen them.

``molecule_note`` joins these with ``fragment_note`` (several fragments: the largest is
featurised): the text of predict's ``error`` column and the API's ``notes``.
"""

from __future__ import annotations

import re
from collections import Counter

from rdkit import Chem, rdBase

from setattn.domains.molecules import ELEMENTS, fragment_note

__all__ = ["atom_note", "molecule_note"]

_KNOWN = frozenset(ELEMENTS)
# a bracket atom's mass and element symbol ("[13CH3]", "[nH]", "[se]", "[Na+]")
_BRACKET = re.compile(r"\[(\d*)([A-Z][a-z]?|[a-z]{1,2})")


def _maybe_unusual(smiles: str) -> bool:
    """Whether ``smiles`` may hold an isotope, a dummy atom or an element outside
    ``ELEMENTS``, read from its text alone (cheap): every such atom is written in
    brackets, or as ``*``. Atoms outside brackets are of SMILES's organic subset, all in
    ``ELEMENTS``."""
    if "*" in smiles:
        return True
    if "[" not in smiles:
        return False
    for mass, symbol in _BRACKET.findall(smiles):
        if mass or symbol.capitalize() not in _KNOWN:
            return True
    return False


def atom_note(smiles: str) -> str:
    """What the model makes of unusual atoms of ``smiles``, in words ("" for none, or a
    SMILES RDKit cannot read): isotopes stripped, dummy atoms and elements outside the
    vocabulary featurised as "element=other"."""
    if not _maybe_unusual(smiles):
        return ""
    with rdBase.BlockLogs():
        mol = Chem.MolFromSmiles(smiles.strip(), sanitize=False)
    if mol is None:
        return ""
    isotopes = Counter(f"[{a.GetIsotope()}{a.GetSymbol()}]" for a in mol.GetAtoms()
                       if a.GetIsotope())
    dummies = sum(1 for a in mol.GetAtoms() if a.GetAtomicNum() == 0)
    unusual = sorted({a.GetSymbol() for a in mol.GetAtoms()
                      if a.GetAtomicNum() and a.GetSymbol() not in _KNOWN})
    notes = []
    if isotopes:
        listed = ", ".join(f"{n} x {name}" for name, n in sorted(isotopes.items()))
        notes.append(f"isotopes stripped ({listed}): featurised as the plain element")
    if dummies:
        notes.append(f"{dummies} dummy atom{'s' * (dummies != 1)} '*': unknown to the model "
                     f"(featurised as element=other)")
    if unusual:
        notes.append(f"element{'s' * (len(unusual) != 1)} {', '.join(unusual)} outside the "
                     f"model's element list (featurised as element=other)")
    return "; ".join(notes)


def molecule_note(smiles: str) -> str:
    """Every remark on how ``smiles`` is featurised: ``fragment_note`` and
    ``atom_note``, joined by "; " ("" when it is featurised as written)."""
    return "; ".join(note for note in (fragment_note(smiles), atom_note(smiles)) if note)
