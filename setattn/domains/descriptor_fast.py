"""The slowest RDKit descriptors computed faster, to the same bits.

RDKit's Python descriptor functions (``rdkit.Chem.Descriptors``) each start from the
molecule: the four EState extremes compute the EState indices four times with a
Python double loop, the three Morgan densities build three fingerprints, BertzCT
formats every distance of the molecule as text. The functions here compute each
intermediate result once and vectorise the loops, in the order of operations of RDKit's
code wherever floating-point rounding depends on it, so that
``setattn.domains.descriptors.mol_descriptors`` gives exactly what RDKit's functions
give (``tests/unit/test_descriptors.py`` compares the two on bundled molecules). The
Crippen, Labute and Gasteiger descriptors come from ``descriptor_lean.surface_functions``.
"""


from __future__ import annotations

import functools
from typing import Any

import numpy as np
from rdkit import Chem

__all__ = ["atom_terms", "balaban_j", "bertz_ct", "chi0_chi1", "estate_indices", "morgan_densities"]

_PERIOD_ENDS = (2, 10, 18, 36, 54, 86)  # last atomic number of periods 1..6



def _principal_quantum_number(atomic_number: int) -> int:
    """RDKit's ``EState.GetPrincipleQuantumNumber``: the period of the element."""
    return next((n for n, last in enumerate(_PERIOD_ENDS, 1) if atomic_number <= last), 7)


def atom_terms(mol: Chem.Mol) -> tuple[np.ndarray, int, int, list[int]]:
    """One pass over the atoms: the EState intrinsic states (N,) float64, the valence
    electron count and the radical electron count (RDKit's ``NumValenceElectrons`` and
    ``NumRadicalElectrons``), and the N atom degrees."""
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
            n = _principal_quantum_number(z)
            intrinsic[i] = (4. / (n * n) * (outer - hs) + 1) / degree
    return intrinsic, valence, radicals, degrees


def chi0_chi1(mol: Chem.Mol, degrees: list[int]) -> tuple[float, float]:
    """RDKit's ``Chi0`` and ``Chi1`` from the atom degrees: sums, in atom and bond order,
    of 1 / sqrt(degree) and 1 / sqrt(product of the bond's two degrees), zeros left out
    (Python's ``sum`` over the numpy terms, as RDKit adds them)."""
    atoms = np.array([d for d in degrees if d != 0], float)
    bonds = []
    for k in range(mol.GetNumBonds()):
        bond = mol.GetBondWithIdx(k)
        bonds.append(degrees[bond.GetBeginAtomIdx()] * degrees[bond.GetEndAtomIdx()])
    pairs = np.array([c for c in bonds if c != 0], float)
    return sum(np.sqrt(1. / atoms)), sum(np.sqrt(1. / pairs))


def estate_indices(mol: Chem.Mol, intrinsic: np.ndarray) -> np.ndarray:
    """RDKit's ``EStateIndices(mol)``, (N,) float64, bit for bit, without its Python
    double loop.

    Atom k's index is its intrinsic state (``atom_terms``) plus the sum over the other
    atoms j, in atom order, of (I_k - I_j) / (d_kj + 1)^2 (pairs in different fragments
    count 0). RDKit adds these terms one by one in that order; ``np.cumsum`` adds them
    in the same order (``np.sum`` pairs them up and rounds differently).
    """
    if not len(intrinsic):
        return intrinsic
    dists = Chem.GetDistanceMatrix(mol, useBO=False, useAtomWts=False) + 1  # (N, N)
    terms = (intrinsic[:, None] - intrinsic[None, :]) / (dists * dists)  # (N, N)
    terms[dists >= 1e6] = 0.0
    return np.cumsum(terms, axis=1)[:, -1] + intrinsic  # (N,)


@functools.cache
def _morgan3() -> Any:
    from rdkit.Chem import rdFingerprintGenerator

    return rdFingerprintGenerator.GetMorganGenerator(3)


def morgan_densities(mol: Chem.Mol) -> tuple[float, float, float]:
    """RDKit's ``FpDensityMorgan1..3`` from one radius-3 count fingerprint: an
    environment id is in the radius-r fingerprint when it occurs at a radius <= r."""
    from rdkit.Chem import rdFingerprintGenerator

    heavy = mol.GetNumHeavyAtoms()
    if heavy == 0:
        return 0.0, 0.0, 0.0
    output = rdFingerprintGenerator.AdditionalOutput()
    output.AllocateBitInfoMap()
    _morgan3().GetSparseCountFingerprint(mol, additionalOutput=output)
    first = [min(r for _, r in found) for found in output.GetBitInfoMap().values()]
    counts = np.bincount(first, minlength=4).cumsum()  # (4,) ids first seen at <= r
    return float(counts[1]) / heavy, float(counts[2]) / heavy, float(counts[3]) / heavy


def _neighbours(mol: Chem.Mol) -> tuple[dict, list[list[int]]]:
    """Bond orders by (low, high) atom pair (aromatic 1.5) and sorted neighbour lists,
    as RDKit's ``GraphDescriptors._CreateBondDictEtc``."""
    orders: dict[tuple[int, int], float] = {}
    neighbours: list[list[int]] = [[] for _ in range(mol.GetNumAtoms())]
    for k in range(mol.GetNumBonds()):
        bond = mol.GetBondWithIdx(k)
        a, b = bond.GetBeginAtomIdx(), bond.GetEndAtomIdx()
        a, b = min(a, b), max(a, b)
        orders[(a, b)] = 1.5 if bond.GetIsAromatic() else bond.GetBondTypeAsDouble()
        if b not in neighbours[a]:
            neighbours[a].append(b)
        if a not in neighbours[b]:
            neighbours[b].append(a)
    for atoms in neighbours:
        atoms.sort()
    return orders, neighbours


def _balaban_matrix(mol: Chem.Mol) -> np.ndarray:
    """(N, N) the bond-order distance matrix RDKit's ``BalabanJ`` caches on the molecule
    (``mol._balabanMat``), computed when absent."""
    dmat = getattr(mol, "_balabanMat", None)
    if dmat is None:
        dmat = Chem.GetDistanceMatrix(mol, useBO=True, useAtomWts=False, force=True,
                                      prefix="Balaban")
        mol._balabanMat = dmat
    return dmat


def balaban_j(mol: Chem.Mol) -> float:
    """RDKit's ``BalabanJ``: the same matrices and terms, added in the same order,
    without its Python double loop over atom pairs."""
    dmat = _balaban_matrix(mol)  # (N, N)
    adjacency = Chem.GetAdjacencyMatrix(mol, useBO=False, emptyVal=0, force=False,
                                        prefix="NoBO")  # (N, N)
    degrees = sum(dmat)  # (N,) RDKit's _VertexDegrees: the rows added in order
    bonds = mol.GetNumBonds()
    cycles = bonds - mol.GetNumAtoms() + 1
    i, j = np.nonzero(np.triu(adjacency == 1))  # the pairs i <= j, in RDKit's loop order
    terms = 1. / np.sqrt(degrees[i] * degrees[j])  # (P,)
    total = np.cumsum(terms)[-1] if len(terms) else 0.0  # added one by one, as RDKit does
    return float(bonds) / float(cycles + 1) * total if cycles + 1 != 0 else 0


def _symmetry_classes(mol: Chem.Mol, cutoff: int = 100) -> list[int]:
    """RDKit's ``GraphDescriptors._AssignSymmetryClasses`` on the bond-order distance
    matrix ``BalabanJ`` caches (``mol._balabanMat``; computed when absent).

    Atoms are in one class when their sorted distance rows are equal to 4 decimals.
    RDKit compares the rows as ``%.4f`` strings; rounding with ``np.round`` groups them
    the same way except for a distance within rounding error of a tie (a fifth decimal
    of exactly 5), and bond-order distances are sums of 1/order (order 1, 1.5, 2, 3,
    ...: multiples of 1/60), which are never that close to one."""
    dmat = _balaban_matrix(mol)
    rows = np.round(np.sort(dmat, axis=1)[:, :cutoff], 4)  # (N, min(N, cutoff))
    seen: dict[bytes, int] = {}
    return [seen.setdefault(row.tobytes(), len(seen)) + 1 for row in rows]


def bertz_ct(mol: Chem.Mol) -> float:
    """RDKit's ``BertzCT``: the same counts, added in the same order, without its
    per-pair function calls."""
    from rdkit.Chem import GraphDescriptors

    n = mol.GetNumAtoms()
    if n < 2:
        return 0
    orders, neighbours = _neighbours(mol)
    classes = _symmetry_classes(mol)
    types: dict[int, int] = {}
    connections: dict[tuple, float] = {}
    for i in range(n):
        z = mol.GetAtomWithIdx(i).GetAtomicNum()
        types[z] = types.get(z, 0) + 1
        ci, atoms = classes[i], neighbours[i]
        bond = [orders[(i, j) if i < j else (j, i)] for j in atoms]
        for p, j in enumerate(atoms):
            cj, oj = classes[j], bond[p]
            if oj > 1 and j > i:
                key = (min(ci, cj), max(ci, cj))
                connections[key] = connections.get(key, 0) + oj * (oj - 1) / 2
            for q in range(p + 1, len(atoms)):
                ck = classes[atoms[q]]
                key3 = (min(cj, ck), ci, max(cj, ck))
                connections[key3] = connections.get(key3, 0) + oj * bond[q]
    if not connections:
        connections = {"a": 1}
    return GraphDescriptors._CalculateEntropies(connections, types, n)
