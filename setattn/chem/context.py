"""One molecule's intermediate results, each computed once and shared by the descriptors.

RDKit's descriptor functions each start from the molecule: the four EState extremes and
the two EState VSA families compute the EState indices six times, the Crippen, Labute
and Gasteiger families their atom contributions once per descriptor. A ``MolContext``
computes each on first use and keeps it for the other descriptors of the molecule
(``setattn.chem.values``) and for their split over the atoms (``setattn.chem.shares``).
It keeps them on itself, never on the RDKit molecule.

Each follows RDKit's own code in its order of operations wherever floating-point
rounding depends on it, so that the descriptors built on it are RDKit's to the bit
(``tests/unit/test_descriptors.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any, TypeVar

import numpy as np
from rdkit import Chem
from rdkit.Chem import rdMolDescriptors, rdPartialCharges

__all__ = ["AtomTerms", "MolContext", "ordered_sum"]

T = TypeVar("T")

_PERIOD_ENDS = (2, 10, 18, 36, 54, 86)  # last atomic number of periods 1..6


def ordered_sum(values: np.ndarray) -> float:
    """The sum of (K,) values added one by one in order, as RDKit's Python loops add
    them (``np.sum`` adds pairwise and rounds otherwise); 0.0 for none."""
    return float(np.cumsum(values)[-1]) if len(values) else 0.0


def principal_quantum_number(atomic_number: int) -> int:
    """RDKit's ``EState.GetPrincipleQuantumNumber``: the period of the element."""
    return next((n for n, last in enumerate(_PERIOD_ENDS, 1) if atomic_number <= last), 7)


@dataclass(frozen=True)
class AtomTerms:
    """What one pass over the atoms gives.

    Attributes:
        intrinsic: (N,) float64 EState intrinsic states (0 for an atom without bonds).
        valence: RDKit's ``NumValenceElectrons``.
        radicals: RDKit's ``NumRadicalElectrons``.
        degrees: the N atom degrees.
    """

    intrinsic: np.ndarray
    valence: int
    radicals: int
    degrees: list[int]


def atom_terms(mol: Chem.Mol) -> AtomTerms:
    """The ``AtomTerms`` of ``mol``, read atom by atom as RDKit's functions read them."""
    table = Chem.GetPeriodicTable()
    intrinsic = np.zeros(mol.GetNumAtoms(), dtype=np.float64)  # (N,)
    valence = radicals = 0
    degrees = []
    for i in range(mol.GetNumAtoms()):  # by index: RDKit's GetAtoms() iterates in Python
        atom = mol.GetAtomWithIdx(i)
        z, hs = atom.GetAtomicNum(), atom.GetTotalNumHs()
        outer = table.GetNOuterElecs(z)
        valence += outer - atom.GetFormalCharge() + hs
        radicals += atom.GetNumRadicalElectrons()
        degree = atom.GetDegree()
        degrees.append(degree)
        if degree > 0:
            n = principal_quantum_number(z)
            intrinsic[i] = (4. / (n * n) * (outer - hs) + 1) / degree
    return AtomTerms(intrinsic, valence, radicals, degrees)


def estate_indices(intrinsic: np.ndarray, distances: np.ndarray) -> np.ndarray:
    """RDKit's ``EStateIndices``, (N,) float64, bit for bit, without its Python double
    loop, from the (N,) intrinsic states and the (N, N) topological distances.

    Atom k's index is its intrinsic state plus the sum over the other atoms j, in atom
    order, of (I_k - I_j) / (d_kj + 1)^2 (pairs in different fragments count 0). RDKit
    adds these terms one by one in that order; ``np.cumsum`` adds them in the same order.
    """
    if not len(intrinsic):
        return intrinsic
    dists = distances + 1  # (N, N)
    terms = (intrinsic[:, None] - intrinsic[None, :]) / (dists * dists)  # (N, N)
    terms[dists >= 1e6] = 0.0
    return np.cumsum(terms, axis=1)[:, -1] + intrinsic  # (N,)


class MolContext:
    """The shared intermediate results of one molecule, each computed on first use.

    ``mol`` must not change while the context is in use. Reading ``charges`` sets RDKit's
    Gasteiger charge properties on the atoms of ``mol`` (``ComputeGasteigerCharges``).

    Attributes:
        mol: the molecule (N atoms, hydrogens implicit).
    """

    def __init__(self, mol: Chem.Mol) -> None:
        self.mol = mol
        self._derived: dict[Callable[[MolContext], Any], Any] = {}

    def derived(self, fn: Callable[[MolContext], T]) -> T:
        """``fn(self)``, computed on the first call for this ``fn`` only (a result
        several descriptors read, such as a family of surface-area bins)."""
        if fn not in self._derived:
            self._derived[fn] = fn(self)
        return self._derived[fn]

    @cached_property
    def atoms(self) -> AtomTerms:
        """EState intrinsic states, electron counts and degrees (``atom_terms``)."""
        return atom_terms(self.mol)

    @cached_property
    def distances(self) -> np.ndarray:
        """(N, N) float64 topological distances (bond counts; 1e8 across fragments)."""
        return Chem.GetDistanceMatrix(self.mol, useBO=False, useAtomWts=False)

    @cached_property
    def bond_order_distances(self) -> np.ndarray:
        """(N, N) float64 distances weighted by inverse bond order: the matrix of RDKit's
        ``BalabanJ`` and ``BertzCT``."""
        return Chem.GetDistanceMatrix(self.mol, useBO=True, useAtomWts=False, force=True,
                                      prefix="Balaban")

    @cached_property
    def estate(self) -> np.ndarray:
        """(N,) float64 EState indices (``estate_indices``)."""
        return estate_indices(self.atoms.intrinsic, self.distances)

    @cached_property
    def with_hydrogens(self) -> Chem.Mol:
        """``mol`` with explicit hydrogens (atoms N.. N + H - 1), as Crippen reads it."""
        return Chem.AddHs(self.mol)

    @cached_property
    def crippen(self) -> np.ndarray:
        """(N + H, 2) float64 Crippen (logP, MR) contributions of the atoms of
        ``with_hydrogens``; a heavy atom's are the same with or without the hydrogens,
        so rows :N are the heavy atoms'."""
        contribs = rdMolDescriptors._CalcCrippenContribs(self.with_hydrogens)
        return np.array(contribs, dtype=np.float64).reshape(len(contribs), 2)

    @cached_property
    def labute(self) -> tuple[np.ndarray, float]:
        """(N,) float64 Labute surface-area contributions of the atoms, and that of
        all the hydrogens together."""
        atoms, hydrogens = rdMolDescriptors._CalcLabuteASAContribs(self.mol)
        n = self.mol.GetNumAtoms()
        return np.fromiter(atoms, np.float64, count=n), float(hydrogens)

    @cached_property
    def charges(self) -> np.ndarray:
        """(N,) float64 Gasteiger charges, as RDKit's ``MaxPartialCharge`` computes them
        (NaN where the method has no parameters)."""
        rdPartialCharges.ComputeGasteigerCharges(self.mol)
        return np.array([self.mol.GetAtomWithIdx(i).GetDoubleProp("_GasteigerCharge")
                         for i in range(self.mol.GetNumAtoms())], dtype=np.float64)
