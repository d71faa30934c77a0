"""Size bounds (``setattn.molprop.config``) and the memory estimate
(``setattn.molprop.run``)."""

from __future__ import annotations

import pytest

from setattn.molprop import run
from setattn.molprop.config import NetworkConfig
from setattn.molprop.network import MoleculeNetwork


@pytest.mark.parametrize("settings", [
    {},
    {"hidden": 16, "heads": 2, "layers": 1, "num_tasks": 3},
    {"hidden": 12, "heads": 3, "layers": 2, "descriptor_dim": 7, "norm": "layer"},
    {"hidden": 16, "heads": 4, "layers": 3, "global_layers": 2, "max_hops": 5},
])
def test_parameter_count_is_the_models(settings):
    network = NetworkConfig(**settings, conv="gatv2")  # the larger of the two layers
    model = MoleculeNetwork(network)
    actual = sum(t.numel() for t in [*model.parameters(), *model.buffers()])
    assert run.parameter_count(
        network.hidden, network.layers, num_tasks=network.num_tasks,
        descriptor_dim=network.descriptor_dim,
        layer_norm=network.norm == "layer", global_layers=network.global_layers,
        heads=network.heads, max_hops=network.max_hops) == actual
    # GAT layers (the default) have fewer parameters than GATv2's: the count is an upper bound
    gat = MoleculeNetwork(NetworkConfig(**settings))
    assert gat.config.conv == "gat"
    assert sum(t.numel() for t in [*gat.parameters(), *gat.buffers()]) <= actual


def test_defaults_fit_in_a_gigabyte_and_absurd_sizes_do_not():
    default = run.training_memory(96, 4, 3, 64, 1, descriptor_dim=210)
    assert default.total < 1e9  # far below any machine the defaults run on
    run.check_memory(default, 64, 1, available=10**9)
    # the largest batch a 300-atom limit allows, with an ensemble of 10: still small
    run.check_memory(run.training_memory(96, 4, 3, 64, 10, atoms_per_batch=64 * 300,
                                               descriptor_dim=210), 64, 10, available=10**9)
    huge = run.training_memory(10**9, 4, 3, 64, 1)
    with pytest.raises(ValueError, match=r"needs about .* GB of memory .* but 8\.0 GB is"):
        run.check_memory(huge, 64, 1, available=8 * 10**9)


def test_available_memory_is_known_on_linux():
    available = run.available_memory()
    assert available is not None and available > 10**8


def test_model_bounds_are_checked_by_validate():
    with pytest.raises(ValueError, match="hidden must be <= 8,192 .*, got 12000"):
        NetworkConfig(hidden=12000, heads=4).validate()
    with pytest.raises(ValueError, match="num_tasks must be <= 100,000 .*, got 200000"):
        NetworkConfig(num_tasks=200_000).validate()
    NetworkConfig(hidden=8192, heads=8).validate()  # the bound itself is fine


def test_auto_skips_the_kernel_ridge_where_it_cannot_fit_and_on_refuses(monkeypatch):
    assert run.kernel_memory(3000) >= 480e6  # the peak measured at M = 3,000
    fits = run.kernel_memory(3000)
    assert run.kernel_size("auto", 3000, True, available=fits) == (3000, None)
    assert run.kernel_size("on", 3000, True, available=fits) == (3000, None)
    assert run.kernel_size("off", 3000, True, available=fits) == (0, None)
    assert run.kernel_size("auto", 3000, False, available=fits) == (0, None)
    size, note = run.kernel_size("auto", 20000, True, available=8 * 10**9)
    assert size == 0 and note == ("note: no kernel ridge (--kernel-ridge auto): its fit on "
                                  "20,000 training molecules needs about 22.4 GB of memory "
                                  "but 8.0 GB is available")
    with pytest.raises(ValueError, match=r"^kernel_ridge: on, but its fit on 20,000 "
                                         r"training molecules needs about 22\.4 GB"):
        run.kernel_size("on", 20000, True, available=8 * 10**9)
    size, note = run.kernel_size("auto", 20001, True, available=10**12)
    assert size == 0 and "at most 20,000 training molecules, got 20,001" in note
    with pytest.raises(ValueError, match="at most 20,000 training molecules, got 20,001"):
        run.kernel_size("on", 20001, True, available=10**12)
    monkeypatch.setattr(run, "available_memory", lambda: None)
    assert run.kernel_size("auto", 20000, True) == (20000, None)  # memory unknown
