"""K ensemble members as one ``MemberGroup`` and trained together (``fit_members``):
each member computes what its own network computes, and trains as ``fit`` trains it
on the same batch order."""

from __future__ import annotations

import pytest
import torch
from molecule_runs import freesolv_slice, run

from setattn.molprop.batching import batches
from setattn.molprop.checkpoint import load_checkpoint, load_network
from setattn.molprop.config import NetworkConfig, RunConfig, TrainConfig
from setattn.molprop.featurize import featurize_csv
from setattn.molprop.loop import fit, fit_members
from setattn.molprop.members import MemberGroup
from setattn.molprop.metrics import masked_loss, member_losses
from setattn.molprop.network import MoleculeNetwork
from setattn.molprop.run import trains_together


@pytest.fixture(scope="module")
def molecules(tmp_path_factory):
    path = freesolv_slice(tmp_path_factory.mktemp("members") / "fs.csv", 60)
    return featurize_csv(path, "smiles", ["expt"], 206, use_cache=False).data


def _config(**kw) -> NetworkConfig:
    return NetworkConfig.from_dict({"num_tasks": 1, "task": "regression",
                                    "descriptor_dim": 206, "hidden": 16, "heads": 4, **kw})


def _members(config: NetworkConfig, k: int = 3, dtype=torch.float32) -> list[MoleculeNetwork]:
    nets = []
    for seed in range(k):
        torch.manual_seed(seed)
        net = MoleculeNetwork(config).to(dtype)
        with torch.no_grad():  # every weight away from its initial value (biases are 0)
            for p in net.parameters():
                p.add_(0.05 * torch.randn_like(p))
        nets.append(net)
    torch.manual_seed(7)
    mean, std = torch.randn(206, dtype=dtype), torch.rand(206, dtype=dtype) + 0.5
    for net in nets:  # a run fits every member's scaling on the same molecules
        net.descriptor_mean.copy_(mean)
        net.descriptor_std.copy_(std)
    return nets


def _float64_batch(molecules):
    batch = next(iter(batches(molecules[:30])))
    for key in ("x", "edge_attr", "descriptors"):
        batch[key] = batch[key].double()
    return batch


@pytest.mark.parametrize("norm", ["none", "layer"])
def test_group_computes_each_members_output_and_gradients(molecules, norm):
    nets = _members(_config(layers=2, norm=norm), dtype=torch.float64)
    group = MemberGroup(nets)
    batch = _float64_batch(molecules)
    out = group(batch)  # (G, K, T)
    assert out.shape == (30, 3, 1)
    for m, net in enumerate(nets):
        torch.testing.assert_close(out[:, m], net(batch), rtol=0, atol=1e-12)

    weights = torch.randn_like(out)
    (out * weights).sum().backward()
    for m, net in enumerate(nets):
        (net(batch) * weights[:, m]).sum().backward()
    grads = _members(_config(layers=2, norm=norm), dtype=torch.float64)
    for grad_net, net in zip(grads, nets):  # the members' gradients in networks' layout
        with torch.no_grad():
            for g, p in zip(grad_net.parameters(), net.parameters()):
                g.copy_(p.grad)
    expected = MemberGroup(grads)  # stacked exactly as the group stacks weights
    for (name, p), q in zip(group.named_parameters(), expected.parameters()):
        torch.testing.assert_close(p.grad, q, rtol=0, atol=1e-12, msg=name)


def test_members_written_back_are_the_networks_that_went_in():
    nets = _members(_config(layers=2, norm="layer"))
    template = [MoleculeNetwork(_config(layers=2, norm="layer")) for _ in nets]
    back = MemberGroup(nets).networks(template)
    for net, copy in zip(nets, back):
        state = copy.state_dict()
        assert set(state) == set(net.state_dict())
        for key, value in net.state_dict().items():
            assert torch.equal(state[key], value), key


def test_group_refuses_what_it_cannot_group():
    with pytest.raises(ValueError, match="--conv gatv2"):
        MemberGroup([MoleculeNetwork(_config(conv="gatv2"))])
    with pytest.raises(ValueError, match="one configuration"):
        MemberGroup([MoleculeNetwork(_config()), MoleculeNetwork(_config(hidden=8))])
    with pytest.raises(ValueError, match="at least one"):
        MemberGroup([])


def test_member_losses_are_each_members_masked_loss():
    out, y = torch.randn(5, 3, 2), torch.randn(5, 2)
    y[1, 0] = y[3, 1] = float("nan")
    each = member_losses(out, y, "regression")
    for m in range(3):
        torch.testing.assert_close(each[m], masked_loss(out[:, m], y, "regression"))


def _fit_together(molecules, out, config, **kw):
    nets = _members(_config())
    return fit_members(nets, molecules[:44], molecules[44:], config,
                       [out / f"model_{k}" for k in range(3)], names=["expt"],
                       metas=[{"member": k} for k in range(3)], log=lambda line: None, **kw)


def test_member_trains_as_fit_trains_it_on_the_same_batches(molecules, tmp_path):
    config = TrainConfig(epochs=4, batch_size=16, seed=3, patience=10)
    together = _fit_together(molecules, tmp_path / "together", config)
    alone = []
    for m, net in enumerate(_members(_config())):  # the same initial weights, one by one
        alone.append(fit(net, molecules[:44], molecules[44:], config, tmp_path / f"alone{m}",
                         names=["expt"], log=lambda line: None))
    for t, a in zip(together, alone):
        assert [r["epoch"] for r in t.rows] == [1, 2, 3, 4] and t.best_epoch == a.best_epoch
        # float32 rounding of the grouped products, which Adam's step can amplify where a
        # gradient is near 0: well under a tenth of one step of the rate (1e-3)
        for key, value in a.model.state_dict().items():
            torch.testing.assert_close(t.model.state_dict()[key], value, rtol=1e-3, atol=1e-4)
        assert t.best_value == pytest.approx(a.best_value, rel=1e-4)


def test_each_member_stops_on_its_own_patience(molecules, tmp_path):
    config = TrainConfig(epochs=30, batch_size=16, seed=0, patience=2, lr=3e-2)
    results = _fit_together(molecules, tmp_path, config)
    runs = [len(r.rows) for r in results]
    assert min(runs) < 30  # someone stopped early
    for r in results:  # each stopped two epochs after its own best, or ran to the end
        assert len(r.rows) in (r.best_epoch + 2, 30)
        best = load_network(tmp_path / f"model_{r.rows[0]['model']}" / "best.pt", "cpu")[1]
        assert best["epoch"] == r.best_epoch


def test_interrupted_group_resumes_to_the_same_numbers(molecules, tmp_path):
    config = TrainConfig(epochs=5, batch_size=16, seed=1, patience=10)
    whole = _fit_together(molecules, tmp_path / "whole", config)

    def stop(rows):
        if max(r["epoch"] for r in rows) == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _fit_together(molecules, tmp_path / "cut", config, callback=stop,
                      checkpoint_seconds=1e9)
    last = load_checkpoint(tmp_path / "cut" / "model_0" / "last.pt", "training")
    assert last["progress"]["epoch"] == 2 and len(last["progress"]["members"]) == 3
    resumed = _fit_together(molecules, tmp_path / "cut", config, resume=True)
    for a, b in zip(whole, resumed):
        assert [r["val_rmse"] for r in a.rows] == [r["val_rmse"] for r in b.rows]
        for key, value in a.model.state_dict().items():
            assert torch.equal(b.model.state_dict()[key], value), key


def test_run_refuses_together_where_members_cannot_train_together():
    for flags, named in (({"model": NetworkConfig(conv="gatv2")}, "--conv gatv2"),
                         ({"model": NetworkConfig(global_layers=1)}, "--global-layers"),
                         ({"train": TrainConfig(precision="bf16")}, "--precision bf16")):
        config = RunConfig(data="x.csv", target_columns=["y"], members="together", **flags)
        with pytest.raises(ValueError, match=f"together cannot train with {named}"):
            config.validate()
        auto = RunConfig(data="x.csv", target_columns=["y"], **flags)
        auto.validate()  # auto trains those apart
        assert not trains_together(auto, auto.model)


def test_auto_trains_an_ensemble_together_where_it_can():
    run_config = RunConfig(data="x.csv", target_columns=["y"])
    assert run_config.members == "auto" and trains_together(run_config, run_config.model)
    one = RunConfig(data="x.csv", target_columns=["y"], ensemble_size=1)
    assert not trains_together(one, one.model)
    apart = RunConfig(data="x.csv", target_columns=["y"], members="apart")
    assert not trains_together(apart, apart.model)
    # a pretrained encoder's architecture decides, not the flags it replaced
    assert not trains_together(run_config, NetworkConfig(conv="gatv2"))


def test_a_run_saved_before_members_existed_resumes_apart():
    saved = RunConfig(data="x.csv", target_columns=["y"]).to_dict()
    del saved["members"]
    assert RunConfig.from_dict(saved).members == "apart"


def test_train_together_writes_every_members_weights_and_log(tmp_path, capsys):
    data = freesolv_slice(tmp_path / "fs.csv", 50)
    out = tmp_path / "run"
    status, printed, _ = run(["train", "--data", data, "--target-columns", "expt",
                              "--output-dir", out, "--members", "together", "--epochs", "3",
                              "--hidden", "8", "--heads", "2", "--num-threads", "1"], capsys)
    assert status == 0
    assert printed.count("model 2 epoch ") == 3
    for k in range(3):
        assert (out / f"model_{k}" / "best.pt").is_file()
    log = (out / "log.csv").read_text().splitlines()
    assert [line.split(",")[:2] for line in log[1:]] == [
        [str(k), str(e)] for k in range(3) for e in (1, 2, 3)]
    status, _, _ = run(["predict", "--model", out, "--data", data, "--output",
                        tmp_path / "p.csv"], capsys)
    assert status == 0
    rows = (tmp_path / "p.csv").read_text().splitlines()
    assert len(rows) == 51 and rows[0].startswith("smiles,expt,expt_std")
