"""The ensemble: K networks and one kernel part, the kernel part evaluated once per
batch, the members' stack as each network would give it, and its batching."""

from __future__ import annotations

import pytest
import torch

from setattn.molprop.batching import collate_molecules
from setattn.molprop.config import NetworkConfig
from setattn.molprop.ensemble import NETWORK_WEIGHT, Ensemble, fit_network_weight
from setattn.molprop.featurize import featurize
from setattn.molprop.kernels import KernelConfig, KernelPart
from setattn.molprop.network import MoleculeNetwork

SMILES = ["C", "CCO", "c1ccccc1CCN", "CC(=O)Nc1ccc(O)cc1", "CCCCCCCCCCCC", "OC(=O)CC#N", "N"]


def _network(seed: int, descriptor_dim: int = 0, task: str = "regression") -> MoleculeNetwork:
    torch.manual_seed(seed)
    net = MoleculeNetwork(NetworkConfig(num_tasks=3, task=task, hidden=8, heads=2, layers=2,
                                        descriptor_dim=descriptor_dim, dropout=0.5))
    y = torch.randn(11, 3)  # (M, T) targets to scale by
    net.fit_scaling(y * 2 + 1, torch.randn(11, descriptor_dim) if descriptor_dim else None)
    return net


@pytest.fixture(scope="module")
def data():
    return [featurize(s, 0) for s in SMILES]


@pytest.fixture(scope="module")
def described():
    pytest.importorskip("rdkit")
    from setattn.chem.descriptors import descriptor_count

    return [featurize(s, descriptor_count()) for s in SMILES]


def _kernel(data, task: str = "regression") -> KernelPart:
    config = KernelConfig(len(data), data[0].descriptors.shape[1], 3, task, fingerprints=True)
    g = torch.Generator().manual_seed(0)
    y = torch.randn(len(data), 3, generator=g)
    if task == "classification":
        y = (y > 0).float()
    return KernelPart.fit(data, y, config)[0]


def test_without_a_kernel_part_the_ensemble_is_the_networks_mean(data):
    ensemble = Ensemble([_network(3), _network(4)])
    each = ensemble.member_predictions(data, batch_size=2)  # (K, M, T)
    assert each.shape == (2, 7, 3) and each.device.type == "cpu"
    with torch.no_grad():
        whole = collate_molecules(data)
        second = ensemble.networks[1]
        assert torch.allclose(each[1], second.to_units(second(whole)), atol=1e-6)
    mean, std = ensemble.spread(data)
    assert torch.allclose(mean, each.mean(0)) and torch.allclose(std, each.std(0, correction=0))
    assert float(ensemble.weight) == 1.0 and ensemble.member_predictions([]).shape == (2, 0, 3)


@pytest.mark.parametrize("task", ["regression", "classification"])
def test_each_member_stacks_its_network_with_the_one_kernel_part(described, task):
    kernel = _kernel(described, task)
    ensemble = Ensemble([_network(5, described[0].descriptors.shape[1], task),
                         _network(6, described[0].descriptors.shape[1], task)], kernel,
                         torch.tensor([0.2, 0.5, 0.9]))
    calls = []
    kernel.register_forward_hook(lambda *_: calls.append(1))
    each = ensemble.member_predictions(described, batch_size=3)  # (K, M, T)
    assert len(calls) == 3  # once per batch of 3, 3, 1 molecules, whatever K
    with torch.no_grad():
        whole = collate_molecules(described)
        k = kernel(whole)  # (M, T)
        w = ensemble.weight
        for m, net in enumerate(ensemble.networks):
            out = net(whole)
            if task == "regression":
                expected = net.to_units(w * out + (1 - w) * k)
            else:
                expected = w * torch.sigmoid(out) + (1 - w) * k.clamp(1e-4, 1 - 1e-4)
            assert torch.allclose(each[m], expected, atol=1e-5)


def test_the_differentiable_forward_is_the_members_mean(described):
    ensemble = Ensemble([_network(7, described[0].descriptors.shape[1]),
                         _network(8, described[0].descriptors.shape[1])], _kernel(described)).eval()
    whole = collate_molecules(described)
    with torch.no_grad():
        assert torch.allclose(ensemble(whole), ensemble.member_units(whole).mean(0), atol=1e-6)
    assert float(ensemble.weight) == NETWORK_WEIGHT


def test_the_fitted_weight_prefers_the_part_that_predicts(described):
    dim = described[0].descriptors.shape[1]
    ensemble = Ensemble([_network(9, dim)], _kernel(described))
    # labels that the kernel part predicts exactly: the networks' weight goes to 0
    with torch.no_grad():
        truth = ensemble.kernel_predictions(described)  # (M, T)
    for d, y in zip(described, truth):
        d.y = y[None]
    weight = fit_network_weight(ensemble, described)
    assert weight.shape == (3,) and torch.all(weight < 0.1)


def test_networks_of_different_kinds_are_refused(data):
    with pytest.raises(ValueError, match="network 1 is not of network 0's kind"):
        Ensemble([_network(0), _network(1, task="classification")])
    with pytest.raises(ValueError, match="at least one network"):
        Ensemble([])
