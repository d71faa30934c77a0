"""Descriptors split over atoms: how much of each RDKit descriptor each atom carries.

Many of the molecule model's descriptors (``setattn.domains.descriptors``) are sums over
atoms: Crippen logP and molar refractivity, TPSA, Labute's surface area, the VSA bins,
atom and mass counts, substructure counts (``fr_*``) and ring counts. ``descriptor_shares``
returns, for one molecule, an (N, F_desc) matrix whose column k is descriptor k's value
split over the N atoms (hydrogens folded into their heavy atom; a substructure or ring
split evenly over its atoms). A descriptor that is not such a sum (topological indices,
partial-charge extremes, fingerprint densities) has no atom decomposition and is split
evenly over the atoms; ``additive_descriptors`` names the ones that are.

Every column sums to the descriptor's value (checked against RDKit for each molecule:
a split that does not add up to the value RDKit computes falls back to the even split),
so an attribution to descriptor k carried over to atoms by these shares keeps its total.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable

import numpy as np
from rdkit import Chem, rdBase
from rdkit.Chem import rdMolDescriptors, rdPartialCharges

from setattn.domains.descriptors import set_functions

__all__ = ["additive_descriptors", "descriptor_shares"]

_TOLERANCE = 1e-3  # a split that misses the descriptor's value by more than this is refused


def _crippen(mol: Chem.Mol) -> np.ndarray:
    """(N, 2) Crippen logP and MR contributions, each atom's hydrogens folded in."""
    with_h = Chem.AddHs(mol)
    contribs = np.array(rdMolDescriptors._CalcCrippenContribs(with_h))  # (N + H, 2)
    out = contribs[: mol.GetNumAtoms()].copy()  # (N, 2)
    for atom in with_h.GetAtoms():
        if atom.GetIdx() >= mol.GetNumAtoms():
            out[atom.GetNeighbors()[0].GetIdx()] += contribs[atom.GetIdx()]
    return out


def _labute(mol: Chem.Mol) -> np.ndarray:
    """(N,) Labute ASA per atom, the hydrogens' share given by hydrogen count."""
    atoms, h_total = rdMolDescriptors._CalcLabuteASAContribs(mol)
    hs = np.array([a.GetTotalNumHs() for a in mol.GetAtoms()], dtype=np.float64)  # (N,)
    h_share = hs / hs.sum() * h_total if hs.sum() else np.zeros_like(hs)
    return np.array(list(atoms)) + h_share


def _binned(values: np.ndarray, weights: np.ndarray, bins: list[float]) -> np.ndarray:
    """(N, B + 1): atom i puts its weight into the bin its value falls in (RDKit's rule)."""
    out = np.zeros((len(values), len(bins) + 1))
    for i, (v, w) in enumerate(zip(values, weights)):
        out[i, bisect.bisect_right(bins, v)] = w
    return out


def _vsa_families(mol: Chem.Mol) -> dict[str, np.ndarray]:
    """Every VSA bin descriptor as an (N,) split, by family name + bin number."""
    from rdkit.Chem import MolSurf
    from rdkit.Chem.EState import EState_VSA, EStateIndices

    heavy = np.array(rdMolDescriptors._CalcCrippenContribs(mol))  # (N, 2), no hydrogens
    asa = np.array(list(rdMolDescriptors._CalcLabuteASAContribs(mol)[0]))  # (N,)
    estate = np.asarray(EStateIndices(mol))  # (N,)
    charged = Chem.Mol(mol)
    rdPartialCharges.ComputeGasteigerCharges(charged)
    charges = np.array([a.GetDoubleProp("_GasteigerCharge") for a in charged.GetAtoms()])
    families = {
        "SlogP_VSA": _binned(heavy[:, 0], asa, MolSurf.logpBins),
        "SMR_VSA": _binned(heavy[:, 1], asa, MolSurf.mrBins),
        "PEOE_VSA": _binned(np.nan_to_num(charges), asa, MolSurf.chgBins),
        "EState_VSA": _binned(estate, asa, EState_VSA.estateBins),
        "VSA_EState": _binned(asa, estate, EState_VSA.vsaBins),
    }
    return {f"{name}{b + 1}": split[:, b] for name, split in families.items()
            for b in range(split.shape[1])}


def _counts(mol: Chem.Mol) -> dict[str, np.ndarray]:
    """Atom counts and masses as (N,) splits."""
    table = Chem.GetPeriodicTable()
    z = np.array([a.GetAtomicNum() for a in mol.GetAtoms()])  # (N,)
    hs = np.array([a.GetTotalNumHs() for a in mol.GetAtoms()], dtype=np.float64)  # (N,)
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


def _splits(mol: Chem.Mol) -> dict[str, np.ndarray]:
    """Candidate (N,) splits by descriptor name (checked against RDKit's values later)."""
    crippen = _crippen(mol)
    splits = {"MolLogP": crippen[:, 0], "MolMR": crippen[:, 1],
              "TPSA": np.array(list(rdMolDescriptors._CalcTPSAContribs(mol))),
              "LabuteASA": _labute(mol)}
    splits.update(_vsa_families(mol))
    splits.update(_counts(mol))
    splits.update(_ring_splits(mol))
    return splits


def _pattern(fn: Callable) -> Chem.Mol | None:
    """The SMARTS pattern an ``fr_*`` descriptor counts (RDKit keeps it as a default)."""
    defaults = getattr(fn, "__defaults__", None) or ()
    return next((d for d in defaults if isinstance(d, Chem.Mol)), None)


def descriptor_shares(mol: Chem.Mol, values: np.ndarray, kind: str = "rdkit"
                      ) -> tuple[np.ndarray, list[bool]]:
    """Each descriptor's value split over the atoms of ``mol``.

    Args:
        mol: the molecule the descriptors were computed from; a copy gets the ring
            information ``mol_descriptors`` gives it (``Chem.FastFindRings``).
        values: (F_desc,) the descriptors as the model sees them (``mol_descriptors``).
        kind: the descriptor set of ``values`` ("fast", "lean" or "rdkit").

    Returns:
        shares (N, F_desc) whose column k sums to ``values[k]``, and F_desc flags saying
        which columns are a true atom decomposition (the others are even splits).
    """
    n = mol.GetNumAtoms()
    with rdBase.BlockLogs():
        mol = Chem.Mol(mol)
        Chem.FastFindRings(mol)  # the rings mol_descriptors counts
        splits = _splits(mol)
        functions = set_functions(kind)
        shares = np.tile(np.asarray(values, dtype=np.float64) / n, (n, 1))  # (N, F) even
        additive = [False] * len(functions)
        for k, (name, fn) in enumerate(functions):
            pattern = _pattern(fn) if name.startswith("fr_") else None
            split = _substructure_split(mol, pattern) if pattern is not None \
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
    return [name for (name, _), a in zip(set_functions(kind), additive) if a]
