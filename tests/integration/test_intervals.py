"""Prediction intervals scaled by the kernel ridge's posterior std: the posterior std
against a float64 numpy reference, and the intervals ``train``, ``predict`` and the Python
API give for a run that blends a kernel ridge."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from molecule_runs import freesolv_slice, read_csv, run, train_tiny

from setattn.molprop import kernels as kernel_module
from setattn.molprop.api import MoleculePredictor
from setattn.molprop.checkpoint import load_run
from setattn.molprop.conformal import ENSEMBLE, KERNEL, Calibration, calibrate
from setattn.molprop.ensemble import Ensemble
from setattn.molprop.featurize import featurize
from setattn.molprop.kernels import CLIP, KernelRidge
from setattn.molprop.predict import predict_csv, predict_interval, predict_spread


def _problem(m: int, f: int = 5, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, f, generator=g, dtype=torch.float64) * 2 + 1  # (M, F)
    return x, (x[:, :1].sin() + x[:, 1:2])  # (M, 1)


def _numpy_posterior_std(x: np.ndarray, query: np.ndarray, gamma: float, ridge: float,
                         laplacian: bool, rows: np.ndarray | None = None) -> np.ndarray:
    """Reference in float64 numpy: standardise and clip as the fit does, take the centres
    ``rows`` (all by default), and ``sqrt(1 - k^T (K + ridge I)^-1 k)``."""
    mean, std = x.mean(0), x.std(0, ddof=1)
    z, q = (np.clip((a - mean) / std, -CLIP, CLIP) for a in (x, query))
    z = z if rows is None else z[rows]
    f = x.shape[1]

    def kern(a, b):
        diff = a[:, None, :] - b[None]
        return np.exp(-gamma / f * (np.abs(diff) if laplacian else diff ** 2).sum(-1))

    k = kern(q, z)  # (G, S)
    solved = np.linalg.solve(kern(z, z) + ridge * np.eye(len(z)), k.T)  # (S, G)
    return np.sqrt(np.clip(1 - (k * solved.T).sum(1), 0, None))


@pytest.mark.parametrize("m, distance", [(17, kernel_module.RBF), (30, kernel_module.LAPLACIAN)])
def test_posterior_std_matches_a_numpy_reference(m, distance):
    x, y = _problem(m)
    krr = KernelRidge(m, x.shape[1], 1)
    rbf = distance == kernel_module.RBF
    gammas = kernel_module.GAMMAS if rbf else kernel_module.LAPLACIAN_GAMMAS
    info = krr.fit(x.float(), y.float(), grid=((distance, gammas),))
    query = torch.cat([x[:4] + 0.2, x[4:6]])  # (6, F): near and at training molecules
    got = krr.posterior_std(query.float())  # (6,)
    ref = _numpy_posterior_std(x.float().double().numpy(), query.float().double().numpy(),
                               info["gamma"], info["ridge"], distance == kernel_module.LAPLACIAN)
    np.testing.assert_allclose(got.numpy(), ref, rtol=1e-4, atol=1e-5)
    assert got.shape == (6,) and bool(((got >= 0) & (got <= 1)).all())
    far = krr.posterior_std(torch.full((1, x.shape[1]), 50.0))  # clipped 5 sds away
    assert float(far) > float(got.max())


def test_a_capped_posterior_std_uses_the_drawn_centres(monkeypatch):
    x, y = _problem(30, seed=1)
    krr = KernelRidge(30, x.shape[1], 1)
    info = krr.fit(x.float(), y.float())
    monkeypatch.setattr(kernel_module, "SPREAD_SIZE", 12)
    rows = torch.randperm(30, generator=torch.Generator().manual_seed(
        kernel_module.SPREAD_SEED))[:12].sort().values.numpy()
    query = x[:5] - 0.4  # (5, F)
    ref = _numpy_posterior_std(x.float().double().numpy(), query.float().double().numpy(),
                               info["gamma"], info["ridge"], info["kernel"] == "laplacian", rows)
    np.testing.assert_allclose(krr.posterior_std(query.float()).numpy(), ref, rtol=1e-4,
                               atol=1e-5)


def test_the_posterior_std_follows_a_refit_and_a_loaded_state():
    x, y = _problem(20, seed=2)
    other, y2 = _problem(20, seed=3)
    query = x[:3].float()
    krr = KernelRidge(20, x.shape[1], 1)
    krr.fit(x.float(), y.float())
    first = krr.posterior_std(query)  # computes and keeps the factor
    fresh = KernelRidge(20, x.shape[1], 1)
    fresh.fit(other.float(), y2.float())
    krr.fit(other.float(), y2.float())  # a refit on other molecules
    torch.testing.assert_close(krr.posterior_std(query), fresh.posterior_std(query))
    assert not torch.allclose(krr.posterior_std(query), first)
    again = KernelRidge(20, x.shape[1], 1)
    again.fit(other.float(), y2.float())
    again.posterior_std(query)
    krr_state = KernelRidge(20, x.shape[1], 1)
    krr_state.fit(x.float(), y.float())
    again.load_state_dict(krr_state.state_dict())  # the first fit's state, loaded
    torch.testing.assert_close(again.posterior_std(query), first)


def test_calibrations_record_their_spread_and_old_ones_read_as_the_ensemble():
    y = torch.arange(1.0, 21.0)[:, None]  # (20, 1)
    cal = calibrate(y, torch.zeros(20, 1), torch.rand(20, 1), spread=KERNEL)
    assert cal.spread == KERNEL
    assert Calibration.from_dict(json.loads(json.dumps(cal.to_dict()))) == cal
    old = {k: v for k, v in cal.to_dict().items() if k != "spread"}
    assert Calibration.from_dict(old).spread == ENSEMBLE
    with pytest.raises(ValueError, match="metrics.json: .*spread must be one of"):
        Calibration.from_dict({**cal.to_dict(), "spread": "gp"}, "metrics.json")
    with pytest.raises(ValueError, match="spread must be one of"):
        calibrate(y, torch.zeros(20, 1), torch.zeros(20, 1), spread="gp")


def test_a_kernel_run_scales_its_intervals_by_the_posterior_std(tmp_path, capsys):
    data = freesolv_slice(tmp_path / "fs.csv", 120)  # 12 validation molecules: bounded
    out = tmp_path / "run"
    status, _, _ = train_tiny(data, out, capsys, "--ensemble-size", "2", epochs=2)
    assert status == 0
    metrics = json.loads((out / "metrics.json").read_text())
    cal = Calibration.from_dict(metrics["uncertainty"]["calibration"])
    assert cal.spread == KERNEL and "posterior std" in metrics["uncertainty"]["method"]
    ensemble, _ = load_run(out)
    assert ensemble.spread_kind() == KERNEL
    rows = read_csv(data)[:8]
    smiles = [r["smiles"] for r in rows]
    molecules = [featurize(s, ensemble.descriptor_dim) for s in smiles]
    u = ensemble.kernel.descriptor.posterior_std(
        torch.cat([d.descriptors for d in molecules]))  # (8,)
    mean, lower, upper, errors = predict_interval(ensemble, smiles, cal)
    assert not any(errors)
    half = cal.scale[0] * (u + cal.floor[0])  # (8,)
    np.testing.assert_allclose((mean[:, 0] - lower[:, 0]).numpy(), half.numpy(), rtol=1e-4)
    np.testing.assert_allclose((upper[:, 0] - mean[:, 0]).numpy(), half.numpy(), rtol=1e-4)
    assert float(half.std()) > 0  # the widths differ from molecule to molecule
    # the scale before calibration, public: the posterior std, or the members' spread
    means, _, scale, errors = predict_spread(ensemble, [*smiles, "C1CC"], KERNEL)
    np.testing.assert_allclose(scale[:8, 0].numpy(), u.numpy(), rtol=1e-5)
    np.testing.assert_allclose(means[:8].numpy(), mean.numpy(), rtol=1e-6)
    assert not any(errors[:8]) and errors[8].startswith("invalid SMILES")
    assert torch.isnan(scale[8]).all() and torch.isnan(means[8]).all()
    # each member alone: its network stacked with the kernel part at the run's weight
    each = torch.cat([Ensemble([net], ensemble.kernel, ensemble.weight)
                      .member_predictions(molecules) for net in ensemble.networks])  # (2, 8, 1)
    _, _, scale, _ = predict_spread(ensemble, smiles)  # ENSEMBLE: the members' spread
    np.testing.assert_allclose(scale.numpy(), each.std(0, correction=0).numpy(), rtol=1e-5,
                               atol=1e-7)
    assert float(scale.abs().sum()) > 0
    with pytest.raises(ValueError, match="interval spread must be one of"):
        predict_spread(ensemble, smiles, "gp")
    # the floor is the posterior std's mean over the validation molecules
    split = json.loads((out / "split.json").read_text())
    all_rows = read_csv(data)
    val = [featurize(all_rows[i]["smiles"], ensemble.descriptor_dim) for i in split["val"]]
    std = torch.zeros(len(val), 1)
    assert cal.floor[0] == pytest.approx(
        float(ensemble.interval_spread(val, std, KERNEL).mean()), rel=1e-5)
    # setattn predict and the Python API give the same intervals
    status, _, _ = run(["predict", "--model", out, "--data", data, "--output",
                        tmp_path / "p.csv"], capsys)
    assert status == 0
    written = read_csv(tmp_path / "p.csv")[:8]
    np.testing.assert_allclose([float(r["expt_lower"]) for r in written], lower[:, 0].numpy(),
                               rtol=1e-5, atol=1e-6)
    api_lower, api_upper = MoleculePredictor.load(out).predict_interval(smiles)
    np.testing.assert_allclose(api_upper[:, 0], upper[:, 0].numpy(), rtol=1e-5, atol=1e-6)


def test_a_run_without_a_kernel_ridge_keeps_the_ensemble_spread(tmp_path, capsys):
    data = freesolv_slice(tmp_path / "fs.csv", 60)
    out = tmp_path / "run"
    status, _, _ = train_tiny(data, out, capsys, "--ensemble-size", "2", "--kernel-ridge", "off",
                              epochs=2)
    assert status == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["uncertainty"]["calibration"]["spread"] == ENSEMBLE
    ensemble, _ = load_run(out)
    assert ensemble.kernel is None and ensemble.spread_kind() == ENSEMBLE
    with pytest.raises(ValueError, match="need a model with a kernel ridge"):
        ensemble.interval_spread([featurize("CCO", ensemble.descriptor_dim)],
                                 torch.zeros(1, 1), KERNEL)




def test_blocks_and_a_shuffled_refit_give_the_unblocked_fresh_numbers(monkeypatch):
    x, y = _problem(25, seed=4)
    query = (x[:9] + 0.3).float()  # (9, F)
    krr = KernelRidge(25, x.shape[1], 1)
    krr.fit(x.float(), y.float())
    whole = krr.posterior_std(query)  # (9,)
    monkeypatch.setattr(kernel_module, "SPREAD_BLOCK", 4)  # blocks of 4, 4 and 1
    torch.testing.assert_close(krr.posterior_std(query), whole)
    # each column shuffled on its own: the same column means and stds, other molecules
    g = torch.Generator().manual_seed(5)
    shuffled = torch.stack([col[torch.randperm(25, generator=g)] for col in x.T], 1)
    krr.fit(shuffled.float(), y.float())
    fresh = KernelRidge(25, x.shape[1], 1)
    fresh.fit(shuffled.float(), y.float())
    torch.testing.assert_close(krr.posterior_std(query), fresh.posterior_std(query))


def test_workers_invalid_smiles_and_an_old_calibration(tmp_path, capsys):
    data = freesolv_slice(tmp_path / "fs.csv", 120)
    out = tmp_path / "run"
    status, _, _ = train_tiny(data, out, capsys, "--ensemble-size", "2", epochs=2)
    assert status == 0
    rows = read_csv(data)[:12]
    queries = tmp_path / "q.csv"
    with queries.open("w") as handle:
        handle.write("smiles\n" + "\n".join([r["smiles"] for r in rows[:6]] + ["C1CC"]
                                            + [r["smiles"] for r in rows[6:]]) + "\n")
    ensemble, meta = load_run(out)
    assert meta["conformal"].spread == KERNEL
    outputs = {}
    for workers in (1, 2):  # chunks of 4 rows, in this process or in 2 forked workers
        target = tmp_path / f"p{workers}.csv"
        predict_csv(ensemble, ["expt"], queries, target, "smiles", chunk_rows=4,
                    workers=workers, calibration=meta["conformal"])
        outputs[workers] = read_csv(target)
    assert outputs[1] == outputs[2]  # every column, the intervals too
    assert all(float(r["expt_lower"]) < float(r["expt"]) for i, r in enumerate(outputs[1])
               if i != 6)
    bad = outputs[1][6]
    assert bad["expt_lower"] == bad["expt_upper"] == "" and bad["error"]
    # a run saved before the choice (no "spread"): its intervals use the ensemble's spread
    metrics = json.loads((out / "metrics.json").read_text())
    del metrics["uncertainty"]["calibration"]["spread"]
    (out / "metrics.json").write_text(json.dumps(metrics))
    ensemble, meta = load_run(out)
    cal = meta["conformal"]
    assert cal.spread == ENSEMBLE
    smiles = [r["smiles"] for r in rows]
    mean, lower, _, _ = predict_interval(ensemble, smiles, cal)
    std = torch.from_numpy(MoleculePredictor.load(out).predict_std(smiles))  # (12, 1)
    half = cal.scale[0] * (std[:, 0] + cal.floor[0])  # (12,)
    np.testing.assert_allclose((mean[:, 0] - lower[:, 0]).numpy(), half.numpy(), rtol=1e-4)
