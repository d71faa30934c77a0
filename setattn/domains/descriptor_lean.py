"""The ``lean`` and ``fast`` descriptor sets: RDKit 2D descriptors that cost little.

RDKit's full 2D set (``descriptors.descriptor_functions``, the ``rdkit`` set) spends most
of its time in a few families: the topological indices built from paths and polynomials
(``AvgIpc``, ``BalabanJ``, ``BertzCT``, ``Chi2``-``Chi4``, ``Kappa2``, ``Kappa3``,
``Phi``), the Morgan fingerprint densities and three SMARTS-based counts (rotatable
bonds, RDKit's H-bond acceptors, bridgehead atoms), named by ``GRAPH_INDICES``, and the
85 ``fr_*`` substructure counts (one SMARTS search each). The ``lean`` set leaves out
the first group, the ``fast`` set both (``LEFT_OUT``); each keeps the order of the
``rdkit`` set.

The kept descriptors come from a few intermediate results computed once per molecule:
the Crippen contributions of the molecule with explicit hydrogens (``MolLogP``,
``MolMR``, ``SlogP_VSA*``, ``SMR_VSA*``), Labute's surface contributions, Gasteiger
charges (the partial-charge extremes, ``PEOE_VSA*``) and the EState indices
(``descriptor_fast``; ``EState_VSA*``, ``VSA_EState*``). They equal RDKit's functions
on a freshly parsed molecule up to floating-point summation order
(``tests/unit/test_descriptor_lean.py``); the rest are RDKit's own functions.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from rdkit import Chem
from rdkit.Chem import MolSurf, rdMolDescriptors, rdPartialCharges
from rdkit.Chem.EState import EState_VSA

from setattn.domains.descriptor_fast import atom_terms, chi0_chi1, estate_indices

__all__ = ["GRAPH_INDICES", "LEFT_OUT", "kept", "lean_functions", "surface_functions"]

GRAPH_INDICES = ("AvgIpc", "BalabanJ", "BertzCT", "Chi2", "Chi3", "Chi4", "Kappa2", "Kappa3",
                 "Phi", "FpDensityMorgan", "NumRotatableBonds", "NumHAcceptors",
                 "NumBridgeheadAtoms")
"""Name prefixes of the slow path, polynomial and SMARTS-based indices."""

LEFT_OUT = {"lean": GRAPH_INDICES, "fast": ("fr_", *GRAPH_INDICES)}
"""Name prefixes of the ``rdkit`` descriptors each set leaves out."""


def kept(name: str, kind: str) -> bool:
    """Whether the ``rdkit`` descriptor ``name`` is in the set ``kind`` ("lean" or
    "fast")."""
    return not name.startswith(LEFT_OUT[kind])


def _binned(values: Any, areas: Any, bins: Sequence[float]) -> np.ndarray:
    """(B + 1,) surface area summed by the bin each atom's value falls in (RDKit's
    rule, ``bisect.bisect_right``: bin i holds bins[i - 1] <= value < bins[i]; NaN goes
    to the last bin). ``np.bincount`` adds the areas in atom order, as RDKit does."""
    index = np.searchsorted(bins, np.asarray(values, dtype=np.float64), side="right")  # (N,)
    return np.bincount(index, weights=np.asarray(areas, dtype=np.float64),
                       minlength=len(bins) + 1)  # (B + 1,)


def _charges(mol: Chem.Mol) -> list[float]:
    """(N,) Gasteiger charges, as RDKit's ``MaxPartialCharge`` computes them."""
    rdPartialCharges.ComputeGasteigerCharges(mol)
    return [mol.GetAtomWithIdx(i).GetDoubleProp("_GasteigerCharge")
            for i in range(mol.GetNumAtoms())]


def _extremes(charges: list[float]) -> tuple[float, float]:
    """(min, max) of the charges, RDKit's ``_ChargeDescriptors`` loop (NaN-safe alike)."""
    low, high = 500.0, -500.0
    for charge in charges:
        low, high = min(charge, low), max(charge, high)
    return low, high


def surface_functions(mol: Chem.Mol) -> tuple[dict[str, Callable[[Chem.Mol], Any]],
                                               np.ndarray]:
    """The Crippen, Labute and Gasteiger descriptors of ``mol`` from one computation of
    each, by name (``MolLogP``, ``MolMR``, the partial-charge extremes, ``SlogP_VSA*``,
    ``SMR_VSA*``, ``PEOE_VSA*``), and the (N,) Labute areas of the atoms.

    Bit for bit what RDKit's functions give: the Crippen contributions of the molecule
    with explicit hydrogens added up in atom order, as ``CalcCrippenDescriptors`` adds
    them (a heavy atom's contribution is the same with or without the hydrogens, so the
    VSA bins read the first N), and the charges read as ``_ChargeDescriptors`` reads them.
    """
    n = mol.GetNumAtoms()
    crippen = rdMolDescriptors._CalcCrippenContribs(Chem.AddHs(mol))  # N + H (logp, mr)
    logp = mr = 0.0
    for atom_logp, atom_mr in crippen:  # in order: numpy's pairwise sum rounds otherwise
        logp += atom_logp
        mr += atom_mr
    heavy = np.array(crippen[:n], dtype=np.float64).reshape(n, 2)  # (N, 2)
    areas = np.fromiter(rdMolDescriptors._CalcLabuteASAContribs(mol)[0], np.float64,
                        count=n)  # (N,): one pass over RDKit's vector, read once
    slogp, smr = (_binned(heavy[:, 0], areas, MolSurf.logpBins),
                  _binned(heavy[:, 1], areas, MolSurf.mrBins))
    charges = _charges(mol)
    low, high = _extremes(charges)
    peoe = _binned(charges, areas, MolSurf.chgBins)
    fast: dict[str, Callable[[Chem.Mol], Any]] = {
        "MolLogP": lambda m: logp, "MolMR": lambda m: mr,
        "MaxPartialCharge": lambda m: high, "MinPartialCharge": lambda m: low,
        "MaxAbsPartialCharge": lambda m: max(abs(low), abs(high)),
        "MinAbsPartialCharge": lambda m: min(abs(low), abs(high)),
    }
    fast.update({f"SlogP_VSA{b + 1}": (lambda m, b=b: slogp[b]) for b in range(len(slogp))})
    fast.update({f"SMR_VSA{b + 1}": (lambda m, b=b: smr[b]) for b in range(len(smr))})
    fast.update({f"PEOE_VSA{b + 1}": (lambda m, b=b: peoe[b]) for b in range(len(peoe))})
    return fast, areas


def lean_functions(mol: Chem.Mol) -> dict[str, Callable[[Chem.Mol], Any]]:
    """Replacements for the shared-work descriptors of ``mol`` in the ``lean`` and
    ``fast`` sets, by name: ``surface_functions``, and the EState descriptors from one
    computation of the EState indices. The returned functions only read them.
    """
    fast, areas = surface_functions(mol)
    intrinsic, valence, radicals, degrees = atom_terms(mol)
    chi0, chi1 = chi0_chi1(mol, degrees)
    estate = estate_indices(mol, intrinsic)  # (N,)
    estate_vsa = _binned(estate, areas, EState_VSA.estateBins)  # area by EState index
    vsa_estate = _binned(areas, estate, EState_VSA.vsaBins)  # EState index by area
    magnitudes = np.abs(estate)  # (N,)
    fast.update({
        "MaxAbsEStateIndex": lambda m: magnitudes.max(), "MaxEStateIndex": lambda m: estate.max(),
        "MinAbsEStateIndex": lambda m: magnitudes.min(), "MinEStateIndex": lambda m: estate.min(),
        "NumValenceElectrons": lambda m: valence, "NumRadicalElectrons": lambda m: radicals,
        "Chi0": lambda m: chi0, "Chi1": lambda m: chi1,
    })
    fast.update({f"EState_VSA{b + 1}": (lambda m, b=b: estate_vsa[b])
                 for b in range(len(estate_vsa))})
    fast.update({f"VSA_EState{b + 1}": (lambda m, b=b: vsa_estate[b])
                 for b in range(len(vsa_estate))})
    return fast
