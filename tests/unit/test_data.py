"""Loaders: real rows of every bundled set, and clear errors on bad files."""

from __future__ import annotations

import csv
import gzip
import math
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from setattn import datasets as sd
from setattn.datasets.safe_pickle import _decode_pickle
from setattn.domains.molecules import ATOM_FEATURE_DIM, BOND_FEATURE_DIM, InvalidSmilesError

SHARED_PLANETOID = Path(__file__).resolve().parents[3] / "shared" / "data" / "planetoid"
TOX21_BAD_ROWS = [1322, 2290, 2297, 3558, 4565, 4649, 5538, 6723]


@pytest.fixture(scope="module")
def tox21() -> sd.MoleculeSet:
    return sd.load_tox21()


@pytest.fixture(scope="module")
def cora():
    return sd.load_cora()


# ----------------------------------------------------------------------------
# Cora / Planetoid
# ----------------------------------------------------------------------------


def test_cora_documented_counts(cora):
    assert cora.num_nodes == 2708
    assert cora.x.shape == (2708, 1433) and cora.x.dtype == torch.float32
    assert set(cora.x.unique().tolist()) == {0.0, 1.0}  # binary bag of words
    assert int(cora.x.sum()) == 49216
    assert int(cora.y.max()) + 1 == 7
    assert cora.y.bincount().tolist() == [351, 217, 418, 818, 426, 298, 180]
    assert [int(m.sum()) for m in (cora.train_mask, cora.val_mask, cora.test_mask)] == [
        140,
        500,
        1000,
    ]
    # The standard split: 20 training nodes per class, the first 140 nodes.
    assert cora.y[cora.train_mask].bincount().tolist() == [20] * 7
    assert cora.train_mask[:140].all() and not cora.train_mask[140:].any()
    assert cora.val_mask[140:640].all()
    assert not (cora.train_mask & cora.val_mask).any()
    assert not (cora.val_mask & cora.test_mask).any()


def test_cora_edges_are_undirected_simple(cora):
    edge_index = cora.edge_index
    assert edge_index.shape == (2, 10556)
    assert edge_index.dtype == torch.long
    assert not (edge_index[0] == edge_index[1]).any()  # no self loops
    pairs = set(map(tuple, edge_index.t().tolist()))
    assert len(pairs) == 10556  # no duplicates
    assert all((j, i) in pairs for i, j in pairs)  # symmetric
    assert sum(1 for i, j in pairs if i < j) == 5278  # undirected edges


def test_load_cora_never_unpickles(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("pickle used at load time")

    monkeypatch.setattr(pickle, "load", refuse)
    monkeypatch.setattr(pickle, "loads", refuse)
    monkeypatch.setattr(pickle, "Unpickler", refuse)
    assert sd.load_cora().num_nodes == 2708


@pytest.mark.skipif(not SHARED_PLANETOID.is_dir(), reason="shared raw Planetoid files absent")
def test_raw_planetoid_files_match_npz(cora):
    raw = sd.load_planetoid(SHARED_PLANETOID, "Cora")  # the pickle-free decoder
    for key in ("x", "y", "edge_index", "train_mask", "val_mask", "test_mask"):
        assert torch.equal(raw[key], cora[key]), key


@pytest.mark.skipif(not SHARED_PLANETOID.is_dir(), reason="shared raw Planetoid files absent")
def test_cora_matches_pyg_reader(cora):
    pytest.importorskip("scipy")
    from torch_geometric.io import read_planetoid_data

    ref = read_planetoid_data(str(SHARED_PLANETOID), "cora")  # PyG unpickles; fine in a test
    assert torch.equal(ref.x, cora.x)
    assert torch.equal(ref.y, cora.y)
    assert torch.equal(ref.edge_index, cora.edge_index)
    assert torch.equal(ref.test_mask, cora.test_mask)


def _write_pickle(path: Path, obj: object) -> None:
    path.write_bytes(pickle.dumps(obj, protocol=2))


def test_raw_planetoid_reassembles_test_rows_and_gaps(tmp_path):
    """A tiny CiteSeer-like set: unsorted test index with a gap at node 5."""
    x = np.eye(4, dtype=np.float32)[:2]  # 2 training nodes, 4 features
    allx = np.eye(4, dtype=np.float32)  # nodes 0-3
    tx = np.array([[1, 1, 0, 0], [0, 0, 1, 1]], dtype=np.float32)  # rows for nodes 6, 4
    y = np.eye(3, dtype=np.int64)[[0, 1]]
    ally = np.eye(3, dtype=np.int64)[[0, 1, 2, 0]]
    ty = np.eye(3, dtype=np.int64)[[2, 1]]
    graph = {0: [1, 1, 0], 1: [0], 2: [6], 3: [], 4: [3], 5: [], 6: [2]}
    for part, obj in [("x", x), ("allx", allx), ("tx", tx), ("y", y), ("ally", ally), ("ty", ty)]:
        _write_pickle(tmp_path / f"ind.tiny.{part}", obj)
    _write_pickle(tmp_path / "ind.tiny.graph", graph)
    (tmp_path / "ind.tiny.test.index").write_text("6\n4\n")

    data = sd.load_planetoid(tmp_path, "tiny")
    assert data.num_nodes == 7
    assert torch.equal(data.x[6], torch.tensor([1.0, 1, 0, 0]))  # tx row 0 -> node 6
    assert torch.equal(data.x[4], torch.tensor([0.0, 0, 1, 1]))  # tx row 1 -> node 4
    assert torch.equal(data.x[5], torch.zeros(4))  # the gap
    assert data.y.tolist() == [0, 1, 2, 0, 1, 0, 2]
    assert data.test_mask.nonzero().view(-1).tolist() == [4, 6]
    assert data.train_mask.nonzero().view(-1).tolist() == [0, 1]
    # duplicates and the self loop 0-0 are gone; 0-1, 2-6, 3-4 in both directions,
    # sorted by target
    assert data.edge_index.tolist() == [[1, 0, 6, 4, 3, 2], [0, 1, 2, 3, 4, 6]]
    assert data.val_mask.nonzero().view(-1).tolist() == [2, 3]  # the rest of allx

    out = sd.convert_planetoid(tmp_path, "tiny", tmp_path / "tiny.npz")
    again = sd.load_planetoid(out.parent, "tiny")  # now from the .npz
    for key in ("x", "y", "edge_index", "train_mask", "val_mask", "test_mask"):
        assert torch.equal(again[key], data[key]), key


@pytest.mark.parametrize("protocol", [0, 2, 4])
def test_pickle_decoder_rebuilds_plain_data(protocol):
    import io

    obj = {
        "ints": np.arange(6, dtype=np.int32).reshape(2, 3),
        "big_endian": np.array([1.5, -2.0], dtype=">f8"),
        "fortran": np.asfortranarray(np.arange(6, dtype=np.int64).reshape(3, 2)),
        "nested": [1, 2.5, "a", None, True, (3, 4)],
    }
    decoded = _decode_pickle(io.BytesIO(pickle.dumps(obj, protocol=protocol)), "test")
    for key in ("ints", "big_endian", "fortran"):
        assert decoded[key].dtype == obj[key].dtype
        np.testing.assert_array_equal(decoded[key], obj[key])
    assert decoded["nested"] == obj["nested"]


class _Evil:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


def test_pickle_decoder_refuses_code(tmp_path):
    marker = tmp_path / "pwned"
    _write_pickle(tmp_path / "ind.evil.x", _Evil(marker))
    with pytest.raises(ValueError, match="refusing"):
        sd.load_planetoid(tmp_path, "evil")
    assert not marker.exists()


@pytest.mark.parametrize(
    "payload",
    [b"\x80\x02]q\x00(K\x01", b"\x80\x02K\x01K\x02a.", b"\x80\x02K\x01K\x02."],
    ids=["truncated", "append-to-int", "two-objects"],
)
def test_pickle_decoder_rejects_malformed(payload):
    import io

    with pytest.raises(ValueError, match="bad.pkl"):
        _decode_pickle(io.BytesIO(payload), "bad.pkl")


def test_load_planetoid_missing_files_names_them(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"citeseer\.npz.*ind\.citeseer"):
        sd.load_planetoid(tmp_path, "CiteSeer")


# ----------------------------------------------------------------------------
# Molecules
# ----------------------------------------------------------------------------


def test_freesolv():
    result = sd.load_freesolv()
    assert len(result.data) == 642 and result.failures == []
    assert result.target_columns == ["expt"]
    first = result.data[0]
    assert first.smiles == "CN(C)C(=O)c1ccc(cc1)OC"
    assert first.y.shape == (1, 1) and first.y.item() == pytest.approx(-11.01)
    assert first.x.shape == (13, ATOM_FEATURE_DIM)
    assert first.edge_attr.shape == (26, BOND_FEATURE_DIM)
    assert [d.row for d in result.data[:3]] == [0, 1, 2]


def test_esol():
    result = sd.load_esol()
    assert len(result.data) == 1128 and result.failures == []
    assert result.data[0].y.item() == pytest.approx(-0.77)


def test_tox21_rows_labels_and_failures(tox21):
    assert len(tox21.data) + len(tox21.failures) == 7831
    assert len(tox21.data) == 7823
    assert [err.row for err in tox21.failures] == TOX21_BAD_ROWS
    first_bad = tox21.failures[0]
    assert first_bad.smiles == "NC(=O)NC1N=C(O[AlH3](O)O)NC1=O"
    assert "row 1322" in str(first_bad) and "tox21.csv" in str(first_bad)
    assert "valence" in first_bad.reason

    y = torch.cat([d.y for d in tox21.data])  # (7823, 12)
    assert y.shape == (7823, 12)
    assert int(torch.isnan(y).sum()) == 16012  # missing labels kept as NaN
    observed = y[~torch.isnan(y)]
    assert set(observed.unique().tolist()) == {0.0, 1.0}
    row0 = tox21.data[0].y[0].tolist()
    assert row0[:3] == [0.0, 0.0, 1.0] and math.isnan(row0[3]) and math.isnan(row0[4])
    assert [d.row for d in tox21.data[1320:1324]] == [1320, 1321, 1323, 1324]  # 1322 skipped


def test_tox21_batches_with_pyg(tox21):
    from torch_geometric.loader import DataLoader

    batch = next(iter(DataLoader(tox21.data, batch_size=32)))
    assert batch.num_graphs == 32
    assert batch.y.shape == (32, 12)
    assert batch.x.shape[1] == ATOM_FEATURE_DIM


def test_solubility_pair():
    train, test = sd.load_solubility("train"), sd.load_solubility("test")
    assert (len(train.data), len(test.data)) == (1025, 257)
    assert train.failures == [] and test.failures == []
    assert train.data[0].smiles == "CCCCC" and train.data[0].y.item() == pytest.approx(-3.18)
    with pytest.raises(ValueError, match="split"):
        sd.load_solubility("valid")


def test_molecule_csv_invalid_smiles_reports_row(tmp_path):
    path = tmp_path / "mols.csv"
    path.write_text(
        "smiles,logp,name\nCCO,1.5,ethanol\nC1CC,2,broken\n,,empty\nc1ccccc1,,benzene\n"
    )
    result = sd.load_molecule_csv(path, "smiles", "logp")
    assert [d.smiles for d in result.data] == ["CCO", "c1ccccc1"]
    assert [d.row for d in result.data] == [0, 3]
    assert result.data[0].y.tolist() == [[1.5]]
    assert math.isnan(result.data[1].y.item())
    assert [(e.row, e.smiles) for e in result.failures] == [(1, "C1CC"), (2, "")]
    assert isinstance(result.failures[0], InvalidSmilesError)
    assert "row 1 of mols.csv" in str(result.failures[0])
    assert "empty SMILES" in str(result.failures[1])


def test_molecule_csv_missing_column_lists_present(tmp_path):
    path = tmp_path / "mols.csv"
    path.write_text("smiles,logp\nCCO,1.5\n")
    with pytest.raises(ValueError, match=r"missing column\(s\) \['logP'\].*\['smiles', 'logp'\]"):
        sd.load_molecule_csv(path, "smiles", ["logP"])


def test_molecule_csv_bad_target_names_row_and_column(tmp_path):
    path = tmp_path / "mols.csv"
    path.write_text("smiles,logp\nCCO,1.5\nCCN,high\n")
    with pytest.raises(ValueError, match=r"row 1, column 'logp'.*'high'"):
        sd.load_molecule_csv(path, "smiles", "logp")


def test_missing_file_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.csv"):
        sd.load_molecule_csv(tmp_path / "nope.csv", "smiles", "y")


# ----------------------------------------------------------------------------
# Text
# ----------------------------------------------------------------------------


def test_mr():
    mr = sd.load_mr()
    assert len(mr.texts) == 10662
    assert mr.labels.bincount().tolist() == [5331, 5331]
    assert mr.classes == ["negative", "positive"]
    assert mr.texts[0] == "simplistic , silly and tedious ."
    assert mr.labels[0] == 0 and mr.labels[5331] == 1
    assert mr.texts[5331].startswith("the rock is destined")


def test_trec_and_cr():
    train, test = sd.load_trec("train"), sd.load_trec("test")
    assert (len(train.texts), len(test.texts)) == (5452, 500)
    assert train.classes == test.classes == sd.TREC_CLASSES
    assert test.labels.bincount().tolist() == [138, 94, 9, 65, 81, 113]
    assert test.texts[2] == "Who was Galileo ?" and test.classes[test.labels[2]] == "human"
    cr = sd.load_cr()
    assert cr.labels.bincount().tolist() == [1368, 2407] and cr.classes[1] == "positive"
    with pytest.raises(ValueError, match="split must be"):
        sd.load_trec("dev")


def test_labelled_lines_bad_label(tmp_path):
    path = tmp_path / "lines.txt"
    path.write_text("1 fine\n\n7 too high\n")
    with pytest.raises(ValueError, match=r"lines.txt: line 3: label '7' is not a class index 0-1"):
        sd.load_labelled_lines(path, ["a", "b"])
    path.write_text("1 fine\n0 ok\n")
    assert sd.load_labelled_lines(path, ["a", "b"]).labels.tolist() == [1, 0]


def test_text_csv(tmp_path):
    path = tmp_path / "texts.csv"
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["id", "text", "stars"])
        writer.writerows([[1, "Great, fun film", "10"], [2, "", "2"], [3, "Meh", "2"]])
    texts = sd.load_text_csv(path, "text", "stars")
    assert texts.texts == ["Great, fun film", "", "Meh"]
    assert texts.classes == ["2", "10"]  # integers sort numerically
    assert texts.labels.tolist() == [1, 0, 0]
    unlabelled = sd.load_text_csv(path, "text")
    assert unlabelled.classes == [] and unlabelled.labels.tolist() == [0, 0, 0]
    with pytest.raises(ValueError, match=r"\['review'\].*\['id', 'text', 'stars'\]"):
        sd.load_text_csv(path, "review", "stars")


def test_text_csv_empty_label_names_row(tmp_path):
    path = tmp_path / "texts.csv"
    path.write_text("text,label\nfine,pos\nbad,\n")
    with pytest.raises(ValueError, match=r"row 1, column 'label'"):
        sd.load_text_csv(path, "text", "label")


# ----------------------------------------------------------------------------
# Images
# ----------------------------------------------------------------------------


def test_digits():
    digits = sd.load_digits()
    assert digits.images.shape == (1797, 1, 8, 8)
    assert digits.labels.shape == (1797,)
    assert digits.labels.bincount().tolist() == [178, 182, 177, 183, 181, 182, 181, 179, 174, 180]
    assert float(digits.images.min()) == 0.0 and float(digits.images.max()) == 1.0
    first_row = (digits.images[0, 0, 0] * 16).tolist()
    assert first_row == [0, 0, 5, 13, 9, 1, 0, 0]
    assert digits.labels[0] == 0


def test_mnist5k():
    mnist = sd.load_mnist5k()
    assert mnist.images.shape == (5000, 1, 28, 28)
    assert mnist.labels.bincount().tolist() == [500] * 10
    assert float(mnist.images.max()) == 1.0


def test_image_csv_channel_order_and_errors(tmp_path):
    image = torch.arange(12, dtype=torch.float32).reshape(3, 2, 2)  # (C, H, W)
    path = tmp_path / "rgb.csv.gz"
    with gzip.open(path, "wt") as handle:
        handle.write(",".join(str(int(v)) for v in image.reshape(-1)) + ",7\n")
    loaded = sd.load_image_csv(path, 2, 2, channels=3)
    assert torch.equal(loaded.images[0], image)
    assert loaded.labels.tolist() == [7]

    short = tmp_path / "short.csv"
    short.write_text("1,2,3,4,0\n1,2,3,0\n")
    with pytest.raises(ValueError, match=r"short.csv: line 2 has 4 values, expected 5"):
        sd.load_image_csv(short, 2, 2)
    wrong = tmp_path / "wrong.csv"
    wrong.write_text("1,2,3,4,0\n1,x,3,4,0\n")
    with pytest.raises(ValueError, match=r"wrong.csv: line 2, column 1: 'x'"):
        sd.load_image_csv(wrong, 2, 2)
