"""RDKit 2D descriptors of a molecule in named sets: one (1, F_desc) row of numbers.

The molecule model appends them to its readout and fits its kernel ridge on them;
``mol_to_data(smiles, descriptors=name)`` computes them from the same parsed molecule as
the atom graph. The sets (``DESCRIPTOR_SETS``, ``descriptor_set_named``), each a fixed
list in RDKit's order:

- ``rdkit`` (the default): RDKit's 2D descriptors (``Descriptors.descList``) less the
  slowest (``SLOW_DESCRIPTORS``);
- ``lean``: those less the path and polynomial indices, the Morgan densities and three
  SMARTS-based counts (``GRAPH_INDICES``);
- ``fast``: also less the 85 ``fr_*`` substructure counts.

The values are those of RDKit's functions: the slowest are computed from intermediate
results shared between descriptors (``setattn.chem.values``, ``setattn.chem.context``),
the rest by RDKit's own functions. A model records only its width F_desc;
``descriptor_set`` tells the set back from it.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch
from rdkit import Chem, rdBase
from torch import Tensor

from setattn.chem.context import MolContext
from setattn.chem.values import SHARED_VALUES

__all__ = ["DESCRIPTOR_SETS", "GRAPH_INDICES", "SLOW_DESCRIPTORS", "DescriptorSet",
           "DescriptorTimeout", "descriptor_count", "descriptor_functions", "descriptor_set",
           "descriptor_set_named", "descriptor_values", "mol_descriptors", "set_functions"]

# The slowest to compute (QED, SPS, the BCUT2D set); Ipc also overflows float32 on large
# molecules. AvgIpc (kept: the models use it) grows as N^4 with N heavy atoms (its
# characteristic polynomial); mol_to_data's size limit bounds it.
SLOW_DESCRIPTORS = ("qed", "SPS", "Ipc", "BCUT2D_")
"""Name prefixes of the RDKit descriptors no set holds."""

GRAPH_INDICES = ("AvgIpc", "BalabanJ", "BertzCT", "Chi2", "Chi3", "Chi4", "Kappa2", "Kappa3",
                 "Phi", "FpDensityMorgan", "NumRotatableBonds", "NumHAcceptors",
                 "NumBridgeheadAtoms")
"""Name prefixes of the slow path, polynomial and SMARTS-based indices."""

Function = Callable[[Chem.Mol], Any]


class DescriptorTimeout(TimeoutError):
    """The descriptors of a molecule ran past their deadline.

    Attributes:
        descriptor: the name of the last descriptor computed.
    """

    def __init__(self, descriptor: str) -> None:
        self.descriptor = descriptor
        super().__init__(f"descriptors stopped after {descriptor}: past the deadline")


@functools.cache
def descriptor_functions() -> tuple[tuple[str, Function], ...]:
    """(name, RDKit function) of the ``rdkit`` set: RDKit's 2D descriptors less
    ``SLOW_DESCRIPTORS``, in RDKit's order (RDKit's public per-descriptor functions,
    the reference ``mol_descriptors`` is tested against)."""
    from rdkit.Chem import Descriptors  # imports slowly: only when descriptors are asked for

    return tuple((name, fn) for name, fn in Descriptors.descList
                 if not name.startswith(SLOW_DESCRIPTORS))


@dataclass(frozen=True)
class DescriptorSet:
    """A named descriptor set: the ``rdkit`` set less some families.

    Attributes:
        name: what ``--descriptors`` and ``mol_to_data(descriptors=...)`` call it.
        left_out: name prefixes of the ``rdkit`` descriptors the set leaves out.
        rings: how a molecule without ring information (a fragment cut out of a larger
            one) gets it: ``"fast"``, ``Chem.FastFindRings`` (the ``rdkit`` set's values
            were fixed with it: RDKit's slower functions perceive the SSSR again before
            the ring counts); ``"sssr"``, ``Chem.GetSymmSSSR``, as parsing a SMILES does.
    """

    name: str
    left_out: tuple[str, ...]
    rings: Literal["fast", "sssr"]

    @functools.cached_property
    def functions(self) -> tuple[tuple[str, Function], ...]:
        """(name, RDKit function) of the set's descriptors, in RDKit's order."""
        return tuple(f for f in descriptor_functions() if not f[0].startswith(self.left_out))

    @property
    def names(self) -> list[str]:
        """The F_desc descriptor names, in order."""
        return [name for name, _ in self.functions]

    @property
    def width(self) -> int:
        """F_desc with the installed RDKit."""
        return len(self.functions)

    def find_rings(self, mol: Chem.Mol) -> None:
        """Complete the ring information of ``mol`` in place, as ``rings`` says."""
        if self.rings == "fast":
            Chem.FastFindRings(mol)
            return
        try:
            mol.GetRingInfo().NumRings()
        except RuntimeError:  # not initialised
            Chem.GetSymmSSSR(mol)


_SETS = {s.name: s for s in (DescriptorSet("fast", ("fr_", *GRAPH_INDICES), "sssr"),
                             DescriptorSet("lean", GRAPH_INDICES, "sssr"),
                             DescriptorSet("rdkit", (), "fast"))}

DESCRIPTOR_SETS = tuple(_SETS)
"""The names of the descriptor sets, from the smallest."""


def descriptor_set_named(name: str) -> DescriptorSet:
    """The descriptor set called ``name``.

    Raises:
        ValueError: for a name not in ``DESCRIPTOR_SETS``.
    """
    if name not in _SETS:
        raise ValueError(f"descriptor set must be one of {DESCRIPTOR_SETS}, got {name!r}")
    return _SETS[name]


def set_functions(kind: str = "rdkit") -> tuple[tuple[str, Function], ...]:
    """(name, RDKit function) of the descriptor set ``kind``, in a fixed order.

    Raises:
        ValueError: for a set not in ``DESCRIPTOR_SETS``.
    """
    return descriptor_set_named(kind).functions


def descriptor_count(kind: str = "rdkit") -> int:
    """F_desc of ``mol_descriptors(..., kind=kind)`` with the installed RDKit."""
    return descriptor_set_named(kind).width


def descriptor_set(dim: int) -> str | None:
    """The descriptor set a model of descriptor width ``dim`` was trained with (None
    for 0): a saved model records only its width.

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


def _value(fn: Callable[[Any], Any], of: Chem.Mol | MolContext) -> float:
    """One descriptor, ``fn(of)``, NaN when RDKit cannot compute it for this molecule."""
    try:
        return float(fn(of))
    except (RuntimeError, ValueError, ZeroDivisionError, OverflowError):
        return float("nan")


def descriptor_values(mol: Chem.Mol, kind: str = "rdkit", deadline: float | None = None
                      ) -> np.ndarray:
    """(F_desc,) float64 values of the set ``kind``, NaN where RDKit fails; the
    ring information of ``mol`` is completed in place (``DescriptorSet.find_rings``).

    Raises:
        DescriptorTimeout: past ``deadline`` (a ``time.perf_counter()`` value).
        ValueError: for an unknown ``kind``.
    """
    descriptors = descriptor_set_named(kind)
    values = []
    with rdBase.BlockLogs():
        descriptors.find_rings(mol)
        context, shared_values = MolContext(mol), SHARED_VALUES if mol.GetNumAtoms() else {}
        for name, fn in descriptors.functions:
            shared = shared_values.get(name)
            values.append(_value(fn, mol) if shared is None else _value(shared, context))
            if deadline is not None and time.perf_counter() > deadline:
                raise DescriptorTimeout(name)
    return np.array(values, dtype=np.float64)


def _as_row(values: np.ndarray) -> Tensor:
    """(1, F_desc) float32 of (F_desc,) values; non-finite values and float32 overflows
    become 0."""
    values = np.where(np.abs(values) < 1e30, values, 0.0)  # inf, nan and float32 overflow
    return torch.from_numpy(np.nan_to_num(values)).float()[None]  # (1, F_desc)


def mol_descriptors(mol: Chem.Mol, deadline: float | None = None, kind: str = "rdkit"
                    ) -> Tensor:
    """RDKit's 2D descriptors of ``mol`` in the set ``kind``, (1, F_desc) float32.

    Args:
        mol: a sanitised molecule (one fragment, as the model sees it). Its ring
            information is completed in place (``DescriptorSet.find_rings``): fragments
            cut out of a larger molecule come without it; its atoms get RDKit's
            Gasteiger charge properties.
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
    return _as_row(descriptor_values(mol, kind, deadline))
