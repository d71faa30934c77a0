"""``setattn train --conv``: GAT (v1) layers by default, GATv2 on request, through
training, the saved model and prediction."""

from __future__ import annotations

import pytest
from molecule_runs import freesolv_slice, read_csv, run, train_tiny

from setattn.molprop import checkpoint
from setattn.nn import GATConv, GATv2Conv


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return freesolv_slice(tmp_path_factory.mktemp("data") / "freesolv.csv", 40)


def test_gatv2_layers_train_save_and_predict(data, tmp_path, capsys):
    out = tmp_path / "gatv2"
    assert train_tiny(data, out, capsys, "--conv", "gatv2", epochs=2)[0] == 0
    model = checkpoint.load_network(out / "model_0" / "best.pt")[0]
    assert model.config.conv == "gatv2"
    assert all(type(c) is GATv2Conv for c in model.convs)
    code, _, err = run(["predict", "--model", out, "--data", data,
                        "--output", tmp_path / "preds.csv"], capsys)
    assert code == 0, err
    rows = read_csv(tmp_path / "preds.csv")
    assert len(rows) == 40 and all(float(r["expt"]) == float(r["expt"]) for r in rows)


def test_the_default_is_gat(data, tmp_path, capsys):
    assert train_tiny(data, tmp_path / "gat", capsys)[0] == 0
    model = checkpoint.load_network(tmp_path / "gat" / "model_0" / "best.pt")[0]
    assert model.config.conv == "gat"
    assert all(type(c) is GATConv for c in model.convs)


def test_an_unknown_layer_names_the_flag(data, tmp_path, capsys):
    status, _, err = train_tiny(data, tmp_path / "bad", capsys, "--conv", "gcn")
    assert status == 2 and "argument --conv: invalid choice: 'gcn'" in err
