"""The molecule training pipeline's data side: cached, parallel featurisation and fast batches.

``featurize_csv`` turns a molecule CSV into the model's inputs (``mol_to_data`` plus RDKit
descriptors when the model uses them), exactly as ``load_molecule_csv`` followed by
``add_descriptors`` would, with two differences:

- **cache**: the result is saved as plain tensors, lists and strings with ``torch.save``
  and read back with ``torch.load(weights_only=True)`` (tensors and plain containers
  only, never arbitrary objects). The cache file is named by a hash of the CSV's path
  and the featurisation settings (columns, descriptor width, ``FEATURIZER_VERSION``,
  RDKit version) and stores the SHA-256 of the CSV's bytes; a changed file, other
  columns or another featuriser never reuse it (the file is featurised again and the
  entry rewritten). The folder is
  ``$SETATTN_CACHE_DIR`` or ``~/.cache/setattn/features``; ``SETATTN_CACHE_DIR=off``
  turns the cache off.
- **processes**: sets of at least ``PARALLEL_MIN`` molecules are featurised in chunks by
  a process pool (one process per available core, ``SETATTN_FEATURIZE_WORKERS`` to
  override; 0 or 1 means in this process). The order of molecules and failures is the
  file's, whatever the pool does.

``collate_molecules`` batches bond-graph molecules with a handful of tensor
concatenations, the same ``Batch`` fields that PyG's generic collater builds
(``x``, ``edge_index``, ``edge_attr``, ``y``, ``descriptors``, ``batch``, ``ptr``,
``smiles``, ``row``) in a fraction of its time. ``PackedMolecules`` goes further for a
training set that is batched every epoch: it concatenates the molecules once and cuts
each batch out of the big tensors with index arithmetic (about a dozen tensor calls
whatever the batch size), so loading never holds up the model.
"""

from __future__ import annotations

import csv
import hashlib
import json
import multiprocessing
import os
import pickle
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import torch
from rdkit import rdBase
from torch import Tensor
from torch_geometric.data import Batch, Data

from setattn.data import (
    MoleculeSet,
    PathLike,
    _as_list,
    _check_columns,
    _existing_file,
    _open_text,
    _parse_target,
)
from setattn.domains.molecules import InvalidSmilesError, mol_to_data
from setattn.files import atomic_open

__all__ = [
    "FEATURIZER_VERSION",
    "PARALLEL_MIN",
    "PackedMolecules",
    "cache_dir",
    "collate_molecules",
    "featurize_csv",
]

FEATURIZER_VERSION = 1
"""Bump when ``mol_to_data`` or the descriptors change: old cache entries are then unused."""

PARALLEL_MIN = 2000
"""Sets with at least this many rows are featurised by a process pool."""

_CHUNK = 256  # rows per pool task
_FORMAT = "setattn-features-1"


def cache_dir() -> Path | None:
    """The feature cache folder, or None when ``SETATTN_CACHE_DIR=off``."""
    value = os.environ.get("SETATTN_CACHE_DIR", "")
    if value.lower() in ("off", "none", "0"):
        return None
    return Path(value) if value else Path.home() / ".cache" / "setattn" / "features"


def _workers(n_rows: int) -> int:
    """Pool processes for ``n_rows`` rows (0: featurise in this process)."""
    value = os.environ.get("SETATTN_FEATURIZE_WORKERS")
    if value is not None:
        try:
            return max(int(value), 0)
        except ValueError:
            raise ValueError(f"SETATTN_FEATURIZE_WORKERS must be an integer, got {value!r}") \
                from None
    if n_rows < PARALLEL_MIN:
        return 0
    from setattn.distributed import world  # torchrun ranks share the cores

    return max(len(os.sched_getaffinity(0)) // world().size, 1)


def _settings(smiles_column: str, targets: list[str], descriptor_dim: int) -> dict:
    return {"format": _FORMAT, "featurizer": FEATURIZER_VERSION, "rdkit": rdBase.rdkitVersion,
            "smiles_column": smiles_column, "target_columns": targets,
            "descriptor_dim": descriptor_dim, "graph": "bonds", "largest_fragment": True}


def _cache_file(path: Path, settings: dict) -> Path | None:
    folder = cache_dir()
    if folder is None:
        return None
    key = json.dumps({"path": str(path.resolve()), **settings}, sort_keys=True)
    return folder / f"{path.stem}-{hashlib.sha256(key.encode()).hexdigest()[:20]}.pt"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


# ----------------------------------------------------------------------------
# packing: list[Data] <-> plain tensors


def _pack(data: list[Data], descriptor_dim: int) -> dict:
    """Molecules as concatenated tensors with per-molecule offsets (no Python objects)."""
    nodes = torch.tensor([0] + [d.num_nodes for d in data]).cumsum(0)  # (M + 1,)
    edges = torch.tensor([0] + [d.edge_index.shape[1] for d in data]).cumsum(0)  # (M + 1,)
    packed = {
        "x": torch.cat([d.x for d in data]) if data else torch.zeros(0, 0),  # (sum N, F)
        "node_ptr": nodes,
        "edge_index": torch.cat([d.edge_index for d in data], 1) if data
        else torch.zeros(2, 0, dtype=torch.long),  # (2, sum E), local node numbers
        "edge_attr": torch.cat([d.edge_attr for d in data]) if data else torch.zeros(0, 0),
        "edge_ptr": edges,
        "smiles": [d.smiles for d in data],
    }
    if descriptor_dim:
        packed["descriptors"] = torch.cat([d.descriptors for d in data]) if data \
            else torch.zeros(0, descriptor_dim)  # (M, F_desc)
    return packed


def _unpack(packed: dict) -> list[Data]:
    """Inverse of ``_pack`` plus the ``y`` and ``row`` columns; tensors are views."""
    nodes, edges = packed["node_ptr"].tolist(), packed["edge_ptr"].tolist()
    rows = packed["row"].tolist()
    out = []
    for m, smiles in enumerate(packed["smiles"]):
        d = Data(x=packed["x"][nodes[m]:nodes[m + 1]], smiles=smiles,
                 edge_index=packed["edge_index"][:, edges[m]:edges[m + 1]],
                 edge_attr=packed["edge_attr"][edges[m]:edges[m + 1]])
        if "descriptors" in packed:
            d.descriptors = packed["descriptors"][m:m + 1]  # (1, F_desc)
        d.y = packed["y"][m:m + 1]  # (1, T)
        d.row = rows[m]
        out.append(d)
    return out


# ----------------------------------------------------------------------------
# featurisation


def _featurize_chunk(task: tuple[list[int], list[str], str, int]) -> tuple[dict, list]:
    """Featurise rows; returns (packed successes with their rows, failures as lists)."""
    from setattn.train import add_descriptors  # setattn.train imports this module

    rows, smiles, source, descriptor_dim = task
    data, done, failures = [], [], []
    for row, s in zip(rows, smiles):
        try:
            d = mol_to_data(s, row=row, source=source)
        except InvalidSmilesError as err:
            failures.append([row, err.smiles, err.reason])
            continue
        data.append(add_descriptors(d, descriptor_dim))
        done.append(row)
    packed = _pack(data, descriptor_dim)
    packed["row"] = torch.tensor(done, dtype=torch.long)
    return packed, failures


def _init_worker() -> None:
    torch.set_num_threads(1)


def _concat(parts: list[dict], descriptor_dim: int) -> dict:
    """Join packed chunks, shifting their offsets."""
    out = {"smiles": [s for p in parts for s in p["smiles"]],
           "row": torch.cat([p["row"] for p in parts])}
    for key in ("x", "edge_attr", *(("descriptors",) if descriptor_dim else ())):
        nonempty = [p[key] for p in parts if p[key].numel()]
        out[key] = torch.cat(nonempty) if nonempty else parts[0][key]
    out["edge_index"] = torch.cat([p["edge_index"] for p in parts], 1)
    for key in ("node_ptr", "edge_ptr"):
        ptr = [parts[0][key]]
        for p in parts[1:]:
            ptr.append(p[key][1:] + ptr[-1][-1])
        out[key] = torch.cat(ptr)
    return out


def _read_rows(path: Path, smiles_column: str, targets: list[str]):
    """(rows, smiles, (M, T) targets) of every data row; bad targets raise naming the cell."""
    smiles, ys = [], []
    with _open_text(path) as handle:
        reader = csv.DictReader(handle)
        _check_columns(list(reader.fieldnames or []), [smiles_column, *targets], path)
        for row, record in enumerate(reader):
            smiles.append(record[smiles_column] or "")
            ys.append([_parse_target(record[name], path, row, name) for name in targets])
    y = torch.tensor(ys, dtype=torch.float32).reshape(len(ys), len(targets))  # (R, T)
    return list(range(len(smiles))), smiles, y


def _featurize(path: Path, smiles_column: str, targets: list[str], descriptor_dim: int) -> dict:
    rows, smiles, y = _read_rows(path, smiles_column, targets)
    tasks = [(rows[i:i + _CHUNK], smiles[i:i + _CHUNK], path.name, descriptor_dim)
             for i in range(0, len(rows), _CHUNK)] or [([], [], path.name, descriptor_dim)]
    workers = min(_workers(len(rows)), len(tasks))
    if workers > 1:
        methods = multiprocessing.get_all_start_methods()
        ctx = multiprocessing.get_context("fork" if "fork" in methods else None)
        with ProcessPoolExecutor(workers, mp_context=ctx, initializer=_init_worker) as pool:
            results = list(pool.map(_featurize_chunk, tasks))
    else:
        results = [_featurize_chunk(t) for t in tasks]
    packed = _concat([r[0] for r in results], descriptor_dim)
    packed["y"] = y[packed["row"]]  # (M, T)
    packed["failures"] = [f for r in results for f in r[1]]
    return packed


def _load_cached(file: Path, settings: dict, digest: str) -> dict | None:
    """The cached entry if it exists and matches the settings and the CSV's bytes."""
    try:
        packed = torch.load(file, weights_only=True)
    except (OSError, RuntimeError, EOFError, ValueError, pickle.UnpicklingError):
        return None  # missing, half-written by an old version, or not ours: featurise again
    if not isinstance(packed, dict) or packed.get("settings") != settings \
            or packed.get("sha256") != digest:
        return None
    return packed


def featurize_csv(
    path: PathLike,
    smiles_column: str,
    target_columns: str | Sequence[str],
    descriptor_dim: int = 0,
    *,
    use_cache: bool = True,
) -> MoleculeSet:
    """Bond-graph molecules of a CSV with targets (and descriptors), cached and parallel.

    The same result as ``load_molecule_csv(path, smiles_column, target_columns)`` with
    ``add_descriptors(d, descriptor_dim)`` applied to every molecule.

    Args:
        path: the CSV file (``.csv`` or ``.csv.gz``) with a header line.
        smiles_column: the name of the SMILES column.
        target_columns: the name(s) of the numeric target column(s); empty cells are NaN.
        descriptor_dim: F_desc of the RDKit descriptors to attach (0: none).
        use_cache: read and write the feature cache (see the module docstring).

    Returns:
        A ``MoleculeSet``; each ``Data`` has ``x``, ``edge_index``, ``edge_attr``,
        ``smiles``, ``y`` (1, T), ``row`` and, with ``descriptor_dim``,
        ``descriptors`` (1, F_desc).

    Raises:
        FileNotFoundError: if ``path`` does not exist.
        ValueError: if a column is missing or a target cell is not a number (naming the
            row and column), or RDKit computes a different number of descriptors.
    """
    path = _existing_file(path)
    targets = _as_list(target_columns)
    settings = _settings(smiles_column, targets, descriptor_dim)
    file = _cache_file(path, settings) if use_cache else None
    digest = _sha256(path) if file is not None else ""
    packed = _load_cached(file, settings, digest) if file is not None else None
    if packed is None:
        packed = _featurize(path, smiles_column, targets, descriptor_dim)
        if file is not None:
            with atomic_open(file, "wb") as handle:  # readers never see half a file
                torch.save({**packed, "settings": settings, "sha256": digest}, handle)
    failures = [InvalidSmilesError(s, reason, row, path.name)
                for row, s, reason in packed["failures"]]
    return MoleculeSet(_unpack(packed), failures, targets)


# ----------------------------------------------------------------------------
# batching


def collate_molecules(data: Sequence[Data]) -> Batch:
    """A ``Batch`` of bond-graph molecules, built directly from their tensors.

    Args:
        data: molecules with ``x`` (N_m, F), ``edge_index`` (2, E_m), ``edge_attr``
            (E_m, F_bond), ``y`` (1, T), and optionally ``descriptors`` (1, F_desc),
            ``smiles`` and ``row``.

    Returns:
        ``Batch`` with ``x`` (N, F), ``edge_index`` (2, E) shifted to batch numbering,
        ``edge_attr`` (E, F_bond), ``y`` (G, T), ``descriptors`` (G, F_desc),
        ``batch`` (N,), ``ptr`` (G + 1,), ``row`` (G,) and the ``smiles`` list: the fields
        and values of PyG's ``Batch.from_data_list`` for these molecules.
    """
    sizes = torch.tensor([d.num_nodes for d in data])  # (G,)
    n_edges = torch.tensor([d.edge_index.shape[1] for d in data])  # (G,)
    first = data[0]
    return _assemble(
        torch.cat([d.x for d in data]), torch.cat([d.edge_index for d in data], 1),
        torch.cat([d.edge_attr for d in data]), torch.cat([d.y for d in data]), sizes, n_edges,
        descriptors=(torch.cat([d.descriptors for d in data])
                     if "descriptors" in first else None),
        smiles=[d.smiles for d in data] if "smiles" in first else None,
        row=torch.tensor([d.row for d in data]) if "row" in first else None)


def _assemble(x: Tensor, local_edge_index: Tensor, edge_attr: Tensor, y: Tensor,
              sizes: Tensor, n_edges: Tensor, *, descriptors: Tensor | None,
              smiles: list[str] | None, row: Tensor | None) -> Batch:
    """The ``Batch`` of G molecules from their concatenated tensors.

    Args:
        x: (N, F) atoms; local_edge_index: (2, E) with each molecule's own atom numbers;
        edge_attr: (E, F_bond); y: (G, T); sizes: (G,) atoms and n_edges: (G,) edges
        per molecule; descriptors: (G, F_desc); smiles: G strings; row: (G,).
    """
    ptr = torch.cat([sizes.new_zeros(1), sizes.cumsum(0)])  # (G + 1,)
    batch = Batch(
        x=x, edge_attr=edge_attr, y=y, ptr=ptr,
        # local -> batch numbering: shift by the first atom of each edge's molecule
        edge_index=local_edge_index + ptr[:-1].repeat_interleave(n_edges),  # (2, E)
        batch=torch.arange(sizes.numel()).repeat_interleave(sizes),  # (N,)
    )
    if descriptors is not None:
        batch.descriptors = descriptors
    if smiles is not None:
        batch.smiles = smiles
    if row is not None:
        batch.row = row
    batch._num_graphs = sizes.numel()
    return batch


class PackedMolecules:
    """A molecule list concatenated once; ``batch(indices)`` cuts batches out of it.

    Use as ``DataLoader(range(len(packed)), batch_sampler=..., collate_fn=packed.batch)``.

    Args:
        data: bond-graph molecules as for ``collate_molecules`` (all with or all
            without ``descriptors``).
    """

    def __init__(self, data: Sequence[Data]) -> None:
        data = list(data)
        if not data:
            raise ValueError("PackedMolecules needs at least one molecule")
        descriptor_dim = data[0].descriptors.shape[1] if "descriptors" in data[0] else 0
        self._packed = _pack(data, descriptor_dim)
        self._y = torch.cat([d.y for d in data])  # (M, T)
        self._row = torch.tensor([d.row for d in data]) if "row" in data[0] else None  # (M,)
        ptr = self._packed["node_ptr"]
        eptr = self._packed["edge_ptr"]
        self._nodes = ptr[1:] - ptr[:-1]  # (M,) atoms per molecule
        self._edges = eptr[1:] - eptr[:-1]  # (M,) edges per molecule

    def __len__(self) -> int:
        return self._y.shape[0]

    def batch(self, indices: Sequence[int]) -> Batch:
        """The ``Batch`` of molecules ``indices``, equal to ``collate_molecules`` of them."""
        p = self._packed
        idx = torch.as_tensor(indices, dtype=torch.long)  # (G,)
        sizes, n_edges = self._nodes[idx], self._edges[idx]  # (G,), (G,)
        ptr = torch.cat([sizes.new_zeros(1), sizes.cumsum(0)])  # (G + 1,) in the batch
        eptr = torch.cat([n_edges.new_zeros(1), n_edges.cumsum(0)])  # (G + 1,)
        # node / edge k of the batch is node / edge (start of its molecule in the store
        # - start in the batch + k)
        nodes = (p["node_ptr"][idx] - ptr[:-1]).repeat_interleave(sizes) \
            + torch.arange(int(ptr[-1]))  # (N,)
        edges = (p["edge_ptr"][idx] - eptr[:-1]).repeat_interleave(n_edges) \
            + torch.arange(int(eptr[-1]))  # (E,)
        return _assemble(
            p["x"].index_select(0, nodes), p["edge_index"].index_select(1, edges),
            p["edge_attr"].index_select(0, edges), self._y.index_select(0, idx), sizes, n_edges,
            descriptors=p["descriptors"].index_select(0, idx) if "descriptors" in p else None,
            smiles=[p["smiles"][i] for i in idx.tolist()],
            row=self._row.index_select(0, idx) if self._row is not None else None)
