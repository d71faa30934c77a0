"""Featurised blocks of SMILES come back from the cache as they went in, and only for the
same SMILES and settings; a damaged entry or ``SETATTN_CACHE_DIR=off`` means featurising.
``predict_csv`` cuts its input into fixed blocks, and its default worker count leaves the
busy cores alone."""

from __future__ import annotations

import os

import torch

from setattn.chem.descriptors import descriptor_count
from setattn.molprop import chunk_cache, predict
from setattn.molprop.chunk_cache import featurise_chunk

SMILES = ["CCO", "not a smiles", "c1ccccc1O", "CC(=O)[O-].[Na+]"]


def counted(smiles, calls, dim=0):
    def featurise():
        calls.append(1)
        return featurise_chunk(smiles, dim, 0, "test.csv", 300)
    return featurise


def cached_chunk(smiles, dim, max_heavy_atoms, featurise):
    """The featurised chunk from the store, or ``featurise()`` saved there (what
    ``predict`` does with a chunk)."""
    key = chunk_cache.chunk_key(smiles, dim, max_heavy_atoms)
    hit = chunk_cache.load_featurised(key)
    if hit is not None:
        return hit
    result = featurise()
    chunk_cache.save_featurised(key, result, dim)
    return result


def entries(folder):
    return sorted((folder / "chunks").glob("*.pt"))


def test_second_call_reads_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SETATTN_CACHE_DIR", str(tmp_path))
    dim, calls = descriptor_count(), []
    cold = cached_chunk(SMILES, dim, 300, counted(SMILES, calls, dim))
    warm = cached_chunk(SMILES, dim, 300, counted(SMILES, calls, dim))
    assert len(calls) == 1 and len(entries(tmp_path)) == 1
    assert warm[1] == cold[1] == [0, 2, 3]
    assert warm[2] == cold[2] and warm[2][1].startswith("invalid SMILES")
    assert warm[2][3].startswith("note: ")
    for a, b in zip(cold[0], warm[0]):
        assert a.smiles == b.smiles
        for key in ("x", "edge_index", "edge_attr", "descriptors"):
            assert torch.equal(a[key], b[key])


def test_other_smiles_or_settings_are_other_entries(tmp_path, monkeypatch):
    monkeypatch.setenv("SETATTN_CACHE_DIR", str(tmp_path))
    calls = []
    cached_chunk(SMILES, 0, 300, counted(SMILES, calls))
    cached_chunk(SMILES[:3], 0, 300, counted(SMILES[:3], calls))
    cached_chunk(SMILES, 0, 5, counted(SMILES, calls))
    assert len(calls) == 3 and len(entries(tmp_path)) == 3


def test_damaged_entry_is_featurised_again(tmp_path, monkeypatch):
    monkeypatch.setenv("SETATTN_CACHE_DIR", str(tmp_path))
    calls = []
    first = cached_chunk(SMILES, 0, 300, counted(SMILES, calls))
    (file,) = entries(tmp_path)
    entry = torch.load(file, weights_only=True)
    entry["content"]["x"][0, 0] += 1.0  # edited content: the checksum no longer matches
    torch.save(entry, file)
    again = cached_chunk(SMILES, 0, 300, counted(SMILES, calls))
    assert len(calls) == 2 and torch.equal(again[0][0].x, first[0][0].x)
    file.write_bytes(b"not a torch file")
    cached_chunk(SMILES, 0, 300, counted(SMILES, calls))
    assert len(calls) == 3


def test_cache_off_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("SETATTN_CACHE_DIR", "off")
    calls = []
    for _ in range(2):
        cached_chunk(SMILES, 0, 300, counted(SMILES, calls))
    assert len(calls) == 2 and not list(tmp_path.iterdir())


def test_chunks_are_split_into_blocks_at_fixed_rows():
    chunks = [[[f"C{i}"] for i in range(600)], [["O"]] * 10]  # CSV records, column 0
    tasks = list(predict._chunk_tasks(chunks, 0))
    assert [(first, len(smiles)) for first, smiles in tasks] == \
        [(0, 250), (250, 250), (500, 100), (600, 10)]
    assert tasks[1][1][0] == "C250" and predict.BLOCK_ROWS == 250


def test_free_cores_leave_the_busy_ones(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    monkeypatch.setattr(os, "getloadavg", lambda: (2.7, 1.0, 1.0))
    assert predict.free_cores() == 2
    monkeypatch.setattr(os, "getloadavg", lambda: (9.0, 1.0, 1.0))
    assert predict.free_cores() == 1
    monkeypatch.setattr(os, "getloadavg", lambda: (0.2, 1.0, 1.0))
    assert predict.free_cores() == 4


def _tiny_models(seed):
    from setattn.molprop.config import NetworkConfig
    from setattn.molprop.ensemble import Ensemble
    from setattn.molprop.network import MoleculeNetwork

    torch.manual_seed(seed)
    return Ensemble([MoleculeNetwork(NetworkConfig(hidden=8, heads=1))]).eval()


def test_predictions_come_back_only_for_the_same_models(tmp_path, monkeypatch):
    monkeypatch.setenv("SETATTN_CACHE_DIR", str(tmp_path))
    models, other = _tiny_models(0), _tiny_models(1)
    digest, other_digest = chunk_cache.model_digest(models), chunk_cache.model_digest(other)
    assert digest == chunk_cache.model_digest(_tiny_models(0)) != other_digest
    calls = []
    real = chunk_cache.chunk_outputs

    def counting(*args):
        calls.append(1)
        return real(*args)

    monkeypatch.setattr(chunk_cache, "chunk_outputs", counting)
    cold = chunk_cache.predict_chunk(models, SMILES, 0, "test.csv", digest=digest)
    warm = chunk_cache.predict_chunk(models, SMILES, 0, "test.csv", digest=digest)
    assert len(calls) == 1 and len(list((tmp_path / "outputs").glob("*.pt"))) == 1
    for a, b in zip(cold[:3], warm[:3]):
        assert torch.equal(a.isnan(), b.isnan()) and torch.equal(a.nan_to_num(), b.nan_to_num())
    assert cold[3] == warm[3] and cold[3][1].startswith("invalid SMILES")
    fresh = chunk_cache.predict_chunk(other, SMILES, 0, "test.csv", digest=other_digest)
    assert len(calls) == 2 and not torch.equal(fresh[0][0], cold[0][0])
    assert len(entries(tmp_path)) == 1  # the featurisation was shared by both models
    alone = chunk_cache.predict_chunk(other, SMILES, 0, "test.csv")
    assert torch.equal(alone[0][0], fresh[0][0])
