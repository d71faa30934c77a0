"""Morgan count fingerprints: the substructures of a molecule, counted.

``count_fingerprint(mol)`` gives RDKit's Morgan fingerprint of radius ``RADIUS`` (ECFP4's
circular environments) as counts folded into ``BITS`` slots: slot j holds how many atom
environments of the molecule hash to j, capped at ``COUNT_CAP`` so that it fits a byte.
The molecule model's fingerprint kernel ridge (``setattn.molprop.kernels``)
compares two molecules by these counts.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import torch
from rdkit import Chem
from rdkit.Chem import rdFingerprintGenerator

__all__ = ["BITS", "COUNT_CAP", "RADIUS", "count_fingerprint", "fingerprint_shares"]

BITS = 2048  # slots of the folded fingerprint
RADIUS = 2  # bonds from the centre atom: ECFP4's environments
COUNT_CAP = 255  # the most occurrences a slot records (uint8)


@lru_cache(maxsize=1)
def _generator() -> rdFingerprintGenerator.FingeprintGenerator64:
    return rdFingerprintGenerator.GetMorganGenerator(radius=RADIUS, fpSize=BITS)


def _ring_info(mol: Chem.Mol) -> None:
    """Give ``mol`` ring information (``Chem.FastFindRings``, in place) if it has none."""
    try:
        mol.GetRingInfo().NumRings()
    except RuntimeError:  # not initialised
        Chem.FastFindRings(mol)


def count_fingerprint(mol: Chem.Mol) -> torch.Tensor:
    """(1, ``BITS``) uint8 Morgan counts of ``mol`` (radius ``RADIUS``, capped at
    ``COUNT_CAP``); all zero for a molecule without atoms. The atom invariants read ring
    membership: a ``mol`` without ring information (an unsanitised fragment) gets it,
    in place, from ``Chem.FastFindRings`` (the same membership as the SSSR)."""
    _ring_info(mol)
    counts = _generator().GetCountFingerprintAsNumPy(mol)  # (BITS,) uint32
    return torch.from_numpy(np.minimum(counts, COUNT_CAP).astype(np.uint8))[None]


def _environment(mol: Chem.Mol, centre: int, radius: int) -> list[int]:
    """The atoms of the circular environment of ``radius`` bonds around ``centre``."""
    if radius == 0:
        return [centre]
    atoms = {centre}
    for bond in Chem.FindAtomEnvironmentOfRadiusN(mol, radius, centre):
        b = mol.GetBondWithIdx(bond)
        atoms.update((b.GetBeginAtomIdx(), b.GetEndAtomIdx()))
    return sorted(atoms)


def fingerprint_shares(mol: Chem.Mol) -> np.ndarray:
    """(N, BITS) how each slot's count splits over the atoms: every environment that
    sets a slot counts one, spread evenly over the atoms of that environment (its
    centre and the atoms within its radius); a capped slot is scaled to its cap. Column
    j sums to ``count_fingerprint(mol)[0, j]``, so that an attribution to the slot's
    count reaches the atoms in proportion (``setattn.explain.integrated_gradients``)."""
    _ring_info(mol)
    output = rdFingerprintGenerator.AdditionalOutput()
    output.AllocateBitInfoMap()
    _generator().GetCountFingerprintAsNumPy(mol, additionalOutput=output)
    shares = np.zeros((mol.GetNumAtoms(), BITS))
    for slot, found in output.GetBitInfoMap().items():
        scale = min(len(found), COUNT_CAP) / len(found)
        for centre, radius in found:
            atoms = _environment(mol, centre, radius)
            shares[atoms, slot] += scale / len(atoms)
    return shares
