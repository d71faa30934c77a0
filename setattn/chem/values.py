"""RDKit descriptors computed from a molecule's shared intermediates, to RDKit's bits.

``SHARED_VALUES`` maps a descriptor name of RDKit's ``Descriptors.descList`` to a
function of a ``MolContext`` that gives what RDKit's function gives, faster: the EState,
Crippen, Labute and Gasteiger families read their atom contributions once per molecule
(``setattn.chem.context``), the three Morgan densities come from one fingerprint, and
``BalabanJ`` and ``BertzCT`` run RDKit's loops vectorised, adding in RDKit's order
wherever floating-point rounding depends on it. The other descriptors are RDKit's own
functions (``setattn.chem.descriptors``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from rdkit import Chem
from rdkit.Chem import MolSurf
from rdkit.Chem.EState import EState_VSA

from setattn.chem.context import MolContext, ordered_sum

__all__ = ["SHARED_VALUES", "balaban_j", "bertz_ct", "binned", "morgan_densities"]


def binned(values: Any, weights: Any, bins: Sequence[float]) -> np.ndarray:
    """(B + 1,) the (N,) weights summed by the bin each atom's value falls in (RDKit's
    rule, ``bisect.bisect_right``: bin i holds bins[i - 1] <= value < bins[i]; NaN goes
    to the last bin). ``np.bincount`` adds the weights in atom order, as RDKit does."""
    index = np.searchsorted(bins, np.asarray(values, dtype=np.float64), side="right")  # (N,)
    return np.bincount(index, weights=np.asarray(weights, dtype=np.float64),
                       minlength=len(bins) + 1)  # (B + 1,)


def _heavy(c: MolContext) -> np.ndarray:
    """(N, 2) the Crippen contributions of the heavy atoms."""
    return c.crippen[:c.mol.GetNumAtoms()]


def _slogp_vsa(c: MolContext) -> np.ndarray:
    return binned(_heavy(c)[:, 0], c.labute[0], MolSurf.logpBins)


def _smr_vsa(c: MolContext) -> np.ndarray:
    return binned(_heavy(c)[:, 1], c.labute[0], MolSurf.mrBins)


def _peoe_vsa(c: MolContext) -> np.ndarray:
    return binned(c.charges, c.labute[0], MolSurf.chgBins)


def _estate_vsa(c: MolContext) -> np.ndarray:
    return binned(c.estate, c.labute[0], EState_VSA.estateBins)  # area by EState index


def _vsa_estate(c: MolContext) -> np.ndarray:
    return binned(c.labute[0], c.estate, EState_VSA.vsaBins)  # EState index by area


def _charge_extremes(c: MolContext) -> tuple[float, float]:
    """(min, max) of the Gasteiger charges, RDKit's ``_ChargeDescriptors`` loop (its
    NaN handling alike)."""
    low, high = 500.0, -500.0
    for charge in c.charges:
        low, high = min(charge, low), max(charge, high)
    return low, high


def _chi0_chi1(c: MolContext) -> tuple[float, float]:
    """RDKit's ``Chi0`` and ``Chi1`` from the atom degrees: sums, in atom and bond order,
    of 1 / sqrt(degree) and 1 / sqrt(product of the bond's two degrees), zeros left out
    (Python's ``sum`` over the numpy terms, as RDKit adds them)."""
    degrees, mol = c.atoms.degrees, c.mol
    atoms = np.array([d for d in degrees if d != 0], float)
    bonds = []
    for k in range(mol.GetNumBonds()):
        bond = mol.GetBondWithIdx(k)
        bonds.append(degrees[bond.GetBeginAtomIdx()] * degrees[bond.GetEndAtomIdx()])
    pairs = np.array([b for b in bonds if b != 0], float)
    return sum(np.sqrt(1. / atoms)), sum(np.sqrt(1. / pairs))


@functools.cache
def _morgan3() -> Any:
    from rdkit.Chem import rdFingerprintGenerator

    return rdFingerprintGenerator.GetMorganGenerator(3)


def morgan_densities(c: MolContext) -> tuple[float, float, float]:
    """RDKit's ``FpDensityMorgan1..3`` from one radius-3 count fingerprint: an
    environment id is in the radius-r fingerprint when it occurs at a radius <= r."""
    from rdkit.Chem import rdFingerprintGenerator

    heavy = c.mol.GetNumHeavyAtoms()
    if heavy == 0:
        return 0.0, 0.0, 0.0
    output = rdFingerprintGenerator.AdditionalOutput()
    output.AllocateBitInfoMap()
    _morgan3().GetSparseCountFingerprint(c.mol, additionalOutput=output)
    first = [min(r for _, r in found) for found in output.GetBitInfoMap().values()]
    counts = np.bincount(first, minlength=4).cumsum()  # (4,) ids first seen at <= r
    return float(counts[1]) / heavy, float(counts[2]) / heavy, float(counts[3]) / heavy


def balaban_j(c: MolContext) -> float:
    """RDKit's ``BalabanJ``: the same matrices and terms, added in the same order,
    without its Python double loop over atom pairs."""
    mol, dmat = c.mol, c.bond_order_distances  # (N, N)
    adjacency = Chem.GetAdjacencyMatrix(mol, useBO=False, emptyVal=0, force=False,
                                        prefix="NoBO")  # (N, N)
    degrees = sum(dmat)  # (N,) RDKit's _VertexDegrees: the rows added in order
    bonds = mol.GetNumBonds()
    cycles = bonds - mol.GetNumAtoms() + 1
    i, j = np.nonzero(np.triu(adjacency == 1))  # the pairs i <= j, in RDKit's loop order
    total = ordered_sum(1. / np.sqrt(degrees[i] * degrees[j]))  # (P,) terms
    return float(bonds) / float(cycles + 1) * total if cycles + 1 != 0 else 0


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


def _symmetry_classes(dmat: np.ndarray, cutoff: int = 100) -> list[int]:
    """RDKit's ``GraphDescriptors._AssignSymmetryClasses`` on the (N, N) bond-order
    distance matrix.

    Atoms are in one class when their sorted distance rows are equal to 4 decimals.
    RDKit compares the rows as ``%.4f`` strings; rounding with ``np.round`` groups them
    the same way except for a distance within rounding error of a tie (a fifth decimal
    of exactly 5), and bond-order distances are sums of 1/order (order 1, 1.5, 2, 3,
    ...: multiples of 1/60), which are never that close to one."""
    rows = np.round(np.sort(dmat, axis=1)[:, :cutoff], 4)  # (N, min(N, cutoff))
    seen: dict[bytes, int] = {}
    return [seen.setdefault(row.tobytes(), len(seen)) + 1 for row in rows]


def bertz_ct(c: MolContext) -> float:
    """RDKit's ``BertzCT``: the same counts, added in the same order, without its
    per-pair function calls."""
    from rdkit.Chem import GraphDescriptors

    mol, n = c.mol, c.mol.GetNumAtoms()
    if n < 2:
        return 0
    orders, neighbours = _neighbours(mol)
    classes = _symmetry_classes(c.bond_order_distances)
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


def _family(name: str, fn: Callable[[MolContext], np.ndarray], bins: Sequence[float]
            ) -> dict[str, Callable[[MolContext], float]]:
    """``name1`` .. ``name{B + 1}``: bin b of the (B + 1,) family ``fn``, computed once
    per molecule."""
    return {f"{name}{b + 1}": (lambda c, b=b: c.derived(fn)[b]) for b in range(len(bins) + 1)}


def _shared_values() -> dict[str, Callable[[MolContext], float]]:
    values: dict[str, Callable[[MolContext], float]] = {
        "MaxAbsEStateIndex": lambda c: np.abs(c.estate).max(),
        "MaxEStateIndex": lambda c: c.estate.max(),
        "MinAbsEStateIndex": lambda c: np.abs(c.estate).min(),
        "MinEStateIndex": lambda c: c.estate.min(),
        "NumValenceElectrons": lambda c: c.atoms.valence,
        "NumRadicalElectrons": lambda c: c.atoms.radicals,
        "MaxPartialCharge": lambda c: c.derived(_charge_extremes)[1],
        "MinPartialCharge": lambda c: c.derived(_charge_extremes)[0],
        "MaxAbsPartialCharge": lambda c: max(map(abs, c.derived(_charge_extremes))),
        "MinAbsPartialCharge": lambda c: min(map(abs, c.derived(_charge_extremes))),
        "BalabanJ": balaban_j, "BertzCT": bertz_ct,
        "Chi0": lambda c: c.derived(_chi0_chi1)[0], "Chi1": lambda c: c.derived(_chi0_chi1)[1],
        "MolLogP": lambda c: ordered_sum(c.crippen[:, 0]),
        "MolMR": lambda c: ordered_sum(c.crippen[:, 1]),
    }
    values.update({f"FpDensityMorgan{r}": (lambda c, r=r: c.derived(morgan_densities)[r - 1])
                   for r in (1, 2, 3)})
    values.update(_family("SlogP_VSA", _slogp_vsa, MolSurf.logpBins))
    values.update(_family("SMR_VSA", _smr_vsa, MolSurf.mrBins))
    values.update(_family("PEOE_VSA", _peoe_vsa, MolSurf.chgBins))
    values.update(_family("EState_VSA", _estate_vsa, EState_VSA.estateBins))
    values.update(_family("VSA_EState", _vsa_estate, EState_VSA.vsaBins))
    return values


SHARED_VALUES: dict[str, Callable[[MolContext], float]] = _shared_values()
"""Descriptor name -> its value from a ``MolContext``, as RDKit's function gives it."""
