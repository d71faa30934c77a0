"""RDKit 2D descriptors of a molecule: one (1, F_desc) row of whole-molecule numbers.

The molecule model appends them to its readout and fits its kernel ridge on them.
``mol_to_data(smiles, descriptors=kind)`` computes them from the same parsed molecule
as the atom graph, so a SMILES is parsed once. Three sets (``DESCRIPTOR_SETS``):
``rdkit``, RDKit's 2D descriptors (``descriptor_functions``); ``lean``, those less the
slow path and polynomial indices; ``fast``, also less the substructure counts
(``descriptor_lean``). A model records only its width F_desc; ``descriptor_set`` tells
the set back from it.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from rdkit import Chem, rdBase
from torch import Tensor

from setattn.domains.descriptor_fast import (
    atom_terms,
    balaban_j,
    bertz_ct,
    chi0_chi1,
    estate_indices,
    morgan_densities,
)
from setattn.domains.descriptor_lean import kept, lean_functions, surface_functions

# Left out: the slowest to compute (QED, SPS, the BCUT2D set); Ipc also overflows float32
# on large molecules. AvgIpc (kept: the models use it) grows as N^4 with N heavy
# atoms (its characteristic polynomial); mol_to_data's size limit bounds it.
_SLOW_DESCRIPTORS = ("qed", "SPS", "Ipc", "BCUT2D_")

DESCRIPTOR_SETS = ("fast", "lean", "rdkit")
"""The descriptor sets, from the smallest."""


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


@functools.cache
def descriptor_functions() -> tuple[tuple[str, Any], ...]:
    """(name, function) of the RDKit 2D descriptors the model uses, in a fixed order.

    RDKit's public per-descriptor functions: ``mol_descriptors`` computes the same values
    faster (``_fast_functions``), and tests compare the two.
    """
    from rdkit.Chem import Descriptors  # imports slowly: only when descriptors are asked for

    return tuple((name, fn) for name, fn in Descriptors.descList
                 if not name.startswith(_SLOW_DESCRIPTORS))


@functools.cache
def set_functions(kind: str = "rdkit") -> tuple[tuple[str, Any], ...]:
    """(name, RDKit function) of the descriptor set ``kind``, in a fixed order.

    Raises:
        ValueError: for a set not in ``DESCRIPTOR_SETS``.
    """
    if kind not in DESCRIPTOR_SETS:
        raise ValueError(f"descriptor set must be one of {DESCRIPTOR_SETS}, got {kind!r}")
    functions = descriptor_functions()
    return functions if kind == "rdkit" else tuple(f for f in functions if kept(f[0], kind))


def descriptor_count(kind: str = "rdkit") -> int:
    """F_desc of ``mol_descriptors(..., kind=kind)`` with the installed RDKit."""
    return len(set_functions(kind))


def descriptor_set(dim: int) -> str | None:
    """The descriptor set a model of descriptor width ``dim`` was trained with (None
    for 0).

    Raises:
        ValueError: if no set of the installed RDKit has ``dim`` descriptors (a model
            from another RDKit version).
    """
    if not dim:
        return None
    for kind in DESCRIPTOR_SETS:
        if descriptor_count(kind) == dim:
            return kind
    counts = ", ".join(f"{k} {descriptor_count(k)}" for k in DESCRIPTOR_SETS)
    raise ValueError(f"the model expects {dim} descriptors but this RDKit "
                     f"({rdBase.rdkitVersion}) computes {counts}; retrain with this "
                     "RDKit version")


def _once(fn: Callable[[Chem.Mol], Any]) -> Callable[[Chem.Mol], Any]:
    """``fn`` computed on its first call only (one molecule's shared intermediate)."""
    result: list = []

    def call(mol: Chem.Mol) -> Any:
        if not result:
            result.append(fn(mol))
        return result[0]
    return call


def _fast_functions(mol: Chem.Mol) -> dict[str, Callable[[Chem.Mol], Any]]:
    """Replacements for the slowest RDKit descriptor functions by name, from
    intermediate results computed once for ``mol`` (``descriptor_fast``,
    ``descriptor_lean.surface_functions``); each gives what RDKit's function gives.

    Sets ``mol._eStateIndices``, where RDKit's EState_VSA and VSA_EState functions read
    the indices instead of computing them again.
    """
    intrinsic, valence, radicals, degrees = atom_terms(mol)
    chi0, chi1 = chi0_chi1(mol, degrees)
    estate = estate_indices(mol, intrinsic)  # (N,)
    mol._eStateIndices = estate  # RDKit's own cache of EStateIndices
    magnitudes = np.abs(estate)  # (N,)
    morgan = _once(morgan_densities)
    fast: dict[str, Callable[[Chem.Mol], Any]] = {
        "MaxAbsEStateIndex": lambda m: magnitudes.max(), "MaxEStateIndex": lambda m: estate.max(),
        "MinAbsEStateIndex": lambda m: magnitudes.min(), "MinEStateIndex": lambda m: estate.min(),
        "NumValenceElectrons": lambda m: valence, "NumRadicalElectrons": lambda m: radicals,
        "BertzCT": bertz_ct, "BalabanJ": balaban_j, "Chi0": lambda m: chi0,
        "Chi1": lambda m: chi1,
    }
    fast.update({f"FpDensityMorgan{r}": (lambda m, r=r: morgan(m)[r - 1]) for r in (1, 2, 3)})
    fast.update(surface_functions(mol)[0])  # Crippen, Labute, Gasteiger: once each
    return fast


def _find_rings(mol: Chem.Mol, kind: str) -> None:
    """Complete the ring information of ``mol`` where it has none (fragments cut out of
    a larger molecule). The ``rdkit`` set runs ``Chem.FastFindRings`` (its values were
    fixed with it: RDKit's slower functions perceive the SSSR again before the ring
    counts); the other sets perceive the SSSR themselves, as parsing a SMILES does."""
    if kind == "rdkit":
        Chem.FastFindRings(mol)
        return
    try:
        mol.GetRingInfo().NumRings()
    except RuntimeError:  # not initialised
        Chem.GetSymmSSSR(mol)


def mol_descriptors(mol: Chem.Mol, deadline: float | None = None, kind: str = "rdkit"
                    ) -> Tensor:
    """RDKit's 2D descriptors of ``mol`` in the set ``kind``, (1, F_desc) float32.

    The values of RDKit's functions (``set_functions``); the slowest of them are
    computed from intermediate results shared between descriptors
    (``_fast_functions``; ``descriptor_lean.lean_functions`` for the other sets).

    Args:
        mol: a sanitised molecule (one fragment, as the model sees it). Its ring
            information is completed in place (``Chem.FastFindRings``): fragments cut
            out of a larger molecule come without it.
        deadline: a ``time.perf_counter()`` value; past it, ``DescriptorTimeout`` is
            raised after the descriptor in progress (one slow call still runs to its
            end: the size limit of ``mol_to_data`` is what bounds a single call).
        kind: the descriptor set, one of ``DESCRIPTOR_SETS``.

    Returns:
        (1, F_desc) values; non-finite values, values beyond float32, and descriptors
        RDKit fails to compute for this molecule become 0.

    Raises:
        DescriptorTimeout: past ``deadline``.
        ValueError: for an unknown ``kind``.
    """
    functions = set_functions(kind)
    shared = _fast_functions if kind == "rdkit" else lean_functions
    values = []
    with rdBase.BlockLogs():
        _find_rings(mol, kind)
        fast = shared(mol) if mol.GetNumAtoms() else {}
        for name, fn in functions:
            values.append(_descriptor_value(fast.get(name, fn), mol))
            if deadline is not None and time.perf_counter() > deadline:
                raise DescriptorTimeout(name)
    return _as_row(values)


def _as_row(values: list[float]) -> Tensor:
    """(1, F_desc) float32; non-finite values and float32 overflows become 0."""
    values = np.array(values, dtype=np.float64)
    values = np.where(np.abs(values) < 1e30, values, 0.0)  # inf, nan and float32 overflow
    return torch.from_numpy(np.nan_to_num(values)).float()[None]  # (1, F_desc)

