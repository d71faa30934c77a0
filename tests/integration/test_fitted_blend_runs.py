"""The networks' weight against the kernel part fitted per task on the validation part, in
runs: written once into ``ensemble.pt`` (``best.pt`` holds a network alone); a run that
started with the fixed weight (or before the option existed) resumes with it, and a run
written by setattn 0.2.0 loads with its weight but cannot be resumed."""

from __future__ import annotations

import json

import pytest
import torch
from molecule_runs import (
    as_written_by_0_2_0,
    freesolv_slice,
    read_csv,
    run_from_before,
    sha256,
    train_tiny,
)

from setattn.molprop.batching import collate_molecules
from setattn.molprop.checkpoint import (
    ENSEMBLE_FILE,
    LEGACY_KEYS,
    load_checkpoint,
    load_run,
    read_ensemble_config,
)
from setattn.molprop.ensemble import NETWORK_WEIGHT
from setattn.molprop.featurize import featurize


def test_a_run_started_with_the_fixed_weight_resumes_with_it(tmp_path, capsys):
    data = freesolv_slice(tmp_path / "fs.csv", 30)
    out = tmp_path / "run"
    first = run_from_before(data, out, capsys, "--network-weight", "fixed",
                             "network_weight")  # the default now: stacked
    assert not any(key in load_checkpoint(out / "model_0" / "best.pt")["config"]
                   for key in LEGACY_KEYS)  # the choice is the ensemble's, not the network's
    status, stdout, _ = train_tiny(data, out, capsys, "--resume")
    assert status == 0 and "network weight in the blend" not in stdout
    ensemble, _ = load_run(out)
    assert ensemble.weight.shape == () and float(ensemble.weight) == NETWORK_WEIGHT
    assert read_ensemble_config(out)["weight"] == "fixed"
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["test"]["rmse"] == first and metrics["components"]["blend"] == NETWORK_WEIGHT


def test_the_fitted_weights_are_written_into_ensemble_pt_once(tmp_path, capsys):
    data = freesolv_slice(tmp_path / "fs.csv", 40)
    out = tmp_path / "run"
    status, stdout, _ = train_tiny(data, out, capsys, "--ensemble-size", "2")
    assert status == 0
    line = next(s for s in stdout.splitlines() if "network weight in the blend" in s)
    weight = float(line.rsplit(" ", 1)[1])
    ensemble, _ = load_run(out)
    assert len(ensemble) == 2 and ensemble.weight.shape == (1,)
    assert abs(float(ensemble.weight[0]) - weight) < 0.005  # the line rounds to 2 places
    saved = load_checkpoint(out / ENSEMBLE_FILE, "ensemble")
    assert saved["config"] == {"members": 2, "weight": "stacked",
                               "kernel": ensemble.kernel.config.to_dict()}
    assert saved["state_dict"]["weight"].tolist() == ensemble.weight.tolist()
    assert not any(k.startswith("networks.") for k in saved["state_dict"])
    for k, network in enumerate(ensemble.networks):  # best.pt: the network alone
        best = load_checkpoint(out / f"model_{k}" / "best.pt")
        assert not any(key in best["config"] for key in LEGACY_KEYS)
        expected = network.state_dict()
        assert set(best["state_dict"]) == set(expected)
        assert all(torch.equal(v, expected[key]) for key, v in best["state_dict"].items())
    # the one weight stacks every member with the kernel part (the fitted one, which a
    # one-epoch network may leave at 0, and one that mixes both)
    batch = collate_molecules([featurize(r["smiles"], ensemble.descriptor_dim)
                               for r in read_csv(data)[:6]])
    for w in (ensemble.weight.clone(), torch.tensor([0.25])):
        ensemble.weight.copy_(w)
        with torch.no_grad():
            kernel = ensemble.kernel(batch)  # (6, 1) standardised
            each = torch.stack([net.to_units(w * net(batch) + (1 - w) * kernel)
                                for net in ensemble.networks])  # (2, 6, 1)
            torch.testing.assert_close(ensemble.member_units(batch), each)
    assert not torch.equal(each[0], each[1])  # two members, not one twice
    ensemble, _ = load_run(out)
    blend = json.loads((out / "metrics.json").read_text())["components"]["blend"]
    assert blend == ensemble.weight.tolist()


def test_a_run_written_by_0_2_0_loads_with_its_weight_but_is_not_resumed(tmp_path, capsys):
    data = freesolv_slice(tmp_path / "fs.csv", 40)
    out = tmp_path / "run"
    assert train_tiny(data, out, capsys, "--ensemble-size", "2",
                      "--members", "apart")[0] == 0  # as 0.2.0 trained them
    new, _ = load_run(out)
    expected = new.state_dict()
    as_written_by_0_2_0(out)
    for k in range(2):
        old = load_checkpoint(out / f"model_{k}" / "best.pt")
        assert old["config"]["fitted_blend"]
        assert old["state_dict"]["blend"].tolist() == new.weight.tolist()
    ensemble, _ = load_run(out)
    assert ensemble.weight.tolist() == new.weight.tolist()
    state = ensemble.state_dict()
    assert set(state) == set(expected)
    assert all(torch.equal(v, expected[k]) for k, v in state.items())
    files = {p: sha256(p) for p in sorted(out.rglob("*")) if p.is_file()}
    status, _, err = train_tiny(data, out, capsys, "--ensemble-size", "2", "--resume")
    assert status == 2 and "was started by setattn 0.2.0" in err
    assert "this version cannot continue it" in err
    assert {p: sha256(p) for p in sorted(out.rglob("*")) if p.is_file()} == files
    assert not (out / ENSEMBLE_FILE).exists()


@pytest.mark.parametrize("which", ["last.pt", "best.pt"])
def test_a_0_2_0_member_is_refused_by_resume_whichever_checkpoint_it_left(tmp_path, capsys,
                                                                         which):
    data = freesolv_slice(tmp_path / "fs.csv", 30)
    out = tmp_path / "run"
    assert train_tiny(data, out, capsys, "--network-weight", "fixed")[0] == 0
    as_written_by_0_2_0(out)
    other = {"last.pt": "best.pt", "best.pt": "last.pt"}[which]
    (out / "model_0" / other).unlink()  # interrupted: only one of the two written
    status, _, err = train_tiny(data, out, capsys, "--resume")
    assert status == 2 and "was started by setattn 0.2.0" in err
