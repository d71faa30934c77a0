"""Molecules as the model's inputs: one SMILES, or a whole CSV cached and in parallel.

``featurize`` turns one SMILES into a ``Data`` (``mol_to_data`` with the RDKit
descriptors from the same parse when the model uses them). ``featurize_csv`` does it
for every row of a molecule CSV, with two additions:

- **cache**: the result is saved as plain tensors, lists and strings with ``torch.save``
  and read back with ``torch.load(weights_only=True)`` (tensors and plain containers
  only, never arbitrary objects). The cache file is named by a hash of the CSV's path
  and the featurisation settings (columns, descriptor width, size limit, encoding,
  ``FEATURIZER_VERSION``, RDKit version) and stores the SHA-256 of the CSV's bytes and
  a SHA-256 checksum of its own content; a changed file, other settings or an entry
  whose content no longer matches its checksum (edited, damaged) are never used (the
  file is featurised again and the entry rewritten). The folder is
  ``$SETATTN_CACHE_DIR`` or ``~/.cache/setattn/features``; ``SETATTN_CACHE_DIR=off``
  turns the cache off.
- **limits**: molecules with more than ``max_heavy_atoms`` heavy atoms, or whose
  featurisation runs past ``limits.FEATURIZE_SECONDS``, are failures like invalid
  SMILES (``MoleculeSkippedError``); SMILES of several fragments keep the largest, and
  those with isotopes (stripped), dummy atoms or unusual elements get a ``MoleculeNote``
  (``setattn.domains.atom_notes``).
- **processes**: sets of at least ``PARALLEL_MIN`` molecules are featurised in chunks by
  a pool of forked processes (one per available core, ``SETATTN_FEATURIZE_WORKERS`` to
  override; 0 or 1 means in this process). The order of molecules and failures is the
  file's, whatever the pool does.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from pathlib import Path

import torch
from rdkit import rdBase
from torch_geometric.data import Data

from setattn.chem.descriptors import descriptor_set
from setattn.datasets.files import PathLike, as_list, existing_file, file_sha256
from setattn.datasets.molecules import MoleculeNote, MoleculeSet, read_molecule_table
from setattn.domains.atom_notes import molecule_note
from setattn.domains.molecules import (
    InvalidSmilesError,
    MoleculeSkippedError,
    check_smiles_text,
    mol_to_data,
    short_smiles,
)
from setattn.files import atomic_open
from setattn.molprop.batching import pack, unpack
from setattn.molprop.config import FEATURIZE_SECONDS, MAX_HEAVY_ATOMS
from setattn.molprop.distributed import world
from setattn.molprop.workers import WORKER_ATOMS, fork_map, in_worker, needs_worker

__all__ = ["FEATURIZER_VERSION", "PARALLEL_MIN", "cache_dir", "content_checksum", "featurize",
           "featurize_csv", "report_failures", "skipped_rows"]


FEATURIZER_VERSION = 5
"""Bump when ``mol_to_data`` or the descriptors change: old cache entries are then unused.
2: chirality is the CIP label (R/S), not the atom-order-dependent CW/CCW tag.
3: a SMILES with whitespace inside is invalid (RDKit read "C CO" as methane).
4: isotopes are stripped (``setattn.domains.isotopes``), with a note.
5: Morgan count fingerprints come with the descriptors."""


PARALLEL_MIN = 2000
"""Sets with at least this many rows are featurised by a process pool."""


_CHUNK = 256  # rows per pool task


_FORMAT = "setattn-features-2"


def featurize(smiles: str, descriptor_dim: int = 0, *, row: int | None = None,
              source: str | None = None, max_heavy_atoms: int = MAX_HEAVY_ATOMS,
              time_budget: float = FEATURIZE_SECONDS) -> Data:
    """One molecule as the model's input: ``mol_to_data`` plus descriptors if used.

    Args:
        smiles: the SMILES string.
        descriptor_dim: F_desc the model expects (0: no descriptors).
        row, source: the file row and name it came from, carried into errors.
        max_heavy_atoms: larger molecules (the largest fragment) are skipped.
        time_budget: seconds the featurisation may take (checked between descriptors;
            a molecule of more than ``deadline.WORKER_ATOMS`` heavy atoms is featurised
            in a worker process killed at the deadline, and on SIGTERM or Ctrl-C).

    Returns:
        ``Data`` with ``x``, ``edge_index``, ``edge_attr``, ``smiles`` and, with
        ``descriptor_dim``, ``descriptors`` (1, F_desc) and ``fingerprint`` (1, BITS).

    Raises:
        InvalidSmilesError: for an empty or unparsable SMILES; ``MoleculeSkippedError``
            (a subclass) for a molecule above the size limit or the time budget.
        ValueError: if this RDKit computes another number of descriptors than the model's.
    """
    kind = descriptor_set(descriptor_dim)
    # before any RDKit call (``needs_worker`` reads it): foreign characters, lengths
    check_smiles_text(smiles, row=row, source=source, max_heavy_atoms=max_heavy_atoms)

    def work() -> Data:
        return mol_to_data(smiles, descriptors=kind, fingerprint=kind is not None, row=row,
                           source=source, max_heavy_atoms=max_heavy_atoms,
                           time_budget=time_budget)

    # RDKit's descriptors of a large molecule cannot be interrupted: run them in a
    # worker process that is killed at the deadline (``setattn.molprop.workers``)
    large = descriptor_dim and max_heavy_atoms > WORKER_ATOMS and needs_worker(smiles)
    data = in_worker(work, smiles, time_budget, row=row, source=source) if large else work()
    if descriptor_dim and data.descriptors.shape[1] != descriptor_dim:
        raise ValueError(
            f"the model expects {descriptor_dim} descriptors but this RDKit computes "
            f"{data.descriptors.shape[1]}; retrain with this RDKit version")
    return data


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
    return max(len(os.sched_getaffinity(0)) // world().size, 1)  # ranks share the cores


def _settings(smiles_column: str, targets: list[str], descriptor_dim: int,
              max_heavy_atoms: int, encoding: str | None) -> dict:
    return {"format": _FORMAT, "featurizer": FEATURIZER_VERSION, "rdkit": rdBase.rdkitVersion,
            "smiles_column": smiles_column, "target_columns": targets,
            "descriptor_dim": descriptor_dim, "graph": "bonds", "largest_fragment": True,
            "max_heavy_atoms": max_heavy_atoms, "time_budget": FEATURIZE_SECONDS,
            "encoding": encoding}


def _cache_file(path: Path, settings: dict) -> Path | None:
    folder = cache_dir()
    if folder is None:
        return None
    key = json.dumps({"path": str(path.resolve()), **settings}, sort_keys=True)
    return folder / f"{path.stem}-{hashlib.sha256(key.encode()).hexdigest()[:20]}.pt"


def _unpack(packed: dict) -> list[Data]:
    """Inverse of ``_pack`` plus the ``y`` and ``row`` columns; tensors are views."""
    out = unpack(packed)
    for m, (d, row) in enumerate(zip(out, packed["row"].tolist())):
        d.y = packed["y"][m:m + 1]  # (1, T)
        d.row = row
    return out


def one_blas_thread() -> AbstractContextManager:
    """numpy's BLAS limited to one thread while a chunk of molecules is featurised.

    RDKit's ``AvgIpc`` multiplies small matrices with numpy; a multi-threaded BLAS
    spins its threads on a busy machine, and with several featurising processes the
    cores are busy by construction (RDKit's descriptors of 300 drug-like molecules at a
    load average of 5: 109 ms per molecule with OpenBLAS's default threads, 17 with
    one). torch's own threads are not affected. The limit holds for the whole process
    while it lasts (threadpoolctl): calls overlapping in threads (``setattn serve``) may
    restore it out of order and leave BLAS at one thread, which costs nothing there.
    """
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=1, user_api="blas")


def _featurize_chunk(task: tuple[list[int], list[str], str, int, int]) -> tuple[dict, list]:
    """Featurise rows; returns (packed successes with their rows, failures as lists
    [row, smiles, reason, skipped] and notes as [row, smiles, note] under "notes")."""
    with one_blas_thread():
        return _featurize_rows(*task)


def _featurize_rows(rows: list[int], smiles: list[str], source: str, descriptor_dim: int,
                    max_heavy_atoms: int) -> tuple[dict, list]:
    data, done, failures, notes = [], [], [], []
    for row, s in zip(rows, smiles):
        try:
            data.append(featurize(s, descriptor_dim, row=row, source=source,
                                  max_heavy_atoms=max_heavy_atoms))
        except InvalidSmilesError as err:
            failures.append([row, err.smiles, err.reason,
                             isinstance(err, MoleculeSkippedError)])
            continue
        done.append(row)
        note = molecule_note(s)
        if note:
            notes.append([row, s, note])
    packed = pack(data, descriptor_dim)
    packed["row"] = torch.tensor(done, dtype=torch.long, device="cpu")  # featurised on the CPU
    packed["notes"] = notes
    return packed, failures


def _concat(parts: list[dict], descriptor_dim: int) -> dict:
    """Join packed chunks, shifting their offsets."""
    out = {"smiles": [s for p in parts for s in p["smiles"]],
           "row": torch.cat([p["row"] for p in parts]),
           "notes": [n for p in parts for n in p["notes"]]}
    keys = ("descriptors", "fingerprint") if descriptor_dim else ()
    for key in ("x", "edge_attr", *keys):
        nonempty = [p[key] for p in parts if p[key].numel()]
        out[key] = torch.cat(nonempty) if nonempty else parts[0][key]
    out["edge_index"] = torch.cat([p["edge_index"] for p in parts], 1)
    for key in ("node_ptr", "edge_ptr"):
        ptr = [parts[0][key]]
        for p in parts[1:]:
            ptr.append(p[key][1:] + ptr[-1][-1])
        out[key] = torch.cat(ptr)
    return out


def _featurize(path: Path, smiles_column: str, targets: list[str], descriptor_dim: int,
               max_heavy_atoms: int, encoding: str | None) -> dict:
    table = read_molecule_table(path, smiles_column, targets, encoding)
    rows, smiles, y = list(range(len(table.smiles))), table.smiles, table.y
    tasks = [(rows[i:i + _CHUNK], smiles[i:i + _CHUNK], path.name, descriptor_dim,
              max_heavy_atoms) for i in range(0, len(rows), _CHUNK)] \
        or [([], [], path.name, descriptor_dim, max_heavy_atoms)]
    # forked workers keep this process's torch thread count (set by the caller)
    results = list(fork_map(_featurize_chunk, tasks, min(_workers(len(rows)), len(tasks))))
    packed = _concat([r[0] for r in results], descriptor_dim)
    packed["y"] = y[packed["row"]]  # (M, T)
    packed["failures"] = [f for r in results for f in r[1]]
    return packed


def content_checksum(packed: dict) -> str:
    """SHA-256 of a cache entry's content: every tensor's dtype, shape and bytes, and
    every list as JSON, key by key."""
    digest = hashlib.sha256()
    for key in sorted(packed):
        value = packed[key]
        digest.update(key.encode())
        if isinstance(value, torch.Tensor):
            digest.update(f"{value.dtype}{tuple(value.shape)}".encode())
            digest.update(value.contiguous().numpy().reshape(-1).view("uint8"))
        else:
            digest.update(json.dumps(value).encode())
    return digest.hexdigest()


_ENTRY_KEYS = ("settings", "sha256", "checksum")  # what an entry holds beside its content


def _load_cached(file: Path, settings: dict, digest: str) -> dict | None:
    """The cached entry if it exists, matches the settings and the CSV's bytes, and its
    content matches its checksum."""
    try:
        packed = torch.load(file, weights_only=True)
    except (OSError, RuntimeError, EOFError, ValueError, pickle.UnpicklingError):
        return None  # missing, half-written by an old version, or not ours: featurise again
    if not isinstance(packed, dict) or packed.get("settings") != settings \
            or packed.get("sha256") != digest:
        return None
    content = {k: v for k, v in packed.items() if k not in _ENTRY_KEYS}
    try:
        if packed.get("checksum") != content_checksum(content):
            return None  # edited or damaged: featurise again
    except (TypeError, ValueError, AttributeError):
        return None
    return content


def featurize_csv(
    path: PathLike,
    smiles_column: str,
    target_columns: str | Sequence[str],
    descriptor_dim: int = 0,
    *,
    use_cache: bool = True,
    max_heavy_atoms: int = MAX_HEAVY_ATOMS,
    encoding: str | None = None,
) -> MoleculeSet:
    """Bond-graph molecules of a CSV with targets (and descriptors), cached and parallel.

    The same result as ``load_molecule_csv(path, smiles_column, target_columns)`` with
    ``featurize``'s descriptors for every molecule.

    Args:
        path: the CSV file (``.csv`` or ``.csv.gz``) with a header line.
        smiles_column: the name of the SMILES column.
        target_columns: the name(s) of the numeric target column(s); empty cells are NaN.
        descriptor_dim: F_desc of the RDKit descriptors to attach (0: none).
        use_cache: read and write the feature cache (see the module docstring).
        max_heavy_atoms: molecules with more heavy atoms are failures (skipped).
        encoding: the CSV's text encoding (None: UTF-8, or UTF-16 with its BOM).

    Returns:
        A ``MoleculeSet``; each ``Data`` has ``x``, ``edge_index``, ``edge_attr``,
        ``smiles``, ``y`` (1, T), ``row`` and, with ``descriptor_dim``,
        ``descriptors`` (1, F_desc).

    Raises:
        FileNotFoundError: if ``path`` does not exist.
        ValueError: if a column is missing or a target cell is not a number (naming the
            row and column), or RDKit computes a different number of descriptors.
    """
    path = existing_file(path, "--data")
    targets = as_list(target_columns)
    settings = _settings(smiles_column, targets, descriptor_dim, max_heavy_atoms, encoding)
    file = _cache_file(path, settings) if use_cache else None
    digest = file_sha256(path) if file is not None else ""
    packed = _load_cached(file, settings, digest) if file is not None else None
    if packed is None:
        packed = _featurize(path, smiles_column, targets, descriptor_dim, max_heavy_atoms,
                            encoding)
        if file is not None:
            entry = {**packed, "settings": settings, "sha256": digest,
                     "checksum": content_checksum(packed)}
            with atomic_open(file, "wb") as handle:  # readers never see half a file
                torch.save(entry, handle)
    failures = [(MoleculeSkippedError if skipped else InvalidSmilesError)(
        s, reason, row, path.name) for row, s, reason, skipped in packed["failures"]]
    notes = [MoleculeNote(row, s, note) for row, s, note in packed["notes"]]
    return MoleculeSet(_unpack(packed), failures, targets, notes)


Log = Callable[[str], None]


def skipped_rows(failures: Sequence[InvalidSmilesError]) -> list[dict]:
    """``metrics.json``'s ``skipped_rows``: row, SMILES and reason of each row left out."""
    return [{"row": f.row, "smiles": f.smiles, "reason": f.reason} for f in failures]


def _listing(rows: Sequence[tuple[int, str, str]], quote: bool) -> str:
    """One line per (row, SMILES, reason), at most 50 of them."""
    lines = [f"  row {row}: {short_smiles(smiles) if quote else '(not shown)'}: {why}"
             for row, smiles, why in rows]
    shown = lines if len(lines) <= 50 else [*lines[:50], f"  ... and {len(lines) - 50} more"]
    return "\n".join(shown)


def _kinds(failures: Sequence[InvalidSmilesError]) -> str:
    """"3 invalid or empty SMILES and 1 molecule(s) above the size or time limit"."""
    skipped = sum(isinstance(f, MoleculeSkippedError) for f in failures)
    kinds = [f"{len(failures) - skipped} invalid or empty SMILES" if skipped < len(failures)
             else "", f"{skipped} molecule(s) above the size or time limit" if skipped else ""]
    return " and ".join(k for k in kinds if k)


def report_failures(failures: Sequence[InvalidSmilesError], source: str, strict: bool,
                    log: Log = print, notes: Sequence[MoleculeNote] = (),
                    quote: bool = True) -> None:
    """List the rows left out (invalid or empty SMILES, molecules above the size or time
    limit) and the rows of several fragments (the largest kept); with ``strict`` raise.

    Args:
        quote: show the SMILES (False for a file that is not named like a CSV).

    Raises:
        ValueError: with ``strict`` and at least one failure or note, listing them.
    """
    if strict and (failures or notes):
        found = [_kinds(failures)] if failures else []
        found += [f"{len(notes)} SMILES of several fragments"] if notes else []
        raise ValueError(f"{source}: {' and '.join(found)} (--strict):\n" + _listing(
            [(f.row, f.smiles, f.reason) for f in failures] + list(notes), quote))
    if failures:
        plain = not any(isinstance(f, MoleculeSkippedError) for f in failures)
        kinds = "invalid or empty SMILES" if plain else _kinds(failures)
        log(f"{source}: skipping {len(failures)} row(s) with {kinds} (rows counted from 0, "
            f"header excluded):\n"
            + _listing([(f.row, f.smiles, f.reason) for f in failures], quote))
    if notes:
        log(f"{source}: {len(notes)} row(s) of several fragments (a salt or a mixture): the "
            f"largest fragment of each is the molecule (--strict refuses them):\n"
            + _listing(notes, quote))
