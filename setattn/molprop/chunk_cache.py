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
(``cached_outputs``) are keyed by the same and by ``model_digest``, a SHA-256 of the
models' weights (the kernel ridge's training data included), so another model, or the
same run retrained, never reads them.
"""

from __future__ import annotations

import hashlib
import json
import pickle
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
from rdkit import rdBase
from torch import Tensor
from torch_geometric.data import Data

from setattn.files import atomic_open
from setattn.molprop.batching import pack, unpack
from setattn.molprop.featurize import FEATURIZER_VERSION, cache_dir, content_checksum
from setattn.molprop.limits import FEATURIZE_SECONDS

__all__ = ["cached_chunk", "cached_outputs", "model_digest"]

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


def model_digest(models: Sequence[torch.nn.Module]) -> str:
    """SHA-256 (hex) of an ensemble: each model's class, its config and every tensor of
    its state (name, dtype, shape and bytes), in order."""
    digest = hashlib.sha256()
    for model in models:
        digest.update(f"{type(model).__name__}:{getattr(model, 'config', '')!r}".encode())
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


def cached_chunk(smiles: Sequence[str], descriptor_dim: int, max_heavy_atoms: int,
                 featurise: Callable[[], Featurised]) -> Featurised:
    """``featurise()`` for these SMILES, read from the cache when it holds them.

    Args:
        smiles: the chunk's SMILES, in order.
        descriptor_dim, max_heavy_atoms: the featurisation's settings (part of the key).
        featurise: computes (molecules, offsets of the featurised SMILES, one message
            per SMILES) when the cache does not hold the chunk.

    Returns:
        What ``featurise`` returns (or returned when the entry was written).
    """
    folder = cache_dir()
    if folder is None or not smiles:
        return featurise()
    key = _key(smiles, descriptor_dim, max_heavy_atoms)
    file = folder / "chunks" / f"{key[:32]}.pt"
    content = _load(file, key)
    cached = None if content is None else _featurised(content)
    if cached is not None:
        return cached
    result = featurise()
    data, ok, messages = result
    _save(file, key, {**pack(data, descriptor_dim), "messages": messages,
                      "ok": torch.tensor(ok, dtype=torch.long, device="cpu")})  # (M_ok,)
    return result


def cached_outputs(smiles: Sequence[str], descriptor_dim: int, max_heavy_atoms: int,
                   models: str, kind: str, predict: Callable[[], Outputs]) -> Outputs:
    """``predict()`` for these SMILES, read from the cache when it holds them.

    Args:
        smiles, descriptor_dim, max_heavy_atoms: as ``cached_chunk``.
        models: the ensemble's ``model_digest``.
        kind: what the intervals' ``u`` is (``conformal.ENSEMBLE`` or ``KERNEL``).
        predict: computes the chunk's outputs when the cache does not hold them.
    """
    folder = cache_dir()
    if folder is None or not smiles:
        return predict()
    key = _key(smiles, descriptor_dim, max_heavy_atoms, models=models, kind=kind)
    file = folder / "outputs" / f"{key[:32]}.pt"
    content = _load(file, key)
    if content is not None:
        try:
            return content["mean"], content["std"], content["u"], list(content["messages"])
        except (KeyError, TypeError):
            pass
    mean, std, u, messages = result = predict()
    _save(file, key, {"mean": mean, "std": std, "u": u, "messages": messages})
    return result
