"""An ensemble's predictions for SMILES: for lists of them, and streamed from a CSV.

``predict_spread`` / ``predict_smiles`` / ``predict_interval`` take a list of SMILES;
``predict_table`` gives the rows ``predict_csv`` would write for such a list.
``embed_smiles`` / ``embed_csv`` give the networks' molecule vectors instead of their
predictions (``setattn embed``). ``predict_csv`` streams a CSV of any size through an
ensemble, ``CHUNK_ROWS`` rows at a time, optionally in forked worker processes
(``setattn.molprop.workers.fork_map``), and writes one output row per input row, in
order. A chunk's featurisation and predictions are read from the feature cache
(``setattn.molprop.chunk_cache``) where it holds them.

::

    predict_csv -> predict_chunk -> chunk_cache (load) -> featurize -> Ensemble
                                  -> chunk_cache (save) -> prediction_rows -> the CSV
"""

from __future__ import annotations

import csv
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from functools import partial
from pathlib import Path

import torch
from torch import Tensor

from setattn.datasets.files import check_columns, open_csv
from setattn.files import atomic_open, check_output_file
from setattn.molprop import chunk_cache
from setattn.molprop.chunk_cache import (
    Outputs,
    featurise_chunk,
    from_arrays,
    predict_chunk,
    worker_chunk,
)
from setattn.molprop.config import MAX_HEAVY_ATOMS, check_prediction_columns, prediction_columns
from setattn.molprop.conformal import ENSEMBLE, KERNEL, Calibration, bounds
from setattn.molprop.ensemble import Ensemble
from setattn.molprop.workers import fork_map

__all__ = ["BLOCK_ROWS", "CHUNK_ROWS", "embed_csv", "embed_smiles", "embedding_columns",
           "free_cores", "predict_csv", "predict_interval", "predict_smiles", "predict_spread",
           "predict_table", "prediction_rows"]

CHUNK_ROWS = 2_000
"""Rows of the input CSV read at a time by ``predict_csv`` (featurised and predicted in
blocks of ``BLOCK_ROWS``): memory holds a few chunks, whatever the input's size. How it
was chosen: ``docs/guide/defaults.rst``."""

BLOCK_ROWS = 250
"""Rows featurised and predicted as one task (by one worker process with several), and
one entry of the feature cache: a chunk is split into blocks so that several workers
share even a small file, and the cache finds the same blocks whatever the workers."""


def free_cores() -> int:
    """Worker processes for ``setattn predict`` by default: the cores this process may
    use less the machine's 1-minute load average (the cores other work keeps busy), at
    least 1."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") \
        else os.cpu_count() or 1
    busy = int(os.getloadavg()[0]) if hasattr(os, "getloadavg") else 0
    return max(1, min(cores, cores - busy))


def _read_chunks(records: Iterator[list[str]], size: int) -> Iterator[list[list[str]]]:
    """Successive lists of at most ``size`` CSV records (``open_csv``'s, which raise a
    ``ValueError`` naming the file and line of an unreadable one)."""
    chunk: list[list[str]] = []
    for record in records:
        chunk.append(record)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk












def predict_spread(ensemble: Ensemble, smiles: Sequence[str], kind: str = ENSEMBLE
                   ) -> Outputs:
    """An ensemble's predictions for a list of SMILES with the scale ``u`` of their
    intervals, before any calibration (to calibrate or score intervals of one's own).

    Args:
        ensemble: the model.
        smiles: M SMILES.
        kind: what ``u`` is: ``conformal.ENSEMBLE``, the members' std (in the targets'
            units, per task), or ``conformal.KERNEL``, the kernel part's posterior std
            (unitless, in [0, 1], one value per molecule repeated for every task);
            ``ensemble.spread_kind()`` gives the one ``setattn train`` calibrated.

    Returns:
        mean (M, T), std (M, T) over the members (zeros for one) and ``u`` (M, T), NaN
        rows where a molecule was not predicted; one message per SMILES: "" when it was
        predicted as written, "note: ..." when predicted with a remark, else
        "invalid SMILES: ..." or "skipped: ..." (e.g. too many heavy atoms).

    Raises:
        ValueError: if ``kind`` is unknown, or is ``KERNEL`` without a kernel part.
    """
    return predict_chunk(ensemble, list(smiles), 0, "smiles", kind=kind)


def predict_smiles(ensemble: Ensemble, smiles: Sequence[str]
                   ) -> tuple[Tensor, Tensor, list[str]]:
    """An ensemble's predictions for a list of SMILES, as ``predict_csv`` makes them.

    Returns:
        mean (M, T) and std (M, T) over the members (zeros for one; NaN rows where a
        SMILES does not parse), and one error message per SMILES ("" when it parsed).
    """
    mean, std, _, errors = predict_spread(ensemble, smiles)
    return mean, std, errors


def predict_interval(ensemble: Ensemble, smiles: Sequence[str], calibration: Calibration
                     ) -> tuple[Tensor, Tensor, Tensor, list[str]]:
    """An ensemble's predictions for a list of SMILES with their prediction intervals.

    Returns:
        mean (M, T), the intervals' lower and upper ends (M, T) each (NaN rows where a
        SMILES does not parse), and one error message per SMILES as ``predict_smiles``.
    """
    mean, _, u, errors = predict_spread(ensemble, smiles, calibration.spread)
    lower, upper = bounds(mean, u, calibration)  # (M, T) each
    return mean, lower, upper, errors








def _members(ensemble: Ensemble, member: int | None) -> list[int]:
    """The members whose vectors are wanted: all (None) or one, checked."""
    if member is None:
        return list(range(len(ensemble)))
    if not 0 <= member < len(ensemble):
        raise ValueError(f"argument --member: the model has {len(ensemble)} member(s), "
                         f"0 to {len(ensemble) - 1}; got {member}")
    return [member]


@torch.no_grad()
def embed_smiles(ensemble: Ensemble, smiles: Sequence[str], member: int | None = None, *,
                 max_heavy_atoms: int = MAX_HEAVY_ATOMS, first_row: int = 0,
                 source: str = "smiles") -> tuple[Tensor, list[str]]:
    """The networks' molecule vectors (``MoleculeNetwork.encode``) for M SMILES.

    Args:
        member: one member's vectors (0 to K - 1), or None for every member's, side by
            side (members' vectors live in different spaces: they are not averaged).
        max_heavy_atoms: larger molecules get no vector.
        first_row, source: where the SMILES came from, for messages.

    Returns:
        vectors (M, K' * 2 D) float32 (K' members), NaN rows where a SMILES has no
        molecule; one message per SMILES as ``predict_smiles`` gives.

    Raises:
        ValueError: naming ``--member`` if it is not one of the model's members.
    """
    members = _members(ensemble, member)
    data, ok, messages = featurise_chunk(list(smiles), ensemble.descriptor_dim, first_row,
                                         source, max_heavy_atoms)
    out = torch.full((len(messages), len(members) * ensemble.vector_width), float("nan"),
                     device="cpu")  # (M, K' * 2D): files and arrays are on the CPU
    if data:
        vectors = ensemble.member_vectors(data)[:, members]  # (M_ok, K', 2D)
        out[torch.tensor(ok, dtype=torch.long, device="cpu")] = vectors.flatten(1)
    return out, messages


def embedding_columns(smiles_column: str, members: Sequence[int], width: int) -> list[str]:
    """The header of ``embed_csv``'s output: the SMILES, ``m<k>_<i>`` per member k of
    ``members`` and component i < ``width``, then ``error``."""
    return [smiles_column, *(f"m{k}_{i}" for k in members for i in range(width)), "error"]


def embed_csv(ensemble: Ensemble, data: str | Path, output: str | Path, smiles_column: str,
              member: int | None = None, *, chunk_rows: int = CHUNK_ROWS,
              encoding: str | None = None, max_heavy_atoms: int = MAX_HEAVY_ATOMS,
              protect: Mapping[str, str | Path] | None = None,
              progress: Callable[[int], None] | None = None) -> dict:
    """Stream ``data`` into ``output``: one row of molecule vectors per input row, in
    order, with the columns of ``embedding_columns`` (``m<k>_<i>``: member k's component
    i; empty cells and the reason in ``error`` where a SMILES has no
    molecule). Written to a temporary file that replaces ``output`` at the end; memory
    holds one chunk at a time.

    Args:
        member: as ``embed_smiles``.
        progress: called with the rows written after every chunk.

    Returns:
        ``{"rows": ..., "errors": ..., "width": ...}``: row and error counts, and the
        vector width per row.

    Raises:
        FileNotFoundError: naming ``--data``.
        ValueError: for a missing SMILES column, an unreadable line (naming it), or
            ``member`` out of range (naming ``--member``).
    """
    check_output_file(output, {"--data": data, **(protect or {})})
    members = _members(ensemble, member)
    counts = {"rows": 0, "errors": 0, "width": len(members) * ensemble.vector_width}
    with open_csv(data, encoding) as table:
        (col,) = check_columns(table.header, [smiles_column], table.path)
        with atomic_open(output, "w", encoding="utf-8", newline="") as dst:
            writer = csv.writer(dst)
            writer.writerow(embedding_columns(smiles_column, members, ensemble.vector_width))
            for first_row, smiles in _chunk_tasks(_read_chunks(table.records, chunk_rows),
                                                  col):
                vectors, messages = embed_smiles(ensemble, smiles, member,
                                                 max_heavy_atoms=max_heavy_atoms,
                                                 first_row=first_row, source=table.path.name)
                for text, row, message in zip(smiles, vectors.tolist(), messages):
                    writer.writerow([text, *(_cell(v) for v in row), message])
                counts["rows"] += len(smiles)
                counts["errors"] += sum(1 for m in messages if m and not m.startswith("note: "))
                if progress is not None:
                    progress(counts["rows"])
    return counts


def _cell(value: float) -> str:
    return "" if value != value else f"{value:.8g}"  # NaN -> empty cell


def predict_csv(ensemble: Ensemble, targets: Sequence[str], data: str | Path,
                output: str | Path, smiles_column: str, chunk_rows: int = CHUNK_ROWS,
                workers: int = 1, worker_init: Callable[[], None] | None = None, *,
                encoding: str | None = None, max_heavy_atoms: int = MAX_HEAVY_ATOMS,
                calibration: Calibration | None = None,
                protect: Mapping[str, str | Path] | None = None) -> dict:
    """Stream ``data`` through the ensemble into ``output``, ``chunk_rows`` rows at a time.

    The output has the columns ``smiles_column``, one per target, ``<target>_std``
    per target when the ensemble has several members, ``<target>_lower`` and ``<target>_upper``
    (the prediction interval) per target with a ``calibration``, and ``error``; one row
    per input row,
    in order. ``error`` is empty for a molecule predicted as written, starts with
    "note: " for one predicted with a remark (a salt or mixture: its largest fragment),
    and otherwise says why the row has no predictions (an invalid SMILES, or a molecule
    above ``max_heavy_atoms`` or the time budget). It is written to a temporary file
    that replaces ``output`` at the end. Memory holds a few chunks at a time, whatever
    the size of ``data``, which is read as ``open_csv`` reads (gzip, BOM, comma,
    semicolon or tab, ``encoding``).

    Args:
        workers: forked processes featurising and predicting blocks of ``BLOCK_ROWS``
            rows in parallel (1: this one); the output is the same for any number.
        worker_init: called first in each worker process (the command line limits each
            worker to one torch thread there).
        encoding: the text encoding of ``data`` (None: UTF-8, or UTF-16 with its BOM).
        max_heavy_atoms: larger molecules get no prediction.
        calibration: a regression run's conformal calibration (``load_run``'s
            ``meta["conformal"]``): adds each target's interval.
        protect: other files ``output`` may not be, by the argument that named them
            (the command line's: the run's records and weights).

    Returns:
        ``{"rows": ..., "errors": ..., "notes": ...}`` counts.

    Raises:
        FileNotFoundError: naming ``--data``.
        ValueError: if the SMILES column is missing (listing the columns present) or
            appears twice, or a line of ``data`` is not readable (naming it).
    """
    # never over an input, nor through a device, FIFO or link: before any work
    check_output_file(output, {"--data": data, **(protect or {})})
    check_prediction_columns(smiles_column, targets, "--model")  # runs from before the check
    several = len(ensemble) > 1
    header_out = prediction_columns(smiles_column, targets, several, calibration is not None)
    counts = {"rows": 0, "errors": 0, "notes": 0}
    with open_csv(data, encoding) as table:
        (col,) = check_columns(table.header, [smiles_column], table.path)
        source = table.path.name
        with atomic_open(output, "w", encoding="utf-8", newline="") as dst:
            writer = csv.writer(dst)
            writer.writerow(header_out)
            tasks = _chunk_tasks(_read_chunks(table.records, chunk_rows), col)
            kind = calibration.spread if calibration is not None else ENSEMBLE
            if kind == KERNEL and workers > 1:  # the posterior std's factor, before the fork
                ensemble.kernel.descriptor.posterior_factor()
            work = partial(worker_chunk, ensemble, source, max_heavy_atoms, kind,
                           chunk_cache.model_digest(ensemble))
            for smiles, result in fork_map(work, tasks, workers, worker_init):
                mean, std, u, messages = from_arrays(result)
                writer.writerows(prediction_rows(smiles, mean, std, u, messages,
                                                 several, calibration))
                counts["rows"] += len(smiles)
                counts["notes"] += sum(1 for m in messages if m.startswith("note: "))
                counts["errors"] += sum(1 for m in messages if m and not m.startswith("note: "))
    return counts


def prediction_rows(smiles: Sequence[str], mean: torch.Tensor, std: torch.Tensor,
                    u: torch.Tensor, messages: Sequence[str], with_std: bool,
                    calibration: Calibration | None) -> list[list[str]]:
    """The output rows of M SMILES, as ``predict_csv`` writes them: per SMILES, it, the
    (T,) means of ``mean`` (M, T), the (T,) stds of ``std`` (M, T) if ``with_std``, each
    target's interval ends (from ``u`` (M, T)) with a ``calibration``, and its message;
    numbers as text (``%.8g``), "" for NaN."""
    if calibration is not None:
        lower, upper = bounds(mean, u, calibration)  # (M, T) each
        ends = torch.stack([lower, upper], dim=2).flatten(1)  # (M, 2T): t's lower, upper
    rows = []
    for m, text in enumerate(smiles):
        cells = [text, *(_cell(v) for v in mean[m].tolist())]
        if with_std:
            cells += [_cell(v) for v in std[m].tolist()]
        if calibration is not None:
            cells += [_cell(v) for v in ends[m].tolist()]
        rows.append([*cells, messages[m]])
    return rows


def predict_table(ensemble: Ensemble, targets: Sequence[str],
                  smiles: Sequence[str], smiles_column: str = "smiles", *,
                  max_heavy_atoms: int = MAX_HEAVY_ATOMS,
                  calibration: Calibration | None = None, source: str = "smiles"
                  ) -> tuple[list[str], list[list[str]]]:
    """The header and the M rows that ``predict_csv`` writes for a CSV of these M SMILES
    (same columns, numbers, errors and notes), without a file: for a list of SMILES
    held in memory (a web request).

    Raises:
        ValueError: if a target would share its column name with another column.
    """
    check_prediction_columns(smiles_column, targets, "--model")
    header = prediction_columns(smiles_column, targets, len(ensemble) > 1,
                                calibration is not None)
    smiles = list(smiles)
    kind = calibration.spread if calibration is not None else ENSEMBLE
    mean, std, u, messages = predict_chunk(ensemble, smiles, 0, source, max_heavy_atoms, kind)
    return header, prediction_rows(smiles, mean, std, u, messages, len(ensemble) > 1,
                                   calibration)


def _chunk_tasks(chunks: Iterable[list[list[str]]], col: int) -> Iterator[tuple[int, list[str]]]:
    """(first data row, SMILES) per block of at most ``BLOCK_ROWS`` rows of each chunk; a
    short record gives ""."""
    first_row = 0
    for chunk in chunks:
        smiles = [record[col] if col < len(record) else "" for record in chunk]
        for start in range(0, len(smiles), BLOCK_ROWS):
            yield first_row + start, smiles[start:start + BLOCK_ROWS]
        first_row += len(chunk)
