"""MoleculeNetwork with global attention blocks: config round trip, old configs, checks,
checkpoints and batching."""

from __future__ import annotations

import pytest
import torch

from setattn.molprop import checkpoint
from setattn.molprop.batching import collate_molecules
from setattn.molprop.config import NetworkConfig
from setattn.molprop.featurize import featurize
from setattn.molprop.network import MoleculeNetwork

SMILES = ["C", "CCO", "c1ccccc1CCN", "CC(=O)Nc1ccc(O)cc1", "CCCCCCCCCCCC"]


def test_config_round_trip_and_old_configs_default_to_off():
    config = NetworkConfig(hidden=8, heads=2, layers=2, global_layers=2, max_hops=5)
    assert NetworkConfig.from_dict(config.to_dict()) == config
    old = NetworkConfig(hidden=8, heads=2).to_dict()
    del old["global_layers"], old["max_hops"]  # a checkpoint saved before the option
    legacy = NetworkConfig.from_dict(old)
    assert legacy.global_layers == 0 and legacy.max_hops == 8
    assert not any(k.startswith("globals.") for k in MoleculeNetwork(legacy).state_dict())


@pytest.mark.parametrize("settings, message", [
    ({"layers": 2, "global_layers": 3}, "^global_layers must be between 0 and layers 2"),
    ({"global_layers": -1}, "^global_layers must be"),
    ({"max_hops": 0}, "max_hops must be >= 1, got 0"),
    ({"max_hops": 5000}, r"max_hops must be <= 1,024 \(the largest setattn accepts\), got 5000"),
])
def test_bad_settings_are_named(settings, message):
    with pytest.raises(ValueError, match=message):
        NetworkConfig(**settings).validate()


def test_checkpoint_keeps_the_global_blocks_and_molecules_do_not_see_each_other(tmp_path):
    torch.manual_seed(0)
    model = MoleculeNetwork(NetworkConfig(hidden=16, heads=4, layers=2, global_layers=1,
                                              max_hops=3)).eval()
    with torch.no_grad():
        model.globals[0].distance_bias.normal_()
    data = [featurize(s) for s in SMILES]
    batch = collate_molecules(data)
    out = model(batch)  # (G, 1)
    alone = torch.cat([model(collate_molecules([d])) for d in data])
    assert (out - alone).abs().max() < 1e-5  # no attention across molecules or padding
    payload = {"kind": "model", "config": model.config.to_dict(),
               "state_dict": model.state_dict(),
               "meta": {"task": "regression", "target_columns": ["y"]}}
    loaded, _ = checkpoint.load_network(checkpoint.save_checkpoint(payload, tmp_path / "m.pt"))
    assert loaded.config.global_layers == 1
    assert torch.equal(loaded(batch), out)
    without = MoleculeNetwork(NetworkConfig(hidden=16, heads=4, layers=2)).eval()
    without.load_state_dict(model.state_dict(), strict=False)
    assert (without(batch) - out).abs().max() > 1e-4  # the global block changes the output
