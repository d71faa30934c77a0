"""Featurised chunks of SMILES, and an ensemble's predictions for them, kept on disk, so
that predicting the same molecules again skips the featurisation (most of a prediction's
time) and, with the same models, the models too.

``predict_csv`` featurises its input ``CHUNK_ROWS`` SMILES at a time; each chunk's
result (the molecules' tensors, which rows were featurised, the message of each row) is
saved in the feature cache folder (``featurize.cache_dir``; ``SETATTN_CACHE_DIR=off``
turns it off) under a name made of a SHA-256 hash of the chunk's SMILES and the
featurisation settings, written atomically, read back with
``torch.load(weights_only=True)`` (tensors, lists and strings only) and used only when
its stored key and content checksum match. The cache is keyed by content, not by file:
the same SMILES in another file, in the same chunks, are found too. Predictions
(``outputs_key``) are keyed by the same and by ``model_digest``, a SHA-256 of the
ensemble's weights (the kernel part's training data included), so another model, or the
same run retrained, never reads them.

The module is a store: ``load_*`` return None where the cache is off or holds nothing
valid, ``save_*`` write or silently do nothing (a read-only or full folder); the caller
computes what is missing.
"""

from __future__ import annotations

import hashlib
import json
import pickle
from collections.abc import Sequence
from pathlib import Path

import torch
from rdkit import rdBase
from torch import Tensor
from torch_geometric.data import Data

from setattn.domains.atom_notes import molecule_note
from setattn.domains.molecules import InvalidSmilesError, MoleculeSkippedError
from setattn.files import atomic_open
from setattn.molprop.batching import pack, unpack
from setattn.molprop.config import FEATURIZE_SECONDS, MAX_HEAVY_ATOMS
from setattn.molprop.conformal import ENSEMBLE
from setattn.molprop.ensemble import Ensemble
from setattn.molprop.featurize import (
    FEATURIZER_VERSION,
    cache_dir,
    content_checksum,
    featurize,
    one_blas_thread,
)

__all__ = ["chunk_key", "load_featurised", "load_outputs", "model_digest", "outputs_key",
           "save_featurised", "save_outputs"]

_FORMAT = "setattn-chunk-1"

Featurised = tuple[list[Data], list[int], list[str]]
"""A chunk's molecules, the offsets of the SMILES they came from, one message per SMILES."""

Outputs = tuple[Tensor, Tensor, Tensor, list[str]]
"""A chunk's predictions: mean (M, T), std (M, T), intervals' ``u`` (M, T), messages."""


def _key(smiles: Sequence[str], descriptor_dim: int, max_heavy_atoms: int,
         **more: str) -> str:
    """SHA-256 (hex) of the SMILES and everything the featurisation (and, in ``more``,
    the prediction) depends on."""
    settings = {"format": _FORMAT, "featurizer": FEATURIZER_VERSION,
                "rdkit": rdBase.rdkitVersion, "descriptor_dim": descriptor_dim,
                "max_heavy_atoms": max_heavy_atoms, "time_budget": FEATURIZE_SECONDS,
                "smiles": list(smiles), **more}
    return hashlib.sha256(json.dumps(settings).encode()).hexdigest()


def model_digest(model: torch.nn.Module) -> str:
    """SHA-256 (hex) of a model (an ``Ensemble``): the class and config of it and of each
    submodule, and every tensor of its state (name, dtype, shape and bytes), in order."""
    digest = hashlib.sha256()
    for name, module in model.named_modules():
        digest.update(f"{name}:{type(module).__name__}:{getattr(module, 'config', '')!r}"
                      .encode())
    for name, tensor in model.state_dict().items():
        flat = tensor.detach().cpu().contiguous().reshape(-1)
        digest.update(f"{name}:{flat.dtype}:{tuple(tensor.shape)}".encode())
        digest.update(flat.view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def _load(file: Path, key: str) -> dict | None:
    """The content of the entry in ``file`` if it is readable, has ``key`` and matches
    its checksum."""
    try:
        entry = torch.load(file, weights_only=True)
        content = entry["content"]
        if entry["key"] != key or entry["checksum"] != content_checksum(content):
            return None
        return content
    except (OSError, RuntimeError, EOFError, ValueError, KeyError, TypeError,
            AttributeError, IndexError, pickle.UnpicklingError):
        return None  # missing, damaged or not ours: compute again


def _featurised(content: dict) -> Featurised | None:
    """A featurised chunk from its cache entry (None if the entry does not hold one)."""
    try:
        return unpack(content), content["ok"].tolist(), list(content["messages"])
    except (RuntimeError, ValueError, KeyError, TypeError, AttributeError, IndexError):
        return None


def _save(file: Path, key: str, content: dict) -> None:
    try:
        # readers never see half a file; no fsync: an entry lost in a crash is recomputed
        with atomic_open(file, "wb", sync=False) as handle:
            torch.save({"key": key, "checksum": content_checksum(content), "content": content},
                       handle)
    except OSError:
        pass  # a read-only or full cache folder: predictions go on without it


def chunk_key(smiles: Sequence[str], descriptor_dim: int, max_heavy_atoms: int) -> str:
    """The key of a chunk's featurisation."""
    return _key(smiles, descriptor_dim, max_heavy_atoms)


def outputs_key(smiles: Sequence[str], descriptor_dim: int, max_heavy_atoms: int,
                models: str, kind: str) -> str:
    """The key of a chunk's predictions by the ensemble of digest ``models``, with
    intervals' ``u`` of ``kind`` (``conformal.ENSEMBLE`` or ``KERNEL``)."""
    return _key(smiles, descriptor_dim, max_heavy_atoms, models=models, kind=kind)


def load_featurised(key: str) -> Featurised | None:
    """The featurised chunk saved under ``key`` (None: the cache is off or lacks it)."""
    folder = cache_dir()
    content = None if folder is None else _load(folder / "chunks" / f"{key[:32]}.pt", key)
    return None if content is None else _featurised(content)


def save_featurised(key: str, featurised: Featurised, descriptor_dim: int) -> None:
    """Keep a featurised chunk under ``key`` (nothing when the cache is off)."""
    folder = cache_dir()
    if folder is None:
        return
    data, ok, messages = featurised
    _save(folder / "chunks" / f"{key[:32]}.pt", key,
          {**pack(data, descriptor_dim), "messages": messages,
           "ok": torch.tensor(ok, dtype=torch.long, device="cpu")})  # (M_ok,)


def load_outputs(key: str) -> Outputs | None:
    """The predictions saved under ``key`` (None: the cache is off or lacks them)."""
    folder = cache_dir()
    content = None if folder is None else _load(folder / "outputs" / f"{key[:32]}.pt", key)
    if content is None:
        return None
    try:
        return content["mean"], content["std"], content["u"], list(content["messages"])
    except (KeyError, TypeError):
        return None


def save_outputs(key: str, outputs: Outputs) -> None:
    """Keep a chunk's predictions under ``key`` (nothing when the cache is off)."""
    folder = cache_dir()
    if folder is None:
        return
    mean, std, u, messages = outputs
    _save(folder / "outputs" / f"{key[:32]}.pt", key,
          {"mean": mean, "std": std, "u": u, "messages": messages})


def _message(err: InvalidSmilesError) -> str:
    """The ``error`` cell of a row left without predictions."""
    if isinstance(err, MoleculeSkippedError):
        return f"skipped: {err.reason}"
    return f"invalid SMILES: {err.reason}"


def featurise_chunk(smiles: Sequence[str], descriptor_dim: int, first_row: int, source: str,
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


Outputs = tuple[Tensor, Tensor, Tensor, list[str]]
"""A chunk's predictions: mean (M, T), std (M, T), intervals' ``u`` (M, T), messages."""


@torch.no_grad()
def predict_chunk(ensemble: Ensemble, smiles: Sequence[str], first_row: int, source: str,
                   max_heavy_atoms: int = MAX_HEAVY_ATOMS, kind: str = ENSEMBLE,
                   digest: str | None = None) -> Outputs:
    """Predictions for one chunk of SMILES; with ``digest`` (the ensemble's
    ``model_digest``), its featurisation and its predictions are read from
    and written to the feature cache.

    Returns:
        mean (M, T) and std (M, T) over the members and the intervals' ``u`` (M, T) of a
        calibration of ``kind`` (``Ensemble.interval_spread``; ``std`` itself for
        ``ENSEMBLE``), NaN rows where the SMILES failed; and one message per SMILES: ""
        when it was predicted as written, "note: ..." when predicted with a remark
        (``atom_notes.molecule_note``: several fragments, the largest one; isotopes
        stripped; dummy atoms or elements the model has not seen), else why it was not
        ("invalid SMILES: ..." or "skipped: ...").
    """
    dim = ensemble.descriptor_dim
    if digest is None or not smiles:
        return chunk_outputs(ensemble, featurise_chunk(smiles, dim, first_row, source,
                                                         max_heavy_atoms), len(smiles), kind)
    key = outputs_key(smiles, dim, max_heavy_atoms, digest, kind)
    cached = load_outputs(key)
    if cached is not None:
        return cached
    features_key = chunk_key(smiles, dim, max_heavy_atoms)
    featurised = load_featurised(features_key)
    if featurised is None:
        featurised = featurise_chunk(smiles, dim, first_row, source, max_heavy_atoms)
        save_featurised(features_key, featurised, dim)
    outputs = chunk_outputs(ensemble, featurised, len(smiles), kind)
    save_outputs(key, outputs)
    return outputs


def chunk_outputs(ensemble: Ensemble, featurised: tuple[list, list[int], list[str]],
                   rows: int, kind: str) -> Outputs:
    """``predict_chunk``'s result from a chunk's featurisation (``rows`` SMILES)."""
    data, ok, errors = featurised
    # the chunk's output table: on the CPU, where the ensemble returns its rows
    mean = torch.full((rows, ensemble.num_tasks), float("nan"), device="cpu")  # (M, T)
    std = torch.full((rows, ensemble.num_tasks), float("nan"), device="cpu")  # (M, T)
    u = std.clone()  # (M, T)
    if data:
        index = torch.tensor(ok, device="cpu")  # (M_ok,)
        mean[index], std[index] = ensemble.spread(data)
        u[index] = ensemble.interval_spread(data, std[index], kind)
    return mean, std, u, errors


def as_arrays(outputs: Outputs) -> tuple:
    """A chunk's outputs with numpy arrays, which travel back from a worker as plain
    bytes (torch would share tensors through file descriptors that end with it)."""
    mean, std, u, messages = outputs
    return mean.numpy(), std.numpy(), u.numpy(), messages


def from_arrays(result: tuple) -> Outputs:
    mean, std, u, messages = result
    return torch.from_numpy(mean), torch.from_numpy(std), torch.from_numpy(u), messages


def worker_chunk(ensemble: Ensemble, source: str, max_heavy_atoms: int, kind: str,
                  digest: str, task: tuple[int, list[str]]) -> tuple[list[str], tuple]:
    """One (first row, SMILES) task of ``predict_csv``: the SMILES and their outputs as
    arrays (``as_arrays``; the same in a worker process and in this one)."""
    first_row, smiles = task
    return smiles, as_arrays(predict_chunk(ensemble, smiles, first_row, source,
                                             max_heavy_atoms, kind, digest))
