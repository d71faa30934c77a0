"""Planetoid citation graphs (Cora, CiteSeer, PubMed) from their raw files or a ``.npz``.

- ``load_planetoid(root, name)``: a Planetoid citation graph, from the raw
  ``ind.<name>.*`` files or from a ``<name>.npz`` written by ``convert_planetoid``.
- ``convert_planetoid(raw_root, name, out_path)``: the raw files once into that ``.npz``.

Nothing here unpickles: the raw files are pickles, read as plain data by
``setattn.datasets.safe_pickle``, and the ``.npz`` is read with ``allow_pickle=False``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch_geometric.data import Data

from setattn.datasets.files import PathLike
from setattn.datasets.safe_pickle import _decode_pickle

__all__ = ["convert_planetoid", "load_planetoid"]


def _to_dense(matrix: Any) -> np.ndarray:
    """A decoded CSR/CSC matrix (or a dense array) as a dense float32 array."""
    if isinstance(matrix, np.ndarray):
        return matrix.astype(np.float32)
    rows, cols = matrix["shape"]
    dense = np.zeros((rows, cols), dtype=np.float32)
    counts = np.diff(matrix["indptr"])
    major = np.repeat(np.arange(len(counts)), counts)  # row (csr) or column (csc) per entry
    if matrix["format"] == "csr":
        dense[major, matrix["indices"]] = matrix["data"]
    else:
        dense[matrix["indices"], major] = matrix["data"]
    return dense


def _read_planetoid_raw(root: Path, name: str) -> dict[str, np.ndarray]:
    """Assemble a Planetoid set from its raw ``ind.<name>.*`` files.

    Follows the original loader (Kipf & Welling's ``load_data``, also PyG's):
    test rows are put back at their ``test.index`` positions; gaps in the test
    range (isolated nodes of Citeseer) get zero features and label 0; train =
    the first len(y) nodes, val = the next 500 (fewer if allx is shorter), test
    = the test indices.
    """
    parts = {}
    for part in ("x", "y", "tx", "ty", "allx", "ally", "graph"):
        file = root / f"ind.{name}.{part}"
        with open(file, "rb") as handle:
            parts[part] = _decode_pickle(handle, file.name)
    test_file = root / f"ind.{name}.test.index"
    test_index = np.array(test_file.read_text().split(), dtype=np.int64)

    allx, tx = _to_dense(parts["allx"]), _to_dense(parts["tx"])
    ally, ty = np.asarray(parts["ally"]), np.asarray(parts["ty"])
    num_train = _to_dense(parts["x"]).shape[0]
    num_val = min(500, allx.shape[0] - num_train)  # validation nodes come from allx
    test_sorted = np.sort(test_index)
    low, high = int(test_sorted[0]), int(test_sorted[-1])
    tx_full = np.zeros((high - low + 1, tx.shape[1]), dtype=np.float32)
    ty_full = np.zeros((high - low + 1, ty.shape[1]), dtype=ty.dtype)
    tx_full[test_sorted - low] = tx
    ty_full[test_sorted - low] = ty
    x = np.concatenate([allx, tx_full])  # (N, F)
    labels = np.concatenate([ally, ty_full])  # (N, C)
    # The test rows are stored in test.index order; move them to their node ids.
    x[test_index] = x[test_sorted]
    labels[test_index] = labels[test_sorted]

    num_nodes = x.shape[0]
    graph = parts["graph"]
    source = np.array([node for node, nbrs in graph.items() for _ in nbrs], dtype=np.int64)
    target = np.array([n for nbrs in graph.values() for n in nbrs], dtype=np.int64)
    return {
        "x": x,
        "y": labels.argmax(axis=1).astype(np.int64),
        "edge_index": _undirected_simple(source, target, num_nodes),
        "train_index": np.arange(num_train, dtype=np.int64),
        "val_index": np.arange(num_train, num_train + num_val, dtype=np.int64),
        "test_index": test_sorted,
    }


def _undirected_simple(source: np.ndarray, target: np.ndarray, num_nodes: int) -> np.ndarray:
    """Both directions of every edge, no self loops, no duplicates.

    Returns:
        (2, E) int64, row 0 = source, row 1 = target, sorted by target then
        source (as PyG's Planetoid reader, and as segment softmax likes it).
    """
    keep = source != target
    both_s = np.concatenate([source[keep], target[keep]])
    both_t = np.concatenate([target[keep], source[keep]])
    keys = np.unique(both_t * num_nodes + both_s)  # sorted, deduplicated
    return np.stack([keys % num_nodes, keys // num_nodes])


def _save_planetoid_npz(arrays: dict[str, np.ndarray], out_path: Path) -> None:
    """Write a Planetoid set compactly: features as COO (they are sparse), int32 ids."""
    x = arrays["x"]
    rows, cols = np.nonzero(x)
    np.savez_compressed(
        out_path,
        x_shape=np.array(x.shape, dtype=np.int64),
        x_index=np.stack([rows, cols]).astype(np.int32),  # (2, nnz)
        x_value=x[rows, cols].astype(np.float32),  # (nnz,)
        y=arrays["y"].astype(np.int64),
        edge_index=arrays["edge_index"].astype(np.int32),
        train_index=arrays["train_index"],
        val_index=arrays["val_index"],
        test_index=arrays["test_index"],
    )


def _load_planetoid_npz(path: Path) -> dict[str, np.ndarray]:
    """Read a file written by ``_save_planetoid_npz`` (no pickle allowed)."""
    with np.load(path, allow_pickle=False) as npz:
        x = np.zeros(tuple(npz["x_shape"]), dtype=np.float32)
        x_index = npz["x_index"].astype(np.int64)
        x[x_index[0], x_index[1]] = npz["x_value"]
        return {
            "x": x,
            "y": npz["y"],
            "edge_index": npz["edge_index"].astype(np.int64),
            "train_index": npz["train_index"],
            "val_index": npz["val_index"],
            "test_index": npz["test_index"],
        }


def _index_mask(index: np.ndarray, num_nodes: int) -> torch.Tensor:
    """(N,) bool mask, True at ``index``."""
    mask = torch.zeros(num_nodes, dtype=torch.bool)
    mask[torch.from_numpy(index)] = True
    return mask


def load_planetoid(root: PathLike, name: str) -> Data:
    """Load a Planetoid citation graph (Cora, CiteSeer, PubMed, ...).

    Looks in ``root`` for ``<name>.npz`` (written by ``convert_planetoid``) and
    otherwise for the raw ``ind.<name>.{x,y,tx,ty,allx,ally,graph,test.index}``
    files. The raw files are pickles; they are decoded as data only, never
    unpickled (see the module docstring).

    Args:
        root: the folder holding the files.
        name: the set's name, e.g. ``"cora"`` (case-insensitive).

    Returns:
        ``Data`` with ``x`` (N, F) float32 features, ``y`` (N,) long classes,
        ``edge_index`` (2, E) long (both directions, no self loops, sorted by
        target then source), and ``train_mask`` / ``val_mask`` / ``test_mask``
        (N,) bool for the standard split.

    Raises:
        FileNotFoundError: if neither form is in ``root`` (naming what was sought).
    """
    root = Path(root)
    name = name.lower()
    npz_path = root / f"{name}.npz"
    if npz_path.is_file():
        arrays = _load_planetoid_npz(npz_path)
    elif (root / f"ind.{name}.x").is_file():
        arrays = _read_planetoid_raw(root, name)
    else:
        raise FileNotFoundError(
            f"argument root: neither {npz_path.name} nor ind.{name}.* files in {str(root)!r}"
        )
    num_nodes = arrays["x"].shape[0]
    return Data(
        x=torch.from_numpy(arrays["x"]),
        y=torch.from_numpy(arrays["y"]),
        edge_index=torch.from_numpy(arrays["edge_index"]),
        train_mask=_index_mask(arrays["train_index"], num_nodes),
        val_mask=_index_mask(arrays["val_index"], num_nodes),
        test_mask=_index_mask(arrays["test_index"], num_nodes),
    )


def convert_planetoid(raw_root: PathLike, name: str, out_path: PathLike) -> Path:
    """Convert raw Planetoid files once into a compact, pickle-free ``.npz``.

    Args:
        raw_root: the folder with ``ind.<name>.*``.
        name: the set's name, e.g. ``"cora"``.
        out_path: where to write the ``.npz``; ``load_planetoid`` finds it when
            it is named ``<name>.npz``.

    Returns:
        The path written.
    """
    out_path = Path(out_path)
    _save_planetoid_npz(_read_planetoid_raw(Path(raw_root), name.lower()), out_path)
    return out_path
