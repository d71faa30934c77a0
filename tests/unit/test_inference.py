"""The one batch loop: each head of ``forward_batches`` equals the model's own call on one
batch of all molecules, whatever the batching; ensembles stack their members."""

from __future__ import annotations

import pytest
import torch

from setattn.molprop.batching import batches, collate_molecules
from setattn.molprop.featurize import featurize
from setattn.molprop.inference import (
    HEADS,
    ensemble_spread,
    forward_batches,
    member_predictions,
    model_predictions,
)
from setattn.molprop.model import MoleculeModel, MoleculeModelConfig

SMILES = ["C", "CCO", "c1ccccc1CCN", "CC(=O)Nc1ccc(O)cc1", "CCCCCCCCCCCC", "OC(=O)CC#N", "N"]


def _model(seed: int, descriptor_dim: int = 0, kernel_size: int = 0) -> MoleculeModel:
    torch.manual_seed(seed)
    model = MoleculeModel(MoleculeModelConfig(num_tasks=3, hidden=8, heads=2, layers=2,
                                              descriptor_dim=descriptor_dim,
                                              kernel_size=kernel_size, dropout=0.5))
    y = torch.randn(11, 3)  # (M, T) targets to scale by
    model.fit_scaling(y * 2 + 1, torch.randn(11, descriptor_dim) if descriptor_dim else None)
    return model


@pytest.fixture(scope="module")
def data():
    return [featurize(s, 0) for s in SMILES]


def test_each_head_is_the_model_on_one_batch(data):
    model = _model(0)
    model.train()  # forward_batches puts it in eval mode: dropout off
    got = {head: forward_batches(model, batches(data, 3), head) for head in
           ("prediction", "network")}
    model.eval()
    with torch.no_grad():
        whole = collate_molecules(data)
        assert torch.allclose(got["network"], model(whole), atol=1e-6)
        assert torch.allclose(got["prediction"], model.predict(whole), atol=1e-6)
    assert got["network"].shape == (7, 3) and got["network"].device.type == "cpu"
    assert not torch.allclose(got["network"], got["prediction"])  # scaled back to units
    assert torch.allclose(model_predictions(model, data, batch_size=2), got["prediction"],
                          atol=1e-6)


def test_the_kernel_head_is_the_kernel_ridge_alone():
    pytest.importorskip("rdkit")
    from setattn.chem.descriptors import descriptor_count

    dim = descriptor_count()
    data = [featurize(s, dim) for s in SMILES]
    model = _model(1, dim, kernel_size=len(data))
    model.kernel.fit(torch.cat([d.descriptors for d in data]), torch.randn(len(data), 3))
    with torch.no_grad():
        whole = collate_molecules(data)
        assert torch.allclose(forward_batches(model, batches(data, 4), "kernel"),
                              model.kernel_outputs(whole), atol=1e-6)


def test_no_molecules_and_an_unknown_head(data):
    model = _model(2)
    assert forward_batches(model, [], "network").shape == (0, 3)
    assert model_predictions(model, []).shape == (0, 3)
    with pytest.raises(ValueError, match="head must be one of"):
        forward_batches(model, batches(data), "readout")
    assert HEADS == ("prediction", "network", "kernel")


def test_an_ensemble_stacks_its_members(data):
    models = [_model(3), _model(4)]
    each = member_predictions(models, data)  # (K, M, T)
    assert each.shape == (2, 7, 3)
    assert torch.equal(each[1], model_predictions(models[1], data))
    mean, std = ensemble_spread(models, data)
    assert torch.allclose(mean, each.mean(0)) and torch.allclose(std, each.std(0, correction=0))
