"""Featurised chunks of SMILES kept on disk, so that predicting the same molecules again
skips the featurisation (most of a prediction's time with RDKit descriptors).

``predict_csv`` featurises its input ``CHUNK_ROWS`` SMILES at a time; each chunk's
result (the molecules' tensors, which rows were featurised, the message of each row) is
saved in the feature cache folder (``featurize.cache_dir``; ``SETATTN_CACHE_DIR=off``
turns it off) under a name made of a SHA-256 hash of the chunk's SMILES and the
featurisation settings, written atomically, read back with
``torch.load(weights_only=True)`` (tensors, lists and strings only) and used only when
its stored key and content checksum match. The cache is keyed by content, not by file:
the same SMILES in another file, in the same chunks, are found too.
"""

from __future__ import annotations

import hashlib
import json
import pickle
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
from rdkit import rdBase
from torch_geometric.data import Data

from setattn.files import atomic_open
from setattn.molprop.batching import pack, unpack
from setattn.molprop.featurize import FEATURIZER_VERSION, cache_dir, content_checksum
from setattn.molprop.limits import FEATURIZE_SECONDS

__all__ = ["cached_chunk"]

_FORMAT = "setattn-chunk-1"

Featurised = tuple[list[Data], list[int], list[str]]
"""A chunk's molecules, the offsets of the SMILES they came from, one message per SMILES."""


def _key(smiles: Sequence[str], descriptor_dim: int, max_heavy_atoms: int) -> str:
    """SHA-256 (hex) of the SMILES and everything the featurisation depends on."""
    settings = {"format": _FORMAT, "featurizer": FEATURIZER_VERSION,
                "rdkit": rdBase.rdkitVersion, "descriptor_dim": descriptor_dim,
                "max_heavy_atoms": max_heavy_atoms, "time_budget": FEATURIZE_SECONDS,
                "smiles": list(smiles)}
    return hashlib.sha256(json.dumps(settings).encode()).hexdigest()


def _load(file: Path, key: str) -> Featurised | None:
    """The entry in ``file`` if it is readable, has ``key`` and matches its checksum."""
    try:
        entry = torch.load(file, weights_only=True)
        content = entry["content"]
        if entry["key"] != key or entry["checksum"] != content_checksum(content):
            return None
        return unpack(content), content["ok"].tolist(), list(content["messages"])
    except (OSError, RuntimeError, EOFError, ValueError, KeyError, TypeError,
            AttributeError, IndexError, pickle.UnpicklingError):
        return None  # missing, damaged or not ours: featurise again


def _save(file: Path, key: str, result: Featurised, descriptor_dim: int) -> None:
    data, ok, messages = result
    content = {**pack(data, descriptor_dim), "messages": messages,
               "ok": torch.tensor(ok, dtype=torch.long, device="cpu")}  # (M_ok,)
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
    cached = _load(file, key)
    if cached is not None:
        return cached
    result = featurise()
    _save(file, key, result, descriptor_dim)
    return result
