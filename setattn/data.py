"""Loaders for the data sets in ``datasets/`` and for your own files in the same formats.

Generic loaders (your files):

- ``load_molecule_csv(path, smiles_column, target_columns)``: one ``Data`` per
  parsable molecule, missing labels as NaN, plus the rows that failed and why.
- ``load_molecule_sdf(path, target_properties)``: the same for an SD file.
- ``load_planetoid(root, name)``: a Planetoid citation graph, from the raw
  ``ind.<name>.*`` files or from a ``<name>.npz`` written by ``convert_planetoid``.
- ``load_text_csv(path, text_column, label_column)``: texts and class indices.
- ``load_image_csv(path, height, width)``: images (pixels then label, one a row).

Named shortcuts for the bundled sets (files under ``datasets/``, see its README):
``load_freesolv``, ``load_esol``, ``load_tox21``, ``load_solubility``, ``load_cora``,
``load_mr``, ``load_digits``, ``load_mnist5k``.

Nothing here unpickles: the raw Planetoid files are pickles, and they are read by
``_decode_pickle``, which walks the opcodes with ``pickletools`` and rebuilds only
plain data (numbers, strings, lists, dicts, NumPy arrays, SciPy CSR/CSC matrices
as their arrays). It never imports a module or calls anything named in the file.
"""

from __future__ import annotations

import csv
import gzip
import io
import math
import pickletools
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any, Literal, NamedTuple

import numpy as np
import torch
from rdkit import Chem, rdBase
from torch_geometric.data import Data

from setattn.domains.molecules import InvalidSmilesError, mol_to_data

__all__ = [
    "DATASETS_DIR",
    "TOX21_TASKS",
    "ImageSet",
    "MoleculeSet",
    "TextSet",
    "convert_planetoid",
    "load_cora",
    "load_digits",
    "load_esol",
    "load_freesolv",
    "load_image_csv",
    "load_mnist5k",
    "load_molecule_csv",
    "load_molecule_sdf",
    "load_mr",
    "load_planetoid",
    "load_solubility",
    "load_text_csv",
    "load_tox21",
]

DATASETS_DIR: Path = Path(__file__).resolve().parent.parent / "datasets"
"""The repository's ``datasets/`` folder, where the named shortcuts look by default."""

TOX21_TASKS: tuple[str, ...] = (
    "NR-AR", "NR-AR-LBD", "NR-AhR", "NR-Aromatase", "NR-ER", "NR-ER-LBD",
    "NR-PPAR-gamma", "SR-ARE", "SR-ATAD5", "SR-HSE", "SR-MMP", "SR-p53",
)  # fmt: skip

PathLike = str | Path


class MoleculeSet(NamedTuple):
    """Molecules read from a file.

    Attributes:
        data: one ``Data`` per parsed molecule (see ``mol_to_data``), with
            ``y`` (1, T) float32 targets (NaN where the label is missing) and
            ``row`` the 0-based data row of the file (header excluded).
        failures: one ``InvalidSmilesError`` per row that could not be parsed,
            each carrying ``.row``, ``.smiles`` and ``.reason``.
        target_columns: the T target names, in the order of ``y``'s columns.
    """

    data: list[Data]
    failures: list[InvalidSmilesError]
    target_columns: list[str]


class TextSet(NamedTuple):
    """Texts with class labels.

    Attributes:
        texts: the N raw texts (an empty cell gives an empty string).
        labels: (N,) long class indices into ``classes``; all zeros without labels.
        classes: class names; index k of ``labels`` means ``classes[k]``.
    """

    texts: list[str]
    labels: torch.Tensor
    classes: list[str]


class ImageSet(NamedTuple):
    """Images with class labels.

    Attributes:
        images: (N, C, H, W) float32 pixel values, divided by the loader's ``scale``.
        labels: (N,) long class labels.
    """

    images: torch.Tensor
    labels: torch.Tensor


# ----------------------------------------------------------------------------
# Small helpers
# ----------------------------------------------------------------------------


def _open_text(path: Path) -> IO[str]:
    """Open a text file for reading, transparently decompressing ``.gz``."""
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8", newline="")
    return open(path, encoding="utf-8", newline="")


def _existing_file(path: PathLike, argument: str = "path") -> Path:
    """Return ``path`` as a ``Path`` or raise a ``FileNotFoundError`` naming it."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"argument {argument}: no such file {str(path)!r}")
    return path


def _as_list(names: str | Sequence[str]) -> list[str]:
    """Accept one column name or several."""
    return [names] if isinstance(names, str) else list(names)


def _check_columns(header: list[str], wanted: list[str], path: Path) -> None:
    """Raise a ``ValueError`` naming the missing columns and listing those present."""
    missing = [name for name in wanted if name not in header]
    if missing:
        raise ValueError(f"{path.name}: missing column(s) {missing}; columns present: {header}")


def _parse_target(cell: str | None, path: Path, row: int, column: str) -> float:
    """A numeric label; an empty (or absent) cell is a missing label, NaN."""
    if cell is None or not cell.strip():
        return math.nan
    try:
        return float(cell)
    except ValueError:
        raise ValueError(
            f"{path.name}: row {row}, column {column!r}: target {cell!r} is not a number"
        ) from None


# ----------------------------------------------------------------------------
# Molecules
# ----------------------------------------------------------------------------


def load_molecule_csv(
    path: PathLike,
    smiles_column: str,
    target_columns: str | Sequence[str],
    *,
    graph: Literal["bonds", "complete"] = "bonds",
    largest_fragment: bool = True,
) -> MoleculeSet:
    """Read molecules and their targets from a CSV file with a header line.

    Rows whose SMILES is empty or unparsable do not stop the load: they are
    returned in ``failures`` with their row and reason, so that you can report
    or fix them.

    Args:
        path: the CSV file (``.csv`` or ``.csv.gz``).
        smiles_column: the name of the SMILES column.
        target_columns: the name(s) of the numeric target column(s); empty cells
            are missing labels and become NaN.
        graph: ``"bonds"`` or ``"complete"``, passed to ``mol_to_data``.
        largest_fragment: keep only the largest fragment of each molecule.

    Returns:
        A ``MoleculeSet`` (data, failures, target_columns); each ``Data`` has
        ``y`` of shape (1, T) and ``row``, its 0-based data row.

    Raises:
        FileNotFoundError: if ``path`` does not exist.
        ValueError: if a column is missing (the message lists the columns
            present) or a target cell is not a number (naming row and column).
    """
    path = _existing_file(path)
    targets = _as_list(target_columns)
    data_list: list[Data] = []
    failures: list[InvalidSmilesError] = []
    with _open_text(path) as handle:
        reader = csv.DictReader(handle)
        header = list(reader.fieldnames or [])
        _check_columns(header, [smiles_column, *targets], path)
        for row, record in enumerate(reader):
            smiles = record[smiles_column] or ""
            y = [_parse_target(record[name], path, row, name) for name in targets]
            try:
                data = mol_to_data(
                    smiles,
                    graph=graph,
                    largest_fragment=largest_fragment,
                    row=row,
                    source=path.name,
                )
            except InvalidSmilesError as err:
                failures.append(err)
                continue
            data.y = torch.tensor([y], dtype=torch.float32)  # (1, T)
            data.row = row
            data_list.append(data)
    return MoleculeSet(data_list, failures, targets)


def load_molecule_sdf(
    path: PathLike,
    target_properties: str | Sequence[str],
    *,
    graph: Literal["bonds", "complete"] = "bonds",
    largest_fragment: bool = True,
) -> MoleculeSet:
    """Read molecules and numeric SD properties from an SD file.

    Args:
        path: the ``.sdf`` file.
        target_properties: the SD property name(s) to use as targets; a record
            without the property has a missing label (NaN).
        graph: ``"bonds"`` or ``"complete"``, passed to ``mol_to_data``.
        largest_fragment: keep only the largest fragment of each molecule.

    Returns:
        A ``MoleculeSet``; ``row`` is the 0-based record index, and a failure's
        ``smiles`` is the record's title line (RDKit gives no SMILES for it).

    Raises:
        FileNotFoundError: if ``path`` does not exist.
        ValueError: if no record has one of the properties (the message lists
            the properties present) or a value is not a number.
    """
    path = _existing_file(path)
    targets = _as_list(target_properties)
    data_list: list[Data] = []
    failures: list[InvalidSmilesError] = []
    seen_properties: set[str] = set()
    with rdBase.BlockLogs():
        supplier = Chem.SDMolSupplier(str(path))
        for row in range(len(supplier)):
            mol = supplier[row]
            if mol is None:
                title = supplier.GetItemText(row).split("\n", 1)[0].strip()
                failures.append(
                    InvalidSmilesError(title, "RDKit could not read the record", row, path.name)
                )
                continue
            properties = mol.GetPropsAsDict()
            seen_properties.update(properties)
            y = [_parse_target(_str_or_none(properties.get(n)), path, row, n) for n in targets]
            data = mol_to_data(mol, graph=graph, largest_fragment=largest_fragment)
            data.y = torch.tensor([y], dtype=torch.float32)  # (1, T)
            data.row = row
            data_list.append(data)
    missing = [name for name in targets if name not in seen_properties]
    if missing and data_list:
        raise ValueError(
            f"{path.name}: missing property(ies) {missing}; properties present: "
            f"{sorted(seen_properties)}"
        )
    return MoleculeSet(data_list, failures, targets)


def _str_or_none(value: Any) -> str | None:
    """SD properties come back typed (int, float, str); targets are parsed from text."""
    return None if value is None else str(value)


# ----------------------------------------------------------------------------
# Planetoid: reading pickles without unpickling
# ----------------------------------------------------------------------------

# The globals a Planetoid pickle may name, and what we rebuild for each. Anything
# else in a file is refused.
_ARRAY_RECONSTRUCT = {"numpy.core.multiarray _reconstruct", "numpy._core.multiarray _reconstruct"}
_SPARSE_MATRICES = {
    "scipy.sparse.csr csr_matrix": "csr",
    "scipy.sparse._csr csr_matrix": "csr",
    "scipy.sparse.csc csc_matrix": "csc",
    "scipy.sparse._csc csc_matrix": "csc",
}
_ALLOWED_GLOBALS = {
    *_ARRAY_RECONSTRUCT,
    *_SPARSE_MATRICES,
    "numpy ndarray",
    "numpy dtype",
    "collections defaultdict",
    "__builtin__ list",
    "builtins list",
    "_codecs encode",
}

# Opcodes that push their argument (a number or a string) as is.
_LITERAL_OPCODES = frozenset((
    "INT", "BININT", "BININT1", "BININT2", "LONG", "LONG1", "LONG4", "FLOAT", "BINFLOAT",
    "STRING", "BINSTRING", "SHORT_BINSTRING", "BINBYTES", "SHORT_BINBYTES", "BINBYTES8",
    "UNICODE", "BINUNICODE", "SHORT_BINUNICODE", "BINUNICODE8",
))  # fmt: skip


class _Global:
    """A name (``"module attribute"``) from an allowed GLOBAL opcode; never imported."""

    def __init__(self, name: str) -> None:
        self.name = name


class _Pending:
    """An object named by a pickle, waiting for its BUILD state (array, dtype, matrix)."""

    def __init__(self, kind: str, args: tuple) -> None:
        self.kind = kind
        self.args = args
        self.state: Any = None


def _decode_pickle(stream: IO[bytes], name: str) -> Any:
    """Rebuild the plain data in a pickle without executing it.

    Supports the opcodes of data pickles (protocols 0-5) and the globals in
    ``_ALLOWED_GLOBALS``; refuses everything else with a ``ValueError``.
    Python 2 byte strings (how NumPy stored array buffers) come back as ``str``
    decoded as latin-1, which is what ``encoding="latin1"`` would give.

    Args:
        stream: the open binary file.
        name: the file name, for error messages.
    """
    try:
        return _resolve(_run_opcodes(stream, name), {})
    except (IndexError, KeyError, TypeError, AttributeError) as err:
        raise ValueError(f"{name}: malformed pickle ({type(err).__name__}: {err})") from None
    except ValueError as err:
        if str(err).startswith(f"{name}: "):
            raise  # already explained by _run_opcodes
        raise ValueError(f"{name}: malformed pickle ({err})") from None  # e.g. from genops


def _run_opcodes(stream: IO[bytes], name: str) -> Any:
    """The stack machine of ``_decode_pickle``: returns the top object, unresolved."""
    stack: list[Any] = []
    marks: list[int] = []
    memo: dict[int, Any] = {}

    def pop_mark() -> list[Any]:
        start = marks.pop()
        items = stack[start:]
        del stack[start:]
        return items

    for opcode, arg, _ in pickletools.genops(stream):
        op = opcode.name
        if op in ("PROTO", "FRAME"):
            continue
        if op == "STOP":
            break
        if op == "MARK":
            marks.append(len(stack))
        elif op in ("NONE", "NEWTRUE", "NEWFALSE"):
            stack.append({"NONE": None, "NEWTRUE": True, "NEWFALSE": False}[op])
        elif op in _LITERAL_OPCODES:
            stack.append(arg)
        elif op == "EMPTY_LIST":
            stack.append([])
        elif op == "EMPTY_DICT":
            stack.append({})
        elif op == "EMPTY_TUPLE":
            stack.append(())
        elif op in ("TUPLE1", "TUPLE2", "TUPLE3"):
            size = int(op[-1])
            items = tuple(stack[-size:])
            del stack[-size:]
            stack.append(items)
        elif op == "TUPLE":
            stack.append(tuple(pop_mark()))
        elif op == "LIST":
            stack.append(pop_mark())
        elif op == "DICT":
            items = pop_mark()
            stack.append(dict(zip(items[::2], items[1::2], strict=True)))
        elif op == "APPEND":
            value = stack.pop()
            stack[-1].append(value)
        elif op == "APPENDS":
            items = pop_mark()
            stack[-1].extend(items)
        elif op == "SETITEM":
            value = stack.pop()
            key = stack.pop()
            stack[-1][key] = value
        elif op == "SETITEMS":
            items = pop_mark()
            stack[-1].update(zip(items[::2], items[1::2], strict=True))
        elif op in ("PUT", "BINPUT", "LONG_BINPUT"):
            memo[arg] = stack[-1]
        elif op == "MEMOIZE":
            memo[len(memo)] = stack[-1]
        elif op in ("GET", "BINGET", "LONG_BINGET"):
            stack.append(memo[arg])
        elif op == "POP":
            stack.pop()
        elif op == "POP_MARK":
            pop_mark()
        elif op == "DUP":
            stack.append(stack[-1])
        elif op in ("GLOBAL", "STACK_GLOBAL"):
            if op == "STACK_GLOBAL":
                attribute = stack.pop()
                module = stack.pop()
                arg = f"{module} {attribute}"
            if arg not in _ALLOWED_GLOBALS:
                raise ValueError(f"{name}: refusing to decode a pickle that names {arg!r}")
            stack.append(_Global(arg))
        elif op in ("REDUCE", "NEWOBJ"):
            args = stack.pop()
            func = stack.pop()
            stack.append(_apply_global(func, args, name))
        elif op == "BUILD":
            state = stack.pop()
            target = stack[-1]
            if not isinstance(target, _Pending):
                raise ValueError(f"{name}: BUILD on a {type(target).__name__} is not data")
            target.state = state
        else:
            raise ValueError(f"{name}: refusing pickle opcode {op}")
    if len(stack) != 1:
        raise ValueError(f"{name}: malformed pickle ({len(stack)} objects left on the stack)")
    return stack[0]


def _apply_global(func: Any, args: Any, name: str) -> Any:
    """Evaluate one allowed call (REDUCE / NEWOBJ) as data, never by calling it."""
    if not isinstance(func, _Global):
        raise ValueError(f"{name}: a pickle call on a non-global object is not data")
    target = func.name
    if target in _ARRAY_RECONSTRUCT:
        return _Pending("ndarray", args)
    if target == "numpy dtype":
        return _Pending("dtype", args)
    if target in _SPARSE_MATRICES:
        return _Pending(_SPARSE_MATRICES[target], args)
    if target == "collections defaultdict":
        return {}
    if target == "_codecs encode":  # how Python 3 protocol 2 stores bytes
        text, encoding = args
        return text.encode(encoding)
    raise ValueError(f"{name}: {target!r} cannot be applied")


def _resolve(obj: Any, done: dict[int, Any]) -> Any:
    """Replace every ``_Pending`` in ``obj`` by the NumPy object it describes."""
    if id(obj) in done:
        return done[id(obj)]
    if isinstance(obj, list):
        result: Any = [_resolve(item, done) for item in obj]
    elif isinstance(obj, tuple):
        result = tuple(_resolve(item, done) for item in obj)
    elif isinstance(obj, dict):
        result = {_resolve(k, done): _resolve(v, done) for k, v in obj.items()}
    elif isinstance(obj, _Pending):
        result = _build_pending(obj, done)
    else:
        return obj
    done[id(obj)] = result
    return result


def _build_pending(pending: _Pending, done: dict[int, Any]) -> Any:
    """Turn a pending dtype, ndarray or sparse matrix into NumPy data."""
    state = _resolve(pending.state, done)
    if pending.kind == "dtype":
        dtype = np.dtype(pending.args[0])
        if state is not None and state[1] in ("<", ">"):
            dtype = dtype.newbyteorder(state[1])
        return dtype
    if pending.kind == "ndarray":
        shape, dtype, fortran, raw = state[-4:]  # state = ([version,] shape, dtype, F, data)
        if dtype.hasobject:
            raise ValueError("refusing an object array in a pickle")
        if isinstance(raw, str):
            raw = raw.encode("latin-1")
        order = "F" if fortran else "C"
        return np.frombuffer(raw, dtype=dtype).reshape(shape, order=order).copy()
    # A SciPy sparse matrix: keep its compressed arrays as a plain dict.
    return {
        "format": pending.kind,
        "shape": tuple(int(n) for n in state["_shape"]),
        "data": state["data"],
        "indices": state["indices"],
        "indptr": state["indptr"],
    }


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


# ----------------------------------------------------------------------------
# Text and images
# ----------------------------------------------------------------------------


def _class_indices(labels: list[str]) -> tuple[torch.Tensor, list[str]]:
    """Map label strings to indices of their sorted set (numerically if all integers)."""
    names = sorted(set(labels))
    if all(_is_int(name) for name in names):
        names.sort(key=int)
    index = {name: k for k, name in enumerate(names)}
    return torch.tensor([index[label] for label in labels], dtype=torch.long), names


def _is_int(text: str) -> bool:
    try:
        int(text)
    except ValueError:
        return False
    return True


def load_text_csv(path: PathLike, text_column: str, label_column: str | None = None) -> TextSet:
    """Read texts (and class labels) from a CSV file with a header line.

    Args:
        path: the CSV file (``.csv`` or ``.csv.gz``).
        text_column: the name of the text column; an empty cell is an empty text.
        label_column: the name of the label column, or None for unlabelled texts.
            Labels are class names; integers are ordered numerically.

    Returns:
        A ``TextSet`` (texts, labels (N,) long, classes).

    Raises:
        FileNotFoundError: if ``path`` does not exist.
        ValueError: if a column is missing (listing the columns present) or a
            label cell is empty (naming the row).
    """
    path = _existing_file(path)
    texts: list[str] = []
    labels: list[str] = []
    with _open_text(path) as handle:
        reader = csv.DictReader(handle)
        header = list(reader.fieldnames or [])
        wanted = [text_column] + ([label_column] if label_column is not None else [])
        _check_columns(header, wanted, path)
        for row, record in enumerate(reader):
            texts.append(record[text_column] or "")
            if label_column is None:
                continue
            label = (record[label_column] or "").strip()
            if not label:
                raise ValueError(f"{path.name}: row {row}, column {label_column!r}: empty label")
            labels.append(label)
    if label_column is None:
        return TextSet(texts, torch.zeros(len(texts), dtype=torch.long), [])
    label_tensor, classes = _class_indices(labels)
    return TextSet(texts, label_tensor, classes)


def load_image_csv(
    path: PathLike,
    height: int,
    width: int,
    *,
    channels: int = 1,
    scale: float = 1.0,
) -> ImageSet:
    """Read images stored one a row: C * H * W pixel values, then the label.

    Pixels are in channel-major, then row-major order (the order of
    ``image.reshape(-1)`` for a (C, H, W) image). No header line.

    Args:
        path: the CSV file (``.csv`` or ``.csv.gz``).
        height: H, pixel rows per image.
        width: W, pixel columns per image.
        channels: C, channels per image.
        scale: pixel values are divided by it (e.g. 255 for 8-bit images).

    Returns:
        An ``ImageSet``: images (N, C, H, W) float32, labels (N,) long.

    Raises:
        FileNotFoundError: if ``path`` does not exist.
        ValueError: if a row has the wrong number of values or a value is not a
            number (naming the line).
    """
    path = _existing_file(path)
    expected = channels * height * width + 1
    with _open_text(path) as handle:
        text = handle.read()
    try:
        table = np.loadtxt(io.StringIO(text), delimiter=",", dtype=np.float32, ndmin=2)
    except ValueError:
        table = None  # find and name the bad line below
    if table is None or (table.size and table.shape[1] != expected):
        raise ValueError(_first_bad_image_line(text, expected, path))
    pixels = torch.from_numpy(table[:, :-1] / np.float32(scale))
    images = pixels.reshape(-1, channels, height, width)  # (N, C, H, W)
    return ImageSet(images, torch.from_numpy(table[:, -1].astype(np.int64)))


def _first_bad_image_line(text: str, expected: int, path: Path) -> str:
    """Describe the first line of an image CSV that does not parse (slow path)."""
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        cells = line.split(",")
        if len(cells) != expected:
            return (
                f"{path.name}: line {number} has {len(cells)} values, expected {expected} "
                "(channels * height * width pixels, then the label)"
            )
        for column, cell in enumerate(cells):
            try:
                float(cell)
            except ValueError:
                return f"{path.name}: line {number}, column {column}: {cell!r} is not a number"
    return f"{path.name}: could not be parsed as comma-separated numbers"


# ----------------------------------------------------------------------------
# Named shortcuts for the bundled data sets
# ----------------------------------------------------------------------------


def _root(root: PathLike | None) -> Path:
    return DATASETS_DIR if root is None else Path(root)


def load_freesolv(
    *, graph: Literal["bonds", "complete"] = "bonds", root: PathLike | None = None
) -> MoleculeSet:
    """FreeSolv: 642 molecules, target ``expt`` (hydration free energy, kcal/mol)."""
    path = _root(root) / "molecules" / "freesolv.csv"
    return load_molecule_csv(path, "smiles", ["expt"], graph=graph)


def load_esol(
    *, graph: Literal["bonds", "complete"] = "bonds", root: PathLike | None = None
) -> MoleculeSet:
    """ESOL (Delaney): 1128 molecules, target measured log solubility (mol/L)."""
    path = _root(root) / "molecules" / "delaney-processed.csv"
    target = "measured log solubility in mols per litre"
    return load_molecule_csv(path, "smiles", [target], graph=graph)


def load_tox21(
    *, graph: Literal["bonds", "complete"] = "bonds", root: PathLike | None = None
) -> MoleculeSet:
    """Tox21: 7831 rows, 12 binary tasks (``TOX21_TASKS``) with missing labels as NaN.

    8 SMILES (aluminium species) do not parse in RDKit; they are in ``failures``,
    so ``data`` holds 7823 molecules.
    """
    path = _root(root) / "molecules" / "tox21.csv"
    return load_molecule_csv(path, "smiles", list(TOX21_TASKS), graph=graph)


def load_solubility(
    split: Literal["train", "test"] = "train",
    *,
    graph: Literal["bonds", "complete"] = "bonds",
    root: PathLike | None = None,
) -> MoleculeSet:
    """Huuskonen aqueous solubility: 1025 train or 257 test molecules, target ``SOL``."""
    if split not in ("train", "test"):
        raise ValueError(f"argument split must be 'train' or 'test', got {split!r}")
    path = _root(root) / "molecules" / f"solubility.{split}.sdf"
    return load_molecule_sdf(path, ["SOL"], graph=graph)


def load_cora(*, root: PathLike | None = None) -> Data:
    """Cora: 2708 nodes, 1433 binary features, 7 classes, 10556 directed edges.

    Standard split 140 / 500 / 1000, read from the bundled pickle-free ``cora.npz``.
    """
    return load_planetoid(_root(root) / "planetoid", "cora")


def load_mr(*, root: PathLike | None = None) -> TextSet:
    """MR (rt-polarity): 10662 sentences, 5331 negative (label 0) then 5331 positive (1).

    Sentences are already lower-cased and tokenised (tokens separated by spaces).
    """
    folder = _root(root) / "rt-polarity"
    texts: list[str] = []
    labels: list[int] = []
    for label, part in enumerate(("neg", "pos")):
        path = _existing_file(folder / f"rt-polarity.{part}", "root")
        lines = path.read_text(encoding="utf-8").splitlines()
        texts += [line.strip() for line in lines]
        labels += [label] * len(lines)
    return TextSet(texts, torch.tensor(labels, dtype=torch.long), ["negative", "positive"])


def load_digits(*, root: PathLike | None = None) -> ImageSet:
    """UCI digits: 1797 images (1, 8, 8), pixels scaled from 0-16 to [0, 1], labels 0-9."""
    path = _root(root) / "images" / "digits.csv.gz"
    return load_image_csv(path, 8, 8, scale=16.0)


def load_mnist5k(*, root: PathLike | None = None) -> ImageSet:
    """MNIST subset: 5000 images (1, 28, 28), 500 per class, pixels scaled to [0, 1]."""
    path = _root(root) / "images" / "mnist_5k.csv.gz"
    return load_image_csv(path, 28, 28, scale=255.0)
