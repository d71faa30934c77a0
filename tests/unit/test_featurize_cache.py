"""Cached, parallel featurisation and fast batching give what the plain path gives.

References: ``load_molecule_csv`` + ``rdkit_descriptors`` (a parse of its own) for
``featurize_csv`` (every field of every molecule, and the failures), PyG's
``Batch.from_data_list`` for ``collate_molecules``.
"""

import math

import pytest
import torch
from torch_geometric.data import Batch

from setattn.chem.descriptors import descriptor_count
from setattn.datasets import load_molecule_csv
from setattn.domains.fingerprints import count_fingerprint
from setattn.domains.molecules import keep_largest_fragment, parse_smiles, rdkit_descriptors
from setattn.molprop.batching import PackedMolecules, collate_molecules
from setattn.molprop.featurize import _ENTRY_KEYS, cache_dir, featurize_csv
from setattn.molprop.featurize import content_checksum as _checksum

ROWS = ["CCO,1.5,0", "C1CC,2,1", ",,1", "c1ccccc1,,0", "CC(=O)[O-].[Na+],0.25,1",
        "C,3,0", "N#Cc1ccc(cc1)/C=C/Cl,-1,", "C[C@H](N)C(=O)O,0.5,1"]


def _write(path, rows=ROWS):
    path.write_text("smiles,logp,active\n" + "\n".join(rows) + "\n")
    return path


def _same(a, b):
    """Field-by-field equality of two lists of molecules (NaN equals NaN)."""
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert sorted(x.keys()) == sorted(y.keys())
        for key in x.keys():
            u, v = x[key], y[key]
            if isinstance(u, torch.Tensor):
                assert u.dtype == v.dtype and u.shape == v.shape, key
                assert torch.equal(u.nan_to_num(7.0), v.nan_to_num(7.0)), key
            else:
                assert u == v, key


@pytest.mark.parametrize("descriptors", [False, True])
def test_featurize_csv_equals_plain_path_and_cache(tmp_path, monkeypatch, descriptors):
    monkeypatch.setenv("SETATTN_CACHE_DIR", str(tmp_path / "cache"))
    path = _write(tmp_path / "mols.csv")
    dim = descriptor_count() if descriptors else 0
    ref = load_molecule_csv(path, "smiles", ["logp", "active"])
    ref_data = ref.data
    for d in ref_data:
        if dim:
            d.descriptors = rdkit_descriptors(d.smiles)
            d.fingerprint = count_fingerprint(keep_largest_fragment(parse_smiles(d.smiles)))
    first = featurize_csv(path, "smiles", ["logp", "active"], dim)
    assert len(list(cache_dir().glob("*.pt"))) == 1
    again = featurize_csv(path, "smiles", ["logp", "active"], dim)
    for got in (first, again):
        _same(got.data, ref_data)
        assert [str(e) for e in got.failures] == [str(e) for e in ref.failures]
        assert [(e.row, e.smiles, e.reason) for e in got.failures] == \
            [(e.row, e.smiles, e.reason) for e in ref.failures]
    assert math.isnan(again.data[1].y[0, 0].item())  # benzene's missing logp


def _edit_entry(entry, checksum: bool) -> None:
    """Add 1 to every atom feature of a cache entry, with a matching checksum or not."""
    packed = torch.load(entry, weights_only=True)  # plain tensors, lists and strings
    packed["x"] = packed["x"] + 1.0  # a marker only a read of the cache can return
    if checksum:
        content = {k: v for k, v in packed.items() if k not in _ENTRY_KEYS}
        packed["checksum"] = _checksum(content)
    torch.save(packed, entry)


def test_cache_is_read_back_not_recomputed(tmp_path, monkeypatch):
    monkeypatch.setenv("SETATTN_CACHE_DIR", str(tmp_path / "cache"))
    path = _write(tmp_path / "mols.csv")
    featurize_csv(path, "smiles", "logp")
    (entry,) = cache_dir().glob("*.pt")
    _edit_entry(entry, checksum=True)
    assert torch.equal(featurize_csv(path, "smiles", "logp").data[0].x,
                       load_molecule_csv(path, "smiles", "logp").data[0].x + 1.0)


def test_cache_entry_edited_in_place_is_rebuilt(tmp_path, monkeypatch):
    monkeypatch.setenv("SETATTN_CACHE_DIR", str(tmp_path / "cache"))
    path = _write(tmp_path / "mols.csv")
    featurize_csv(path, "smiles", "logp")
    (entry,) = cache_dir().glob("*.pt")
    _edit_entry(entry, checksum=False)  # the stored checksum no longer matches
    _same(featurize_csv(path, "smiles", "logp").data,
          load_molecule_csv(path, "smiles", "logp").data)  # featurised again
    packed = torch.load(entry, weights_only=True)  # and the entry rewritten
    assert packed["checksum"] == _checksum({k: v for k, v in packed.items()
                                            if k not in _ENTRY_KEYS})


def test_cache_invalidated_by_content_and_settings(tmp_path, monkeypatch):
    monkeypatch.setenv("SETATTN_CACHE_DIR", str(tmp_path / "cache"))
    path = _write(tmp_path / "mols.csv")
    assert [d.smiles for d in featurize_csv(path, "smiles", "logp").data][0] == "CCO"
    _write(path, ["CCN,9,0", *ROWS[1:]])  # same path, other bytes
    changed = featurize_csv(path, "smiles", "logp")
    assert changed.data[0].smiles == "CCN" and changed.data[0].y.item() == 9.0
    other = featurize_csv(path, "smiles", ["active"])  # other columns: its own entry
    assert other.data[0].y.item() == 0.0
    assert len(list(cache_dir().glob("*.pt"))) == 2


def test_cache_off_and_corrupt_entries(tmp_path, monkeypatch):
    monkeypatch.setenv("SETATTN_CACHE_DIR", str(tmp_path / "cache"))
    path = _write(tmp_path / "mols.csv")
    featurize_csv(path, "smiles", "logp")
    (entry,) = cache_dir().glob("*.pt")
    entry.write_bytes(b"not a torch file")
    _same(featurize_csv(path, "smiles", "logp").data,
          load_molecule_csv(path, "smiles", "logp").data)  # refeaturised and rewritten
    assert torch.load(entry, weights_only=True)["smiles"][0] == "CCO"
    monkeypatch.setenv("SETATTN_CACHE_DIR", "off")
    assert cache_dir() is None
    assert len(featurize_csv(path, "smiles", "logp").data) == 6


def test_process_pool_keeps_file_order(tmp_path, monkeypatch):
    monkeypatch.setenv("SETATTN_CACHE_DIR", "off")
    monkeypatch.setenv("SETATTN_FEATURIZE_WORKERS", "2")
    monkeypatch.setattr("setattn.molprop.featurize._CHUNK", 3)  # several chunks per worker
    path = _write(tmp_path / "mols.csv", ROWS * 3)
    got = featurize_csv(path, "smiles", ["logp", "active"])
    ref = load_molecule_csv(path, "smiles", ["logp", "active"])
    _same(got.data, ref.data)
    assert [e.row for e in got.failures] == [e.row for e in ref.failures] == [1, 2, 9, 10, 17, 18]


def test_featurize_csv_bad_input_named(tmp_path):
    path = _write(tmp_path / "mols.csv", ["CCO,1.5,0", "CCN,high,1"])
    with pytest.raises(ValueError, match=r"row 1, column 'logp'.*'high'"):
        featurize_csv(path, "smiles", "logp")
    with pytest.raises(ValueError, match=r"missing column\(s\) \['logP'\]"):
        featurize_csv(path, "smiles", "logP")
    with pytest.raises(FileNotFoundError, match="nope.csv"):
        featurize_csv(tmp_path / "nope.csv", "smiles", "logp")


def test_collate_molecules_equals_pyg_batch(tmp_path):
    path = _write(tmp_path / "mols.csv")
    data = featurize_csv(path, "smiles", ["logp", "active"], descriptor_count()).data
    ours, ref = collate_molecules(data), Batch.from_data_list(data)
    assert ours.num_graphs == ref.num_graphs == len(data)
    _same([ours], [ref])


def test_packed_molecules_batches_equal_pyg_batch(tmp_path):
    path = _write(tmp_path / "mols.csv")
    data = featurize_csv(path, "smiles", ["logp", "active"], descriptor_count()).data
    packed = PackedMolecules(data)
    assert len(packed) == len(data)
    for indices in ([3, 0, 5], [4], list(range(len(data)))[::-1]):
        ours, ref = packed.batch(indices), Batch.from_data_list([data[i] for i in indices])
        assert ours.num_graphs == len(indices)
        _same([ours], [ref])


def test_featurising_keeps_numpy_blas_at_one_thread(monkeypatch):
    """RDKit's AvgIpc multiplies matrices with numpy; featurising chunks limits BLAS to
    one thread (a busy machine otherwise spins its threads) and restores it after."""
    import numpy as np
    from threadpoolctl import threadpool_info

    from setattn.molprop import chunk_cache
    from setattn.molprop import featurize as featurize_module

    def blas_threads():
        return [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]

    before, seen = blas_threads(), []
    real = featurize_module.featurize

    def spy(*args, **kwargs):
        seen.append(blas_threads())
        return real(*args, **kwargs)

    monkeypatch.setattr(chunk_cache, "featurize", spy)
    monkeypatch.setattr(featurize_module, "featurize", spy)
    chunk_cache.featurise_chunk(["CCO", "c1ccccc1"], 0, 0, "x.csv", 300)
    featurize_module._featurize_chunk(([0], ["CCO"], "x.csv", 0, 300))
    assert len(seen) == 3 and all(threads == [1] * len(threads) for threads in seen)
    assert blas_threads() == before and np.dot(np.ones(3), np.ones(3)) == 3.0


def test_training_batches_hold_the_pyg_batch_fields_training_reads(tmp_path):
    path = _write(tmp_path / "mols.csv")
    data = featurize_csv(path, "smiles", ["logp", "active"], descriptor_count()).data
    packed = PackedMolecules(data)
    for indices in ([3, 0, 5], [4], list(range(len(data)))[::-1]):
        ours, ref = packed.training_batch(indices), packed.batch(indices)
        assert ours.num_graphs == ref.num_graphs == len(indices)
        for key in ("x", "edge_index", "edge_attr", "batch", "ptr", "y", "descriptors"):
            assert key in ours
            assert torch.equal(getattr(ours, key).nan_to_num(-7.0), ref[key].nan_to_num(-7.0)), key
        assert "smiles" not in ours and "fingerprint" not in ours
        moved = ours.to("cpu")
        assert torch.equal(moved.x, ours.x) and moved.num_graphs == ours.num_graphs
