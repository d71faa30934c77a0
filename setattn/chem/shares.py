"""Descriptors split over atoms: how much of each RDKit descriptor each atom carries.

Many of the molecule model's descriptors (``setattn.chem.descriptors``) are sums over
atoms: Crippen logP and molar refractivity, TPSA, Labute's surface area, the VSA bins,
atom and mass counts, substructure counts (``fr_*``) and ring counts. ``descriptor_shares``
returns, for one molecule, an (N, F_desc) matrix whose column k is descriptor k's value
split over the N atoms (hydrogens folded into their heavy atom; a substructure or ring
split evenly over its atoms). A descriptor that is not such a sum (topological indices,
partial-charge extremes, fingerprint densities) has no atom decomposition and is split
evenly over the atoms; ``additive_descriptors`` names the ones that are.

The atom contributions come from one ``MolContext`` of the molecule, the same
intermediates the descriptors are computed from. Every column sums to the descriptor's
value (checked for each molecule: a split that does not add up to the value falls back
to the even split), so an attribution to descriptor k carried over to atoms by these
shares keeps its total.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np
from rdkit import Chem, rdBase
from rdkit.Chem import MolSurf, rdMolDescriptors
from rdkit.Chem.EState import EState_VSA

from setattn.chem.context import MolContext
from setattn.chem.descriptors import descriptor_set_named
from setattn.chem.fragments import FRAGMENT_SMARTS

__all__ = ["additive_descriptors", "descriptor_shares"]

_TOLERANCE = 1e-3  # a split that misses the descriptor's value by more than this is refused


def _crippen(c: MolContext) -> np.ndarray:
    """(N, 2) Crippen logP and MR contributions, each atom's hydrogens folded in."""
    n = c.mol.GetNumAtoms()
    out = c.crippen[:n].copy()  # (N, 2)
    for atom in c.with_hydrogens.GetAtoms():
        if atom.GetIdx() >= n:
            out[atom.GetNeighbors()[0].GetIdx()] += c.crippen[atom.GetIdx()]
    return out


def _hydrogens(mol: Chem.Mol) -> np.ndarray:
    """(N,) float64 hydrogen count of each atom."""
    return np.array([a.GetTotalNumHs() for a in mol.GetAtoms()], dtype=np.float64)


def _labute(c: MolContext) -> np.ndarray:
    """(N,) Labute ASA per atom, the hydrogens' share given by hydrogen count."""
    atoms, h_total = c.labute
    hs = _hydrogens(c.mol)  # (N,)
    h_share = hs / hs.sum() * h_total if hs.sum() else np.zeros_like(hs)
    return atoms + h_share


def _per_atom(values: np.ndarray, weights: np.ndarray, bins: Sequence[float]) -> np.ndarray:
    """(N, B + 1): atom i puts its weight into the bin its value falls in (RDKit's rule,
    ``bisect.bisect_right``)."""
    out = np.zeros((len(values), len(bins) + 1))
    out[np.arange(len(values)), np.searchsorted(bins, values, side="right")] = weights
    return out


def _vsa_families(c: MolContext) -> dict[str, np.ndarray]:
    """Every VSA bin descriptor as an (N,) split, by family name + bin number."""
    heavy, asa = c.crippen[:c.mol.GetNumAtoms()], c.labute[0]  # (N, 2), (N,)
    families = {
        "SlogP_VSA": _per_atom(heavy[:, 0], asa, MolSurf.logpBins),
        "SMR_VSA": _per_atom(heavy[:, 1], asa, MolSurf.mrBins),
        "PEOE_VSA": _per_atom(np.nan_to_num(c.charges), asa, MolSurf.chgBins),
        "EState_VSA": _per_atom(c.estate, asa, EState_VSA.estateBins),
        "VSA_EState": _per_atom(asa, c.estate, EState_VSA.vsaBins),
    }
    return {f"{name}{b + 1}": split[:, b] for name, split in families.items()
            for b in range(split.shape[1])}


def _counts(mol: Chem.Mol) -> dict[str, np.ndarray]:
    """Atom counts and masses as (N,) splits."""
    table = Chem.GetPeriodicTable()
    z = np.array([a.GetAtomicNum() for a in mol.GetAtoms()])  # (N,)
    hs = _hydrogens(mol)  # (N,)
    h_mass, h_exact = table.GetAtomicWeight(1), table.GetMostCommonIsotopeMass(1)
    mass = np.array([a.GetMass() for a in mol.GetAtoms()])  # (N,)
    exact = np.array([table.GetMostCommonIsotopeMass(int(n)) if a.GetIsotope() == 0
                      else a.GetMass() for n, a in zip(z, mol.GetAtoms())])  # (N,)
    valence = np.array([table.GetNOuterElecs(int(n)) - a.GetFormalCharge()
                        for n, a in zip(z, mol.GetAtoms())], dtype=np.float64)  # (N,)
    n_or_o = np.isin(z, (7, 8)).astype(np.float64)
    return {
        "HeavyAtomCount": (z > 1).astype(np.float64),
        "NumHeteroatoms": ~np.isin(z, (1, 6)) * 1.0,
        "NOCount": n_or_o,
        "NHOHCount": n_or_o * hs,
        "HeavyAtomMolWt": mass,
        "MolWt": mass + hs * h_mass,
        "ExactMolWt": exact + hs * h_exact,
        "NumValenceElectrons": valence + hs,
    }


@functools.cache
def _pattern(name: str) -> Chem.Mol:
    """The query of the ``fr_*`` descriptor ``name`` (``FRAGMENT_SMARTS``)."""
    return Chem.MolFromSmarts(FRAGMENT_SMARTS[name])


def _substructure_split(mol: Chem.Mol, pattern: Chem.Mol) -> np.ndarray:
    """(N,) each unique match of ``pattern`` counts 1, split evenly over its atoms."""
    out = np.zeros(mol.GetNumAtoms())
    for match in mol.GetSubstructMatches(pattern, uniquify=True, maxMatches=100_000):
        out[list(match)] += 1.0 / len(match)
    return out


def _ring_splits(mol: Chem.Mol) -> dict[str, np.ndarray]:
    """Ring counts as (N,) splits: each ring of a kind counts 1, split over its atoms."""
    info = mol.GetRingInfo()
    n = mol.GetNumAtoms()
    kinds = {k: np.zeros(n) for k in (
        "RingCount", "NumAromaticRings", "NumAliphaticRings", "NumSaturatedRings",
        "NumAromaticCarbocycles", "NumAromaticHeterocycles", "NumAliphaticCarbocycles",
        "NumAliphaticHeterocycles", "NumSaturatedCarbocycles", "NumSaturatedHeterocycles",
        "NumHeterocycles")}
    for atoms, bonds in zip(info.AtomRings(), info.BondRings()):
        share = np.zeros(n)
        share[list(atoms)] = 1.0 / len(atoms)
        aromatic = all(mol.GetBondWithIdx(b).GetIsAromatic() for b in bonds)
        saturated = all(mol.GetBondWithIdx(b).GetBondType() == Chem.BondType.SINGLE
                        for b in bonds)
        hetero = any(mol.GetAtomWithIdx(a).GetAtomicNum() != 6 for a in atoms)
        kind = "Aromatic" if aromatic else "Aliphatic"
        cycle = "Heterocycles" if hetero else "Carbocycles"
        for name in ("RingCount", f"Num{kind}Rings", f"Num{kind}{cycle}"):
            kinds[name] += share
        if saturated:
            kinds["NumSaturatedRings"] += share
            kinds[f"NumSaturated{cycle}"] += share
        if hetero:
            kinds["NumHeterocycles"] += share
    return kinds


def _splits(c: MolContext) -> dict[str, np.ndarray]:
    """Candidate (N,) splits by descriptor name (checked against the values later)."""
    crippen = _crippen(c)
    splits = {"MolLogP": crippen[:, 0], "MolMR": crippen[:, 1],
              "TPSA": np.array(list(rdMolDescriptors._CalcTPSAContribs(c.mol))),
              "LabuteASA": _labute(c)}
    splits.update(_vsa_families(c))
    splits.update(_counts(c.mol))
    splits.update(_ring_splits(c.mol))
    return splits


def descriptor_shares(mol: Chem.Mol, values: np.ndarray, kind: str = "rdkit"
                      ) -> tuple[np.ndarray, list[bool]]:
    """Each descriptor's value split over the atoms of ``mol``.

    Args:
        mol: the molecule (N atoms) the descriptors were computed from; a copy gets the
            ring information ``mol_descriptors`` gives the ``rdkit`` set
            (``Chem.FastFindRings``).
        values: (F_desc,) the descriptors as the model sees them (``mol_descriptors``).
        kind: the descriptor set of ``values`` (one of ``DESCRIPTOR_SETS``).

    Returns:
        shares (N, F_desc) whose column k sums to ``values[k]``, and F_desc flags saying
        which columns are a true atom decomposition (the others are even splits).
    """
    n = mol.GetNumAtoms()
    with rdBase.BlockLogs():
        mol = Chem.Mol(mol)
        Chem.FastFindRings(mol)  # the rings mol_descriptors counts
        splits = _splits(MolContext(mol))
        names = descriptor_set_named(kind).names
        shares = np.tile(np.asarray(values, dtype=np.float64) / n, (n, 1))  # (N, F) even
        additive = [False] * len(names)
        for k, name in enumerate(names):
            split = _substructure_split(mol, _pattern(name)) if name in FRAGMENT_SMARTS \
                else splits.get(name)
            if split is None or abs(split.sum() - values[k]) > _TOLERANCE * max(
                    1.0, abs(float(values[k]))):
                continue
            total = split.sum()
            shares[:, k] = split * (values[k] / total) if total else split
            additive[k] = True
    return shares, additive


def additive_descriptors(mol: Chem.Mol, values: np.ndarray, kind: str = "rdkit"
                         ) -> list[str]:
    """Names of the descriptors ``descriptor_shares`` splits over atoms for ``mol``."""
    _, additive = descriptor_shares(mol, values, kind)
    return [name for name, a in zip(descriptor_set_named(kind).names, additive) if a]
