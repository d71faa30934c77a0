"""Molecules as atom graphs: SMILES or RDKit ``Mol`` -> PyG ``Data``.

Atoms are nodes, hydrogens stay implicit (they appear as the ``num_hs`` atom
feature). Two topologies are offered:

- ``graph="bonds"``: the bond graph. Each bond k gives two directed edges, 2k
  (begin -> end) and 2k + 1 (end -> begin), which share the bond's features.
- ``graph="complete"``: the atom set, every atom attending to every atom. The
  complete edge list is never materialised (the engine computes complete sets
  densely); instead ``dist`` holds the topological (bond count) distance of all
  N * N ordered pairs, self pairs included (distance 0), in target-major order:
  ``dist[i * N + j]`` is the distance from source atom j to target atom i, so an
  attention bias can be gathered as ``bias_table[dist].view(N, N)``. Atoms with
  no path between them (only with ``largest_fragment=False``) get distance N.
  A ``Batch`` concatenates the per-molecule blocks; ``ptr`` delimits them.

Atom features (``ATOM_FEATURE_DIM`` = 59 columns, one-hot groups with an "other"
slot where the value set is open, see ``atom_feature_names()``): element,
degree (bonded heavy neighbours), formal charge, hybridisation, aromaticity,
total hydrogen count, ring membership, chirality. Chirality is the stereocentre's CIP
label (``none``, ``R``, ``S``, or ``other`` for a specified centre without an R/S
label, e.g. ring cis/trans centres): unlike RDKit's CW/CCW chiral tag, which depends
on the order atoms are written in, it is the same for every SMILES of a molecule.

Size and time limits: ``mol_to_data(..., max_heavy_atoms=N)`` refuses a molecule with
more heavy atoms (after fragment selection), and ``time_budget=S`` stops computing its
descriptors once S seconds have passed (checked between two descriptors), both with
``MoleculeSkippedError``, so that a 1,000-atom chain cannot hold up a whole data set.

Isotopes are stripped before featurisation (``setattn.domains.isotopes``: ``[2H]``
becomes an implicit hydrogen), so a deuterated SMILES is featurised as the plain one.

Bond features (``BOND_FEATURE_DIM`` = 14 columns, ``bond_feature_names()``):
bond type, conjugation, ring membership, stereo.

Example:
    >>> data = mol_to_data("CCO")
    >>> data.x.shape, data.edge_index.shape, data.edge_attr.shape
    (torch.Size([3, 59]), torch.Size([2, 4]), torch.Size([4, 14]))
"""

from __future__ import annotations

import re
import time
from typing import Literal

import numpy as np
import torch
from rdkit import Chem, rdBase
from rdkit.Chem import rdchem
from torch_geometric.data import Data

from setattn.chem.descriptors import DescriptorTimeout, mol_descriptors
from setattn.domains.errors import InvalidSmilesError, MoleculeSkippedError, short_smiles
from setattn.domains.fingerprints import count_fingerprint
from setattn.domains.isotopes import strip_isotopes
from setattn.domains.smiles_text import LIMIT_NAMES, check_smiles_text, parse_failure_reason

__all__ = [
    "ATOM_FEATURE_DIM",
    "BOND_FEATURE_DIM",
    "ELEMENTS",
    "InvalidSmilesError",
    "MoleculeSkippedError",
    "atom_feature_names",
    "bond_feature_names",
    "fragment_note",
    "keep_largest_fragment",
    "short_smiles",
    "mol_to_data",
    "parse_smiles",
]


# ----------------------------------------------------------------------------
# Feature vocabulary. Each group is a one-hot block; values outside a group's
# list land in that group's "other" slot. Order of groups = order of columns.
# ----------------------------------------------------------------------------

ELEMENTS: tuple[str, ...] = (
    "H", "Li", "B", "C", "N", "O", "F", "Na", "Mg", "Al", "Si", "P", "S", "Cl", "K",
    "Ca", "Fe", "Co", "Cu", "Zn", "As", "Se", "Br", "Sn", "I", "Pt", "Hg",
)  # fmt: skip
_DEGREES = (0, 1, 2, 3, 4, 5)
_CHARGES = (-2, -1, 0, 1, 2)
_HYBRIDISATIONS = (
    rdchem.HybridizationType.S,
    rdchem.HybridizationType.SP,
    rdchem.HybridizationType.SP2,
    rdchem.HybridizationType.SP3,
    rdchem.HybridizationType.SP3D,
    rdchem.HybridizationType.SP3D2,
)
_NUM_HS = (0, 1, 2, 3)  # the last slot of the group means "4 or more"
_CHIRALITIES = ("none", "R", "S")  # CIP labels; "none": no stereocentre
_BOND_TYPES = (
    rdchem.BondType.SINGLE,
    rdchem.BondType.DOUBLE,
    rdchem.BondType.TRIPLE,
    rdchem.BondType.AROMATIC,
)
_STEREOS = (
    rdchem.BondStereo.STEREONONE,
    rdchem.BondStereo.STEREOANY,
    rdchem.BondStereo.STEREOZ,
    rdchem.BondStereo.STEREOE,
    rdchem.BondStereo.STEREOCIS,
    rdchem.BondStereo.STEREOTRANS,
)


def _group_lookup(values: tuple, offset: int) -> tuple[dict, int]:
    """Map each value to its column, and return the column of the "other" slot."""
    return {v: offset + k for k, v in enumerate(values)}, offset + len(values)


# Atom columns, group by group (each lookup maps a raw RDKit value to a column).
_ELEMENT_COL, _ELEMENT_OTHER = _group_lookup(
    tuple(Chem.GetPeriodicTable().GetAtomicNumber(s) for s in ELEMENTS), 0
)
_DEGREE_COL, _DEGREE_OTHER = _group_lookup(_DEGREES, _ELEMENT_OTHER + 1)
_CHARGE_COL, _CHARGE_OTHER = _group_lookup(_CHARGES, _DEGREE_OTHER + 1)
_HYB_COL, _HYB_OTHER = _group_lookup(_HYBRIDISATIONS, _CHARGE_OTHER + 1)
_AROMATIC_COL = _HYB_OTHER + 1
_NUM_HS_COL, _NUM_HS_MANY = _group_lookup(_NUM_HS, _AROMATIC_COL + 1)
_RING_COL = _NUM_HS_MANY + 1
_CHIRAL_COL, _CHIRAL_OTHER = _group_lookup(_CHIRALITIES, _RING_COL + 1)
ATOM_FEATURE_DIM: int = _CHIRAL_OTHER + 1

# Bond columns.
_BOND_TYPE_COL, _BOND_TYPE_OTHER = _group_lookup(_BOND_TYPES, 0)
_CONJUGATED_COL = _BOND_TYPE_OTHER + 1
_BOND_RING_COL = _CONJUGATED_COL + 1
_STEREO_COL, _STEREO_OTHER = _group_lookup(_STEREOS, _BOND_RING_COL + 1)
BOND_FEATURE_DIM: int = _STEREO_OTHER + 1

# One hot column per one-hot group: an atom has 6 (element, degree, charge,
# hybridisation, H count, chirality), a bond 2 (type, stereo). The binary flags
# (aromatic / conjugated, in ring) are set separately, only when true.
_ONE_HOT_GROUPS_PER_ATOM = 6
_ONE_HOT_GROUPS_PER_BOND = 2


def atom_feature_names() -> list[str]:
    """Name every column of the atom feature matrix ``x``.

    Returns:
        A list of ``ATOM_FEATURE_DIM`` strings such as ``"element=C"``,
        ``"degree=other"``, ``"num_hs=4+"``, ``"aromatic"``.
    """
    names = [f"element={s}" for s in ELEMENTS] + ["element=other"]
    names += [f"degree={d}" for d in _DEGREES] + ["degree=other"]
    names += [f"formal_charge={c:+d}" if c else "formal_charge=0" for c in _CHARGES]
    names += ["formal_charge=other"]
    names += [f"hybridisation={h.name}" for h in _HYBRIDISATIONS] + ["hybridisation=other"]
    names += ["aromatic"]
    names += [f"num_hs={n}" for n in _NUM_HS] + [f"num_hs={len(_NUM_HS)}+"]
    names += ["in_ring"]
    names += [f"chirality={c}" for c in _CHIRALITIES] + ["chirality=other"]
    return names


def bond_feature_names() -> list[str]:
    """Name every column of the bond feature matrix ``edge_attr``.

    Returns:
        A list of ``BOND_FEATURE_DIM`` strings such as ``"bond_type=AROMATIC"``.
    """
    names = [f"bond_type={t.name}" for t in _BOND_TYPES] + ["bond_type=other"]
    names += ["conjugated", "in_ring"]
    names += [f"stereo={s.name}" for s in _STEREOS] + ["stereo=other"]
    return names


# ----------------------------------------------------------------------------
# Parsing
# ----------------------------------------------------------------------------


def parse_smiles(smiles: str, *, row: int | None = None, source: str | None = None,
                 max_heavy_atoms: int | None = None) -> Chem.Mol:
    """Parse a SMILES string into a sanitised RDKit molecule.

    Args:
        smiles: the SMILES string; surrounding whitespace is ignored.
        row: the file row it came from, carried into the error.
        source: the file name it came from, carried into the error.
        max_heavy_atoms: refuse, unread, a SMILES too long for this size limit
            (``check_smiles_text``).

    Returns:
        The RDKit molecule (hydrogens implicit, isotopes set to the plain element:
        ``[2H]OC`` is methanol's two heavy atoms, as the models see it).

    Raises:
        InvalidSmilesError: if the string is empty, holds whitespace inside (RDKit
            would take the rest as a name) or a character RDKit would drop or ignore
            (``check_smiles_text``), or RDKit cannot parse or sanitise it; the message
            carries the SMILES, the row and the reason.
    """
    check_smiles_text(smiles, row=row, source=source, max_heavy_atoms=max_heavy_atoms)
    text = smiles.strip()
    if not text:
        raise InvalidSmilesError(smiles, "empty SMILES", row=row, source=source)
    with rdBase.BlockLogs():  # keep RDKit's parse errors off stderr; we raise instead
        mol = Chem.MolFromSmiles(text)
    if mol is None:
        raise InvalidSmilesError(smiles, parse_failure_reason(text), row=row, source=source)
    if any(c.isspace() for c in text):  # RDKit reads "C CO" as methane named "CO"
        raise InvalidSmilesError(smiles, f"whitespace inside the SMILES (RDKit would read "
                                 f"only {text.split()[0]!r})", row=row, source=source)
    if _MASS.search(text):  # an isotope, "[2H]": the plain element (setattn.domains.isotopes)
        mol = strip_isotopes(mol)
    if mol.GetNumAtoms() == 0:
        raise InvalidSmilesError(smiles, "molecule has no atoms", row=row, source=source)
    return mol


def keep_largest_fragment(mol: Chem.Mol) -> Chem.Mol:
    """Keep the fragment with the most atoms (first one on ties), e.g. drop salt ions.

    The kept atoms stay in their original relative order, so atom k of the result
    is the k-th atom of that fragment in ``mol``.

    Args:
        mol: an RDKit molecule, possibly with several disconnected fragments.

    Returns:
        ``mol`` itself if it has a single fragment, else the largest fragment.
    """
    fragments = Chem.GetMolFrags(mol, asMols=True, sanitizeFrags=False)
    if len(fragments) <= 1:
        return mol
    return max(fragments, key=lambda frag: frag.GetNumAtoms())  # max keeps the first on ties


def fragment_note(smiles: str) -> str:
    """What ``largest_fragment`` does to a SMILES of several fragments, in words ("" for
    one fragment, or a SMILES RDKit cannot read): the rule is to keep the fragment with
    the most atoms (the first on ties), so a salt or a mixture is one molecule."""
    if "." not in smiles:
        return ""
    with rdBase.BlockLogs():
        mol = Chem.MolFromSmiles(smiles.strip(), sanitize=False)
    if mol is None:
        return ""
    fragments = Chem.GetMolFrags(mol)  # atom indices per fragment, in atom order
    if len(fragments) <= 1:
        return ""
    kept = max(range(len(fragments)), key=lambda k: len(fragments[k]))
    pieces = smiles.strip().split(".")
    dropped = ("dropped " + ", ".join(short_smiles(p, 30) for k, p in enumerate(pieces)
                                      if k != kept)
               if len(pieces) == len(fragments) else f"dropped {len(fragments) - 1}")
    atoms = len(fragments[kept])
    return (f"{len(fragments)} fragments: the largest ({atoms} atom{'s' * (atoms != 1)}) is "
            f"featurised, {dropped}")


# ----------------------------------------------------------------------------
# Featurisation
# ----------------------------------------------------------------------------


def _assign_cip_labels(mol: Chem.Mol) -> None:
    """Give the stereocentres of ``mol`` their CIP labels (``_CIPCode``) if RDKit has not
    yet: parsing a SMILES does it already, a hand-built ``Mol`` may not have."""
    if not mol.HasProp("_StereochemDone"):
        Chem.AssignStereochemistry(mol, cleanIt=True, force=True)


def _chirality_column(atom: Chem.Atom) -> int:
    """The chirality column: the CIP label of a stereocentre, never the CW/CCW tag
    (which flips with the order the neighbours are written in)."""
    if atom.GetChiralTag() == rdchem.ChiralType.CHI_UNSPECIFIED:
        return _CHIRAL_COL["none"]
    label = atom.GetProp("_CIPCode") if atom.HasProp("_CIPCode") else ""
    return _CHIRAL_COL.get(label, _CHIRAL_OTHER)


def _atom_features(mol: Chem.Mol, read_chirality: bool = True) -> torch.Tensor:
    """One-hot atom features, shape (N, ATOM_FEATURE_DIM) float32.

    ``read_chirality=False`` skips ``GetChiralTag`` (a slow enum call) when the caller
    knows every tag is unspecified, e.g. a SMILES without ``@``.
    """
    num_atoms = mol.GetNumAtoms()
    unspecified = _CHIRAL_COL["none"]
    if read_chirality:
        _assign_cip_labels(mol)
    cols: list[int] = []  # _ONE_HOT_GROUPS_PER_ATOM hot columns per atom, atom-major
    flag_rows: list[int] = []  # binary flags, set as extra (row, col) pairs
    flag_cols: list[int] = []
    atom_at = mol.GetAtomWithIdx  # indexing is ~2x faster than iterating mol.GetAtoms()
    for idx in range(num_atoms):
        atom = atom_at(idx)
        chirality = (
            _chirality_column(atom) if read_chirality else unspecified
        )
        cols += (
            _ELEMENT_COL.get(atom.GetAtomicNum(), _ELEMENT_OTHER),
            _DEGREE_COL.get(atom.GetDegree(), _DEGREE_OTHER),
            _CHARGE_COL.get(atom.GetFormalCharge(), _CHARGE_OTHER),
            _HYB_COL.get(atom.GetHybridization(), _HYB_OTHER),
            _NUM_HS_COL.get(atom.GetTotalNumHs(), _NUM_HS_MANY),
            chirality,
        )
        if atom.GetIsAromatic():
            flag_rows.append(idx)
            flag_cols.append(_AROMATIC_COL)
        if atom.IsInRing():
            flag_rows.append(idx)
            flag_cols.append(_RING_COL)
    x = np.zeros((num_atoms, ATOM_FEATURE_DIM), dtype=np.float32)
    rows = np.repeat(np.arange(num_atoms), _ONE_HOT_GROUPS_PER_ATOM)  # (6N,)
    x[rows, cols] = 1.0
    x[flag_rows, flag_cols] = 1.0
    return torch.from_numpy(x)


def _bond_graph(mol: Chem.Mol, read_stereo: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Directed bond edges and their features.

    ``read_stereo=False`` skips ``GetStereo`` (a slow enum call) when the caller knows
    no bond has stereo, e.g. a SMILES without ``/`` or ``\\``.

    Returns:
        edge_index (2, 2B) long with row 0 = source, row 1 = target; bond k gives
        edges 2k (begin -> end) and 2k + 1 (end -> begin).
        edge_attr (2B, BOND_FEATURE_DIM) float32.
    """
    num_bonds = mol.GetNumBonds()
    no_stereo = _STEREO_COL[rdchem.BondStereo.STEREONONE]
    ends: list[int] = []  # begin, end per bond
    cols: list[int] = []  # ONE_HOT_GROUPS_PER_BOND hot columns per bond
    flag_rows: list[int] = []
    flag_cols: list[int] = []
    bond_at = mol.GetBondWithIdx
    for k in range(num_bonds):
        bond = bond_at(k)
        ends += (bond.GetBeginAtomIdx(), bond.GetEndAtomIdx())
        cols += (
            _BOND_TYPE_COL.get(bond.GetBondType(), _BOND_TYPE_OTHER),
            _STEREO_COL.get(bond.GetStereo(), _STEREO_OTHER) if read_stereo else no_stereo,
        )
        if bond.GetIsConjugated():
            flag_rows.append(k)
            flag_cols.append(_CONJUGATED_COL)
        if bond.IsInRing():
            flag_rows.append(k)
            flag_cols.append(_BOND_RING_COL)
    per_bond = np.zeros((num_bonds, BOND_FEATURE_DIM), dtype=np.float32)
    per_bond[np.repeat(np.arange(num_bonds), _ONE_HOT_GROUPS_PER_BOND), cols] = 1.0
    per_bond[flag_rows, flag_cols] = 1.0
    pairs = np.asarray(ends, dtype=np.int64).reshape(num_bonds, 2)  # (B, 2) begin, end
    source = pairs.reshape(-1)  # (2B,) begin0, end0, begin1, end1, ...
    target = pairs[:, ::-1].reshape(-1)  # (2B,) end0, begin0, end1, begin1, ...
    edge_index = torch.from_numpy(np.stack([source, target]))  # (2, 2B)
    edge_attr = torch.from_numpy(np.repeat(per_bond, 2, axis=0))  # (2B, F_bond)
    return edge_index, edge_attr


def _distance_flat(mol: Chem.Mol) -> torch.Tensor:
    """Topological distances of all ordered atom pairs, shape (N * N,) long.

    Target-major: entry i * N + j is the bond count between source j and target i.
    Pairs with no path (disconnected fragments) get distance N, longer than any
    real path.
    """
    num_atoms = mol.GetNumAtoms()
    dist = Chem.GetDistanceMatrix(mol)  # (N, N) float64, 1e8 where there is no path
    dist = np.where(dist >= num_atoms, num_atoms, dist).astype(np.int64)
    return torch.from_numpy(dist.reshape(-1))


_MASS = re.compile(r"\[\d")


def _read_input(smiles_or_mol: str | Chem.Mol, row: int | None, source: str | None,
                max_heavy_atoms: int | None = None) -> tuple[Chem.Mol, str, bool, bool, bool]:
    """(mol, smiles, has_dot, has_chirality, has_stereo) of ``mol_to_data``'s input.

    Cheap text checks let the featurisers skip slow RDKit calls whose answer is known:
    no "." means one fragment, no "@" no chiral tags, no "/" or "\\" no double-bond
    stereo. A ``Mol`` is read in full.
    """
    if isinstance(smiles_or_mol, str):
        smiles = smiles_or_mol
        mol = parse_smiles(smiles, row=row, source=source,  # isotopes stripped
                           max_heavy_atoms=max_heavy_atoms)
        return mol, smiles, "." in smiles, "@" in smiles, "/" in smiles or "\\" in smiles
    if isinstance(smiles_or_mol, Chem.Mol):
        if smiles_or_mol.GetNumAtoms() == 0:
            raise ValueError("argument smiles_or_mol: the RDKit Mol has no atoms")
        return smiles_or_mol, Chem.MolToSmiles(smiles_or_mol), True, True, True
    raise TypeError(
        "argument smiles_or_mol must be a SMILES str or an RDKit Mol, "
        f"got {type(smiles_or_mol).__name__}"
    )


def _check_size(mol: Chem.Mol, smiles: str, max_heavy_atoms: int | None, row: int | None,
                source: str | None) -> None:
    """Raise ``MoleculeSkippedError`` for more heavy atoms than ``max_heavy_atoms``."""
    if max_heavy_atoms is not None and mol.GetNumHeavyAtoms() > max_heavy_atoms:
        raise MoleculeSkippedError(
            smiles, f"{mol.GetNumHeavyAtoms()} heavy atoms, above the limit of "
            f"{max_heavy_atoms} ({LIMIT_NAMES})", row=row, source=source)


def mol_to_data(
    smiles_or_mol: str | Chem.Mol,
    *,
    graph: Literal["bonds", "complete"] = "bonds",
    largest_fragment: bool = True,
    descriptors: bool | str | None = False,
    fingerprint: bool = False,
    row: int | None = None,
    source: str | None = None,
    max_heavy_atoms: int | None = None,
    time_budget: float | None = None,
) -> Data:
    """Turn one molecule into a PyG ``Data`` of atoms.

    Args:
        smiles_or_mol: a SMILES string or an RDKit ``Mol`` (used as given:
            explicit hydrogens in a ``Mol`` become atoms).
        graph: ``"bonds"`` for the bond graph, or ``"complete"`` for the atom set
            with pairwise topological distances (see the module docstring).
        largest_fragment: keep only the largest fragment (drops counter-ions of
            salts and solvent molecules).
        descriptors: also compute the RDKit 2D descriptors of the molecule
            (``setattn.chem.descriptors``) from the same parse, as ``descriptors``:
            a set's name ("fast", "lean" or "rdkit"), True for "rdkit"; False or None: none.
        fingerprint: also compute the Morgan count fingerprint (``domains.fingerprints``).
        row: the file row the molecule came from, carried into errors.
        source: the file name it came from, carried into errors.
        max_heavy_atoms: refuse molecules (the kept fragment) with more heavy atoms.
        time_budget: seconds the descriptors may take, checked between two of them.

    Returns:
        ``Data`` with
        ``x`` (N, ATOM_FEATURE_DIM) float32 atom features,
        ``smiles`` the input SMILES (or ``Chem.MolToSmiles`` of a ``Mol`` input),
        and for ``graph="bonds"``:
        ``edge_index`` (2, E) long, E = 2 * bonds, row 0 = source, row 1 = target;
        ``edge_attr`` (E, BOND_FEATURE_DIM) float32;
        for ``graph="complete"``: ``dist`` (N * N,) long, target-major;
        with ``descriptors``: ``descriptors`` (1, F_desc) float32;
        with ``fingerprint``: ``fingerprint`` (1, BITS) uint8 Morgan counts.
        A single atom gives ``edge_index`` of shape (2, 0).

    Raises:
        InvalidSmilesError: for an empty or unparsable SMILES (with ``.smiles``
            and ``.row``); ``MoleculeSkippedError`` (a subclass) above the size limit
            or the time budget.
        ValueError: for an unknown ``graph`` or a ``Mol`` with no atoms.
        TypeError: if ``smiles_or_mol`` is neither a string nor a ``Mol``.
    """
    if graph not in ("bonds", "complete"):
        raise ValueError(f"graph must be 'bonds' or 'complete', got {graph!r}")
    start = time.perf_counter()
    mol, smiles, has_dot, has_chirality, has_stereo = _read_input(smiles_or_mol, row, source,
                                                                  max_heavy_atoms)
    if largest_fragment and has_dot:
        mol = keep_largest_fragment(mol)
    _check_size(mol, smiles, max_heavy_atoms, row, source)
    data = Data(x=_atom_features(mol, has_chirality), smiles=smiles)
    if graph == "bonds":
        data.edge_index, data.edge_attr = _bond_graph(mol, has_stereo)
    else:
        data.dist = _distance_flat(mol)
    if descriptors:  # last: it completes the ring information of ``mol`` in place
        deadline = None if time_budget is None else start + time_budget
        try:
            kind = "rdkit" if descriptors is True else descriptors
            data.descriptors = mol_descriptors(mol, deadline, kind)  # (1, F_desc)
        except DescriptorTimeout as err:
            raise MoleculeSkippedError(
                smiles, f"featurisation took over {time_budget:g} s, the time budget per "
                f"molecule (stopped at the descriptor {err.descriptor})", row=row,
                source=source) from None
    if fingerprint:  # after the descriptors: the ring information they complete
        data.fingerprint = count_fingerprint(mol)  # (1, BITS)
    return data


def rdkit_descriptors(smiles: str, kind: str = "rdkit") -> torch.Tensor:
    """(1, F_desc) float32 descriptors of the set ``kind`` of a SMILES's largest fragment.

    Raises:
        InvalidSmilesError: for an empty or unparsable SMILES.
    """
    return mol_descriptors(keep_largest_fragment(parse_smiles(smiles)), kind=kind)
