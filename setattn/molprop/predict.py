"""An ensemble's predictions for SMILES: for lists of them, and streamed from a CSV.

``predict_spread`` / ``predict_smiles`` / ``predict_interval`` take a list of SMILES;
``predict_table`` gives the rows ``predict_csv`` would write for such a list.
``predict_csv`` streams a CSV of any size through an ensemble, ``CHUNK_ROWS`` rows at a
time, optionally in a pool of forked worker processes, and writes one output row per
input row, in order. The models run through ``setattn.molprop.inference``.
"""

from __future__ import annotations

import csv
import gc
import multiprocessing
import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import torch
from torch import Tensor

from setattn.datasets.files import check_columns, open_csv
from setattn.domains.atom_notes import molecule_note
from setattn.domains.molecules import InvalidSmilesError, MoleculeSkippedError
from setattn.files import atomic_open
from setattn.molprop.chunk_cache import cached_chunk, cached_outputs, model_digest
from setattn.molprop.conformal import ENSEMBLE, KERNEL, Calibration, bounds
from setattn.molprop.deadline import stop_pool
from setattn.molprop.featurize import featurize, one_blas_thread
from setattn.molprop.inference import interval_spread, model_predictions, spread
from setattn.molprop.limits import MAX_HEAVY_ATOMS
from setattn.molprop.model import MoleculeModel
from setattn.molprop.run_files import (
    check_output_file,
    check_prediction_columns,
    prediction_columns,
)

__all__ = ["BLOCK_ROWS", "CHUNK_ROWS", "free_cores", "predict_csv", "predict_interval",
           "predict_smiles", "predict_spread", "predict_table", "prediction_rows"]

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


def _message(err: InvalidSmilesError) -> str:
    """The ``error`` cell of a row left without predictions."""
    if isinstance(err, MoleculeSkippedError):
        return f"skipped: {err.reason}"
    return f"invalid SMILES: {err.reason}"


def _featurise_chunk(smiles: Sequence[str], descriptor_dim: int, first_row: int, source: str,
                     max_heavy_atoms: int) -> tuple[list, list[int], list[str]]:
    """The chunk's molecules, the offsets of the SMILES they came from, and one message
    per SMILES ("", "note: ..." or why it has no molecule)."""
    data, ok, messages = [], [], []
    with one_blas_thread():
        for offset, text in enumerate(smiles):
            try:
                data.append(featurize(text, descriptor_dim, row=first_row + offset,
                                      source=source, max_heavy_atoms=max_heavy_atoms))
                ok.append(offset)
                note = molecule_note(text)
                messages.append(f"note: {note}" if note else "")
            except InvalidSmilesError as err:
                messages.append(_message(err))
    return data, ok, messages


@torch.no_grad()
def _predict_chunk(models: Sequence[MoleculeModel], smiles: Sequence[str], first_row: int,
                   source: str, max_heavy_atoms: int = MAX_HEAVY_ATOMS, kind: str = ENSEMBLE,
                   cache: str | None = None
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, list[str]]:
    """Predictions for one chunk of SMILES; with ``cache`` (the models'
    ``chunk_cache.model_digest``), its featurisation and its predictions are read from
    and written to the feature cache (``chunk_cache``).

    Returns:
        mean (M, T) and std (M, T) over the models and the intervals' ``u`` (M, T) of a
        calibration of ``kind`` (``interval_spread``; ``std`` itself for
        ``ENSEMBLE``), NaN rows where the SMILES failed; and one message per SMILES: ""
        when it was predicted as written, "note: ..." when predicted with a remark
        (``atom_notes.molecule_note``: several fragments, the largest one; isotopes
        stripped; dummy atoms or elements the model has not seen), else why it was not
        ("invalid SMILES: ..." or "skipped: ...").
    """
    descriptor_dim = models[0].config.descriptor_dim
    def featurise() -> tuple[list, list[int], list[str]]:
        return _featurise_chunk(smiles, descriptor_dim, first_row, source, max_heavy_atoms)

    if cache is None:
        return _chunk_outputs(models, featurise(), len(smiles), kind)
    return cached_outputs(smiles, descriptor_dim, max_heavy_atoms, cache, kind, lambda: (
        _chunk_outputs(models, cached_chunk(smiles, descriptor_dim, max_heavy_atoms,
                                            featurise), len(smiles), kind)))


def _chunk_outputs(models: Sequence[MoleculeModel], featurised: tuple[list, list[int], list[str]],
                   rows: int, kind: str
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, list[str]]:
    """``_predict_chunk``'s result from a chunk's featurisation (``rows`` SMILES)."""
    data, ok, errors = featurised
    num_tasks = models[0].config.num_tasks
    # the chunk's output table: on the CPU, where ``model_predictions`` returns its rows
    mean = torch.full((rows, num_tasks), float("nan"), device="cpu")  # (M, T)
    std = torch.full((rows, num_tasks), float("nan"), device="cpu")  # (M, T)
    u = std.clone()  # (M, T)
    if data:
        stacked = torch.stack([model_predictions(m, data) for m in models])  # (K, M_ok, T)
        index = torch.tensor(ok, device="cpu")  # (M_ok,)
        mean[index], std[index] = spread(stacked)
        u[index] = interval_spread(models, data, std[index], kind)
    return mean, std, u, errors


def predict_spread(models: Sequence[MoleculeModel], smiles: Sequence[str],
                   kind: str = ENSEMBLE) -> tuple[Tensor, Tensor, Tensor, list[str]]:
    """An ensemble's predictions for a list of SMILES with the scale ``u`` of their
    intervals, before any calibration (to calibrate or score intervals of one's own).

    Args:
        models: the ensemble's members.
        smiles: M SMILES.
        kind: what ``u`` is: ``conformal.ENSEMBLE``, the members' std (in the targets'
            units, per task), or ``conformal.KERNEL``, the kernel ridge's posterior std
            (``interval_spread``: unitless, in [0, 1], one value per molecule repeated
            for every task); ``inference.spread_kind(models)`` gives the one ``setattn train``
            calibrated.

    Returns:
        mean (M, T), std (M, T) over the models (zeros for one model) and ``u`` (M, T),
        NaN rows where a molecule was not predicted; one message per SMILES: "" when it
        was predicted as written, "note: ..." when predicted with a remark, else
        "invalid SMILES: ..." or "skipped: ..." (e.g. too many heavy atoms).

    Raises:
        ValueError: if ``kind`` is unknown, or is ``KERNEL`` for models without a
            kernel ridge.
    """
    return _predict_chunk(models, list(smiles), 0, "smiles", kind=kind)


def predict_smiles(models: Sequence[MoleculeModel], smiles: Sequence[str]
                   ) -> tuple[Tensor, Tensor, list[str]]:
    """An ensemble's predictions for a list of SMILES, as ``predict_csv`` makes them.

    Returns:
        mean (M, T) and std (M, T) over the models (zeros for one model; NaN rows where
        a SMILES does not parse), and one error message per SMILES ("" when it parsed).
    """
    mean, std, _, errors = predict_spread(models, smiles)
    return mean, std, errors


def predict_interval(models: Sequence[MoleculeModel], smiles: Sequence[str],
                     calibration: Calibration) -> tuple[Tensor, Tensor, Tensor, list[str]]:
    """An ensemble's predictions for a list of SMILES with their prediction intervals.

    Returns:
        mean (M, T), the intervals' lower and upper ends (M, T) each (NaN rows where a
        SMILES does not parse), and one error message per SMILES as ``predict_smiles``.
    """
    mean, _, u, errors = predict_spread(models, smiles, calibration.spread)
    lower, upper = bounds(mean, u, calibration)  # (M, T) each
    return mean, lower, upper, errors


# A chunk's work in a worker process: (first row, SMILES) -> (mean, std, u, errors).
# The models reach the workers by fork (set by _init_worker), not through a pipe.
_WORKER: dict = {}


def _init_worker(models: Sequence[MoleculeModel], source: str, max_heavy_atoms: int,
                 kind: str, worker_init: Callable[[], None] | None, digest: str) -> None:
    if worker_init is not None:
        worker_init()
    _WORKER.update(models=models, source=source, max_heavy_atoms=max_heavy_atoms, kind=kind,
                   digest=digest)


def _worker_chunk(task: tuple[int, list[str]]) -> tuple:
    first_row, smiles = task
    mean, std, u, errors = _predict_chunk(_WORKER["models"], smiles, first_row,
                                          _WORKER["source"], _WORKER["max_heavy_atoms"],
                                          _WORKER["kind"], cache=_WORKER["digest"])
    return mean.numpy(), std.numpy(), u.numpy(), errors  # arrays travel back as plain bytes


def _predict_stream(models: Sequence[MoleculeModel], tasks: Iterable[tuple[int, list[str]]],
                    source: str, workers: int, worker_init: Callable[[], None] | None,
                    max_heavy_atoms: int = MAX_HEAVY_ATOMS, kind: str = ENSEMBLE
                    ) -> Iterator[tuple[list[str], tuple]]:
    """(SMILES, ``_predict_chunk`` result) for each (first row, SMILES) task, in order.

    With ``workers`` > 1 a pool of forked processes works on up to 2 chunks each at
    a time; the next chunks are read only as results are written, so memory stays
    bounded whatever the input size. A worker that dies (killed, out of memory) ends
    the command with ``BrokenProcessPool`` instead of a wait forever.
    """
    digest = model_digest(models)
    if workers <= 1:
        for first_row, smiles in tasks:
            yield smiles, _predict_chunk(models, smiles, first_row, source, max_heavy_atoms,
                                         kind, cache=digest)
        return
    if kind == KERNEL:  # the posterior std's factor, once, before the workers fork
        models[0].kernel.posterior_factor()
    # Forked workers share this process's memory until they write to it; freezing the
    # objects alive now keeps the workers' garbage collector from touching (and so
    # copying) every page of them (see the docs of gc.freeze).
    gc.freeze()
    try:
        with ProcessPoolExecutor(workers, multiprocessing.get_context("fork"), _init_worker,
                                 (models, source, max_heavy_atoms, kind, worker_init,
                                  digest)) as pool:
            pending: deque = deque()
            try:
                for task in tasks:
                    pending.append((task[1], pool.submit(_worker_chunk, task)))
                    if len(pending) >= 2 * workers:
                        smiles, future = pending.popleft()
                        yield smiles, _from_worker(future.result())
                while pending:
                    smiles, future = pending.popleft()
                    yield smiles, _from_worker(future.result())
            except BaseException:  # SIGTERM, Ctrl-C, a bad line: stop the workers now
                stop_pool(pool)
                raise
    finally:
        gc.unfreeze()


def _from_worker(result: tuple) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, list[str]]:
    mean, std, u, errors = result
    return torch.from_numpy(mean), torch.from_numpy(std), torch.from_numpy(u), errors


def _cell(value: float) -> str:
    return "" if value != value else f"{value:.8g}"  # NaN -> empty cell


def predict_csv(models: Sequence[MoleculeModel], targets: Sequence[str], data: str | Path,
                output: str | Path, smiles_column: str, chunk_rows: int = CHUNK_ROWS,
                workers: int = 1, worker_init: Callable[[], None] | None = None, *,
                encoding: str | None = None, max_heavy_atoms: int = MAX_HEAVY_ATOMS,
                calibration: Calibration | None = None) -> dict:
    """Stream ``data`` through the models into ``output``, ``chunk_rows`` rows at a time.

    The output has the columns ``smiles_column``, one per target, ``<target>_std``
    per target when there are several models, ``<target>_lower`` and ``<target>_upper``
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
        workers: processes featurising and predicting blocks of ``BLOCK_ROWS`` rows in
            parallel (1: this one); the output is the same for any number.
        worker_init: called first in each worker process (the command line limits each
            worker to one torch thread there).
        encoding: the text encoding of ``data`` (None: UTF-8, or UTF-16 with its BOM).
        max_heavy_atoms: larger molecules get no prediction.
        calibration: a regression run's conformal calibration (``load_run``'s
            ``meta["conformal"]``): adds each target's interval.

    Returns:
        ``{"rows": ..., "errors": ..., "notes": ...}`` counts.

    Raises:
        FileNotFoundError: naming ``--data``.
        ValueError: if the SMILES column is missing (listing the columns present) or
            appears twice, or a line of ``data`` is not readable (naming it).
    """
    check_output_file(output, {"--data": data})  # never write over the input
    check_prediction_columns(smiles_column, targets, "--model")  # runs from before the check
    header_out = prediction_columns(smiles_column, targets, len(models) > 1,
                                    calibration is not None)
    counts = {"rows": 0, "errors": 0, "notes": 0}
    with open_csv(data, encoding) as table:
        (col,) = check_columns(table.header, [smiles_column], table.path)
        source = table.path.name
        with atomic_open(output, "w", encoding="utf-8", newline="") as dst:
            writer = csv.writer(dst)
            writer.writerow(header_out)
            tasks = _chunk_tasks(_read_chunks(table.records, chunk_rows), col)
            kind = calibration.spread if calibration is not None else ENSEMBLE
            stream = _predict_stream(models, tasks, source, workers, worker_init,
                                     max_heavy_atoms, kind)
            for smiles, (mean, std, u, messages) in stream:
                writer.writerows(prediction_rows(smiles, mean, std, u, messages,
                                                 len(models) > 1, calibration))
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


def predict_table(models: Sequence[MoleculeModel], targets: Sequence[str],
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
    header = prediction_columns(smiles_column, targets, len(models) > 1,
                                calibration is not None)
    smiles = list(smiles)
    kind = calibration.spread if calibration is not None else ENSEMBLE
    mean, std, u, messages = _predict_chunk(models, smiles, 0, source, max_heavy_atoms, kind)
    return header, prediction_rows(smiles, mean, std, u, messages, len(models) > 1,
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
