"""RDKit 2D descriptors of a molecule: one (1, F_desc) row of whole-molecule numbers.

The molecule model appends them to its readout and fits its kernel ridge on them.
``mol_to_data(smiles, descriptors=True)`` computes them from the same parsed molecule
as the atom graph, so a SMILES is parsed once.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch
from rdkit import Chem
from torch import Tensor

# Left out: the slowest to compute (git show 1bd1cfd:benchmarks/results/engine.md); Ipc also overflows
# float32 on large molecules. AvgIpc (kept: the models use it) grows as N^4 with N heavy
# atoms (its characteristic polynomial); mol_to_data's size limit bounds it.
_SLOW_DESCRIPTORS = ("qed", "SPS", "Ipc", "BCUT2D_")


class DescriptorTimeout(TimeoutError):
    """The descriptors of a molecule ran past their deadline.

    Attributes:
        descriptor: the name of the last descriptor computed.
    """

    def __init__(self, descriptor: str) -> None:
        self.descriptor = descriptor
        super().__init__(f"descriptors stopped after {descriptor}: past the deadline")


def _descriptor_value(fn: Any, mol: Chem.Mol) -> float:
    """One RDKit descriptor, NaN when RDKit cannot compute it for this molecule."""
    try:
        return float(fn(mol))
    except (RuntimeError, ValueError, ZeroDivisionError, OverflowError):
        return float("nan")


def descriptor_functions() -> list[tuple[str, Any]]:
    """(name, function) of the RDKit 2D descriptors the model uses, in a fixed order."""
    from rdkit.Chem import Descriptors  # imports slowly: only when descriptors are asked for

    return [(name, fn) for name, fn in Descriptors.descList
            if not name.startswith(_SLOW_DESCRIPTORS)]


def descriptor_count() -> int:
    """F_desc of ``mol_descriptors`` with the installed RDKit."""
    return len(descriptor_functions())


def mol_descriptors(mol: Chem.Mol, deadline: float | None = None) -> Tensor:
    """RDKit's 2D descriptors of ``mol``, (1, F_desc) float32.

    Args:
        mol: a sanitised molecule (one fragment, as the model sees it). Its ring
            information is completed in place (``Chem.FastFindRings``): fragments cut
            out of a larger molecule come without it.
        deadline: a ``time.perf_counter()`` value; past it, ``DescriptorTimeout`` is
            raised after the descriptor in progress (one slow call still runs to its
            end: the size limit of ``mol_to_data`` is what bounds a single call).

    Returns:
        (1, F_desc) values; non-finite values, values beyond float32, and descriptors
        RDKit fails to compute for this molecule become 0.

    Raises:
        DescriptorTimeout: past ``deadline``.
    """
    from rdkit import rdBase

    values = []
    with rdBase.BlockLogs():
        Chem.FastFindRings(mol)
        for name, fn in descriptor_functions():
            values.append(_descriptor_value(fn, mol))
            if deadline is not None and time.perf_counter() > deadline:
                raise DescriptorTimeout(name)
    values = np.array(values, dtype=np.float64)
    values = np.where(np.abs(values) < 1e30, values, 0.0)  # inf, nan and float32 overflow
    return torch.from_numpy(np.nan_to_num(values)).float()[None]  # (1, F_desc)

