"""The descriptor kernel ridge: its closed form, its leave-one-out choice, and its
place in the molecule model (the kernel part of the ``Ensemble``) and the ``train`` /
``predict`` commands."""

from __future__ import annotations

import contextlib
import io
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from molecule_runs import (
    DATASETS_DIR,
    TINY,
    as_written_by_0_2_0,
    csv_slice,
    freesolv_run,
    freesolv_slice,
    predicted_rows,
    read_csv,
    run,
    tox21_slice,
    train_tiny,
)
from torch_geometric.loader import DataLoader

from setattn import cli
from setattn.molprop.batching import collate_molecules
from setattn.molprop.checkpoint import (
    ENSEMBLE_FILE,
    LEGACY_KEYS,
    CheckpointError,
    load_checkpoint,
    load_run,
    read_ensemble_config,
    save_checkpoint,
)
from setattn.molprop.config import NetworkConfig
from setattn.molprop.ensemble import NETWORK_WEIGHT
from setattn.molprop.explain import explain_molecule
from setattn.molprop.featurize import featurize
from setattn.molprop.kernels import (
    CLIP,
    GAMMAS,
    GRID,
    LAPLACIAN,
    LAPLACIAN_GAMMAS,
    RBF,
    RIDGES,
    SCORE_EPS,
    KernelRidge,
    _distances,
    eigh,
    loo_fits,
)
from setattn.molprop.network import MoleculeNetwork


# an ``Ensemble`` state key -> the name setattn 0.2.0 gave it inside each member
def _same_state(a: dict, b: dict) -> bool:
    return set(a) == set(b) and all(torch.equal(v, b[k]) for k, v in a.items())


def _problem(m: int = 30, f: int = 6, t: int = 2, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, f, generator=g, dtype=torch.float64) * 3 + 1  # (M, F)
    y = torch.stack([x[:, 0].sin() + x[:, 1], x[:, 2] * x[:, 3] / 5], 1)[:, :t]  # (M, T)
    return x, y


def _numpy_krr(x: np.ndarray, y: np.ndarray, query: np.ndarray, gamma: float, ridge: float,
               laplacian: bool = False):
    """Reference kernel ridge in numpy: standardise, clip, RBF (or Laplacian), solve."""
    mean, std = x.mean(0), x.std(0, ddof=1)
    z, q = (np.clip((a - mean) / std, -CLIP, CLIP) for a in (x, query))
    f = x.shape[1]

    def kern(a, b):
        diff = a[:, None, :] - b[None]
        return np.exp(-gamma / f * (np.abs(diff) if laplacian else diff ** 2).sum(-1))

    offset = y.mean()
    alpha = np.linalg.solve(kern(z, z) + ridge * np.eye(len(z)), y - offset)
    return kern(q, z) @ alpha + offset


def test_eigh_decomposes_the_kernel_as_torch_does_and_keeps_torch_s_threads():
    x, _ = _problem(m=60)
    kernel = torch.exp(-0.1 * torch.cdist(x, x).square())  # (M, M)
    threads = torch.get_num_threads()
    eigval, eigvec = eigh(kernel)
    assert torch.get_num_threads() == threads
    assert eigval.dtype == eigvec.dtype == torch.float64
    assert torch.allclose(eigval, torch.linalg.eigvalsh(kernel), atol=1e-12)
    assert torch.all(eigval[1:] >= eigval[:-1])  # ascending, as torch's
    rebuilt = eigvec @ torch.diag(eigval) @ eigvec.T  # (M, M)
    assert torch.allclose(rebuilt, kernel, atol=1e-12)
    assert torch.allclose(eigvec.T @ eigvec, torch.eye(len(x), dtype=torch.float64), atol=1e-12)


def test_leave_one_out_shortcut_equals_refitting_without_each_molecule():
    x, y = _problem(m=25)
    kernel = torch.exp(-0.1 * torch.cdist(x, x).square())  # (M, M)
    yc = y[:, 0] - y[:, 0].mean()
    for (mse, ridge, _, _), r in zip(loo_fits(kernel, yc), RIDGES):
        errors = []
        for i in range(len(x)):
            keep = [j for j in range(len(x)) if j != i]
            k = kernel[keep][:, keep]
            alpha = torch.linalg.solve(k + ridge * torch.eye(len(keep), dtype=k.dtype), yc[keep])
            errors.append(float(yc[i] - kernel[i, keep] @ alpha))
        assert ridge == r
        assert mse == pytest.approx(np.mean(np.square(errors)), rel=1e-8)


def test_fit_and_forward_match_a_numpy_reference_at_the_chosen_settings():
    x, y = _problem()
    query = x[:7] + 0.3  # (7, F)
    krr = KernelRidge(len(x), x.shape[1], 2)
    info = krr.fit(x.float(), y.float())
    assert info["gamma"] == float(krr.gamma) and info["ridge"] == float(krr.ridge)
    got = krr(query.float())  # (7, 2)
    for t in range(2):
        ref = _numpy_krr(x.numpy(), y[:, t].numpy(), query.numpy(), info["gamma"], info["ridge"])
        np.testing.assert_allclose(got[:, t].numpy(), ref, rtol=1e-4, atol=1e-4)


def test_a_prediction_does_not_depend_on_the_molecules_beside_it():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(400, 200, generator=g) * 3 + 50  # (M, F): offsets, as RDKit's descriptors
    y = (x[:, :5].sum(1, keepdim=True) / 10).sin()  # (M, 1)
    krr = KernelRidge(len(x), x.shape[1], 1)
    krr.fit(x, y)
    query = x[:50] + torch.randn(50, 200, generator=g)  # (50, F)
    alone = torch.cat([krr(query[i:i + 1]) for i in range(len(query))])  # (50, 1)
    assert alone.dtype == torch.float32
    # float32 kernels differed by up to 6e-5 here, with the batch's size
    torch.testing.assert_close(alone, krr(query), rtol=0, atol=1e-7)


def test_the_choice_has_the_least_leave_one_out_error_of_the_grid():
    x, y = _problem(t=1)
    krr = KernelRidge(len(x), x.shape[1], 1)
    info = krr.fit(x.float(), y.float())
    z = krr.centres.double()
    yc = y[:, 0] - y[:, 0].mean()
    assert GRID == ((RBF, GAMMAS), (LAPLACIAN, LAPLACIAN_GAMMAS))  # both kernels by default
    best = min(mse for norm, gammas in GRID for g in gammas
               for mse, _, _, _ in loo_fits(torch.exp(-g / x.shape[1] * _distances(z, z, norm)),
                                          yc))
    assert info["loo_rmse"] == pytest.approx(best ** 0.5, rel=1e-6)


@pytest.mark.parametrize("m", [17, 30])
def test_a_laplacian_fit_matches_a_numpy_reference(m):
    x, y = _problem(m=m, seed=m)
    query = x[:5] - 0.2  # (5, F)
    krr = KernelRidge(m, x.shape[1], 2)
    info = krr.fit(x.float(), y.float(), grid=((LAPLACIAN, LAPLACIAN_GAMMAS),))
    assert info["kernel"] == "laplacian" and info["gamma"] in LAPLACIAN_GAMMAS
    got = krr(query.float())  # (5, 2)
    for t in range(2):
        ref = _numpy_krr(x.numpy(), y[:, t].numpy(), query.numpy(), info["gamma"],
                         info["ridge"], laplacian=True)
        np.testing.assert_allclose(got[:, t].numpy(), ref, rtol=1e-4, atol=1e-4)


def test_a_grid_of_two_kernels_chooses_the_least_leave_one_out_error_of_both():
    x, y = _problem(m=40, t=1, seed=3)
    ridges = (*RIDGES, 0.3, 1.0)
    krr = KernelRidge(len(x), x.shape[1], 1)
    info = krr.fit(x.float(), y.float(), grid=((RBF, GAMMAS), (LAPLACIAN, LAPLACIAN_GAMMAS)),
                   ridges=ridges)
    z = krr.centres.double()
    yc = y[:, 0] - y[:, 0].mean()
    f = x.shape[1]
    loo = {(name, g, r): mse
           for name, norm, gammas in (("rbf", 2, GAMMAS), ("laplacian", 1, LAPLACIAN_GAMMAS))
           for g in gammas
           for mse, r, _, _ in loo_fits(torch.exp(-g / f * _distances(z, z, norm)), yc, ridges)}
    best = min(loo, key=loo.get)
    assert (info["kernel"], info["gamma"], info["ridge"]) == best
    assert info["loo_rmse"] == pytest.approx(loo[best] ** 0.5, rel=1e-6)
    assert float(krr.norm) == (LAPLACIAN if best[0] == "laplacian" else RBF)
    again = KernelRidge(len(x), x.shape[1], 1)
    again.load_state_dict(krr.state_dict())  # the kernel's kind travels with the weights
    torch.testing.assert_close(again(x[:4].float()), krr(x[:4].float()))
    with pytest.raises(ValueError, match="kernel distance must be 2"):
        _distances(z, z, 3)


def test_the_search_tries_only_the_ridges_it_is_given():
    x, y = _problem(m=20, t=1)
    krr = KernelRidge(len(x), x.shape[1], 1)
    assert krr.fit(x.float(), y.float(), ridges=(0.5,))["ridge"] == 0.5
    assert float(krr.ridge) == 0.5


def test_missing_labels_fit_each_task_on_its_labelled_molecules_only():
    x, y = _problem()
    y_missing = y.clone()
    y_missing[::3, 1] = float("nan")
    both = KernelRidge(len(x), x.shape[1], 2)
    both.fit(x.float(), y_missing.float())
    rows = ~torch.isnan(y_missing[:, 1])
    # task 1: the standardisation uses all M molecules, the solve its labelled rows only
    mean, std = x.mean(0), x.std(0)
    z = ((x - mean) / std).clamp(-CLIP, CLIP)
    k = torch.exp(-float(both.gamma) / x.shape[1] * torch.cdist(z[rows], z[rows]).square())
    offset = y[rows, 1].mean()
    alpha = torch.linalg.solve(k + float(both.ridge) * torch.eye(int(rows.sum()),
                                                                   dtype=k.dtype),
                               y[rows, 1] - offset)
    kq = torch.exp(-float(both.gamma) / x.shape[1] * torch.cdist(z[:5], z[rows]).square())
    expected = kq @ alpha + offset
    got = both(x[:5].float())[:, 1]
    np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-4, atol=1e-4)
    assert torch.all(both.alpha[~rows, 1] == 0)


def test_bad_shapes_and_a_task_without_labels_are_refused():
    x, y = _problem()
    krr = KernelRidge(len(x), x.shape[1], 2)
    with pytest.raises(ValueError, match="expected descriptors"):
        krr.fit(x[:5].float(), y.float())
    y[:, 1] = float("nan")
    with pytest.raises(ValueError, match="no training label"):
        krr.fit(x.float(), y.float())


def test_model_predicts_the_weighted_mean_of_network_and_kernel(tmp_path, capsys):
    data, out, stdout, metrics = freesolv_run(tmp_path, capsys)
    assert "kernel ridge on" in stdout and "network weight in the blend" in stdout
    parts = metrics["components"]
    (w,) = parts["blend"]  # fitted on the validation part, one per task
    assert 0.0 <= w <= 1.0 and parts["kernel"]["gamma"] > 0
    ensemble, _ = load_run(out)
    assert len(ensemble) == 1 and ensemble.kernel.config.size == metrics["split"]["train"]
    assert ensemble.weight.tolist() == pytest.approx([w])
    # written into ensemble.pt once; best.pt holds the network alone
    saved = load_checkpoint(out / ENSEMBLE_FILE, "ensemble")
    assert saved["config"]["weight"] == "stacked"
    assert saved["state_dict"]["weight"].tolist() == pytest.approx([w])
    best = load_checkpoint(out / "model_0" / "best.pt")
    assert not any(key in best["config"] for key in LEGACY_KEYS)
    assert _same_state(best["state_dict"], ensemble.networks[0].state_dict())
    rows = predicted_rows(out, data, tmp_path, capsys)
    batch = next(iter(DataLoader([featurize(r["smiles"], ensemble.descriptor_dim)
                                  for r in rows[:6]], batch_size=6)))
    network = ensemble.networks[0]
    with torch.no_grad():
        net = network.to_units(network(batch))
        ker = network.to_units(ensemble.kernel(batch))
    expected = w * net + (1 - w) * ker  # (6, 1)
    got = torch.tensor([float(r["expt"]) for r in rows[:6]])
    np.testing.assert_allclose(got.numpy(), expected[:, 0].numpy(), rtol=1e-5, atol=1e-5)


def test_a_fixed_weight_predicts_the_mean_of_network_and_kernel(tmp_path, capsys):
    data = freesolv_slice(tmp_path / "fs.csv", 40)
    out = tmp_path / "run"
    status, stdout, _ = train_tiny(data, out, capsys, "--network-weight", "fixed")
    assert status == 0 and "network weight in the blend" not in stdout
    metrics = json.loads((out / "metrics.json").read_text())
    parts = metrics["components"]
    assert parts["blend"] == NETWORK_WEIGHT
    # the run's predictions are the mean of the two parts, so is its RMSE bound
    for split in ("val", "test"):
        net, ker = parts[split]["attention"]["rmse"], parts[split]["kernel_ridge"]["rmse"]
        assert metrics[split]["rmse"] <= (net + ker) / 2 + 1e-6
    ensemble, _ = load_run(out)
    assert ensemble.weight.shape == () and float(ensemble.weight) == NETWORK_WEIGHT
    assert read_ensemble_config(out)["weight"] == "fixed"


def test_kernel_is_off_without_descriptors_on_request_and_for_several_classification_tasks(
        tmp_path, capsys):
    fs = freesolv_slice(tmp_path / "fs.csv", 30)
    for extra in (["--kernel-ridge", "off"], ["--descriptors", "none"]):
        out = tmp_path / f"run{len(extra[1])}"
        status, stdout, _ = train_tiny(fs, out, capsys, *extra)
        assert status == 0 and "kernel ridge" not in stdout
        assert "components" not in json.loads((out / "metrics.json").read_text())
        ensemble, _ = load_run(out)
        assert ensemble.kernel is None and float(ensemble.weight) == 1.0
        assert read_ensemble_config(out) == {"members": 1, "weight": "none", "kernel": None}
    tox = tox21_slice(tmp_path / "tox.csv", 40)
    out = tmp_path / "tox"
    status, stdout, _ = train_tiny(tox, out, capsys, "--task", "classification",
                                   targets=("NR-AR", "SR-p53"))
    assert status == 0
    assert "note: no kernel ridge (--kernel-ridge auto): 2 classification tasks" in stdout
    ensemble, _ = load_run(out)
    assert ensemble.kernel is None


@pytest.fixture(scope="module")
def one_task(tmp_path_factory) -> tuple[Path, str]:
    """A tiny single-task classification run with the defaults' ``--kernel-ridge auto``
    (2 epochs): its folder and what ``train`` printed."""
    root = tmp_path_factory.mktemp("one_task")
    tox = tox21_slice(root / "tox.csv", 40)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        status = cli.main([str(a) for a in ["train", "--data", tox, "--target-columns",
                                             "SR-p53", "--task", "classification",
                                             "--epochs", 2, "--output-dir", root / "one",
                                             *TINY]])
    assert status == 0
    return root / "one", printed.getvalue()


def test_auto_fits_the_kernel_for_one_classification_task(one_task):
    out, stdout = one_task
    assert "(on the 0/1 labels)" in stdout
    ensemble, _ = load_run(out)
    assert ensemble.kernel is not None and ensemble.kernel.config.size > 0
    assert ensemble.kernel.config.task == "classification"
    assert float(ensemble.weight) == NETWORK_WEIGHT  # classification keeps the fixed weight
    assert read_ensemble_config(out)["weight"] == "fixed"
    parts = json.loads((out / "metrics.json").read_text())["components"]
    assert set(parts["val"]) == {"attention", "kernel_ridge"}


def test_the_network_part_averages_member_probabilities_like_the_ensemble(tmp_path, capsys):
    data = csv_slice(DATASETS_DIR / "molecules" / "bace1_chembl.csv", tmp_path / "b.csv",
                     range(120))
    metrics = {}
    for choice in ("off", "on"):
        status, _, _ = train_tiny(data, tmp_path / choice, capsys, "--task", "classification",
                                  "--kernel-ridge", choice, "--ensemble-size", "2",
                                  targets=("active",), epochs=2)
        assert status == 0
        metrics[choice] = json.loads((tmp_path / choice / "metrics.json").read_text())
    # the kernel ridge leaves the networks' training alone, so the blended run's network
    # part is the kernel-free run's ensemble: the mean of the members' probabilities
    for part in ("val", "test"):
        assert metrics["on"]["components"][part]["attention"] == metrics["off"][part]


def test_explain_gives_contributions_to_the_blended_classification_logit(one_task):
    ensemble, _ = load_run(one_task[0])
    assert ensemble.kernel is not None
    for smiles in ("OCC(N)c1ccncc1", "CCCCCl"):
        e = explain_molecule(ensemble, smiles, "integrated-gradients")
        blended = math.log(e.probability / (1 - e.probability))  # predict's probability
        assert e.attribution.prediction == pytest.approx(blended, abs=1e-4)
        with torch.no_grad():
            data = featurize(smiles, ensemble.descriptor_dim)
            network = float(ensemble.networks[0](collate_molecules([data]))[0, 0])  # alone
        assert abs(e.attribution.prediction - network) > 1e-3  # the kernel's part counts
        assert abs(e.attribution.gap()) <= e.attribution.delta + 1e-4


def test_classification_on_request_averages_the_two_probabilities(tmp_path, capsys):
    tox = tox21_slice(tmp_path / "tox.csv", 40)
    out = tmp_path / "tox"
    status, stdout, _ = train_tiny(tox, out, capsys, "--task", "classification",
                                   "--kernel-ridge", "on", targets=("NR-AR", "SR-p53"))
    assert status == 0 and "(on the 0/1 labels)" in stdout
    ensemble, _ = load_run(out)
    assert ensemble.kernel is not None and ensemble.kernel.config.size > 0
    assert ensemble.kernel.config.num_tasks == 2
    parts = json.loads((out / "metrics.json").read_text())["components"]
    assert set(parts["test"]["kernel_ridge"]) == set(parts["test"]["attention"])
    status, _, _ = run(["predict", "--model", out, "--data", tox, "--output",
                        tmp_path / "p.csv"], capsys)
    assert status == 0
    rows = [r for r in read_csv(tmp_path / "p.csv") if r["NR-AR"]][:6]
    batch = next(iter(DataLoader([featurize(r["smiles"], ensemble.descriptor_dim)
                                  for r in rows], batch_size=6)))
    with torch.no_grad():
        net = torch.sigmoid(ensemble.networks[0](batch))  # (6, 2)
        score = ensemble.kernel(batch)  # (6, 2) fitted to 0/1 labels
    expected = NETWORK_WEIGHT * net + (1 - NETWORK_WEIGHT) * score.clamp(SCORE_EPS,
                                                                         1 - SCORE_EPS)
    got = torch.tensor([[float(r["NR-AR"]), float(r["SR-p53"])] for r in rows])
    np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-4, atol=1e-5)
    assert ((got > 0) & (got < 1)).all()


def test_a_saved_kernel_part_without_descriptors_is_refused(tmp_path, capsys):
    data = freesolv_slice(tmp_path / "fs.csv", 30)
    out = tmp_path / "run"
    assert train_tiny(data, out, capsys)[0] == 0  # a kernel ridge (--kernel-ridge auto)
    path = out / ENSEMBLE_FILE
    ckpt = load_checkpoint(path, "ensemble")
    ckpt["config"]["kernel"]["descriptor_dim"] = 0  # a kernel ridge on no descriptors
    save_checkpoint(ckpt, path)
    with pytest.raises(CheckpointError, match="ensemble.pt: kernel config refused before "
                                              "building it"):
        load_run(out)
    # a 0.2.0 member whose config claims one is refused alike
    network = MoleculeNetwork(NetworkConfig(hidden=8, heads=2, descriptor_dim=0))
    payload = {"kind": "model", "config": {**network.config.to_dict(), "kernel_size": 0,
                                           "fingerprint_kernel": False,
                                           "fitted_blend": False},
               "state_dict": {**network.state_dict(), "blend": torch.tensor(1.0)},
               "meta": {"task": "regression", "target_columns": ["y"]}}
    alone = save_checkpoint(payload, tmp_path / "alone.pt")
    assert load_run(alone)[0].kernel is None  # without the claim it loads
    payload["config"]["kernel_size"] = 10
    claimed = save_checkpoint(payload, tmp_path / "claimed.pt")
    with pytest.raises(CheckpointError, match="claimed.pt: kernel config refused before "
                                              "building it"):
        load_run(claimed)


def test_a_regression_target_without_training_labels_is_named(tmp_path, capsys):
    rows = read_csv(freesolv_slice(tmp_path / "fs.csv", 30))
    data = tmp_path / "two.csv"
    parts = ["train"] * 24 + ["val"] * 3 + ["test"] * 3
    with open(data, "w") as f:  # 'empty' is labelled outside the training part only
        f.write("smiles,expt,empty,split\n")
        f.writelines(f"{r['smiles']},{r['expt']},{r['expt'] if p != 'train' else ''},{p}\n"
                     for r, p in zip(rows, parts))
    split = ("--split", "column")
    status, _, err = train_tiny(data, tmp_path / "run", capsys, *split,
                                targets=("expt", "empty"))
    assert status == 2 and "'empty' has no label in the training part" in err
    status, _, _ = train_tiny(data, tmp_path / "run2", capsys, *split, "--kernel-ridge",
                              "off", targets=("expt", "empty"))
    assert status == 0


def test_a_run_written_by_0_2_0_loads_and_predicts_the_same(tmp_path, capsys):
    data = freesolv_slice(tmp_path / "fs.csv", 40)
    out = tmp_path / "run"
    # a fingerprint kernel ridge and a fitted weight: every key 0.2.0 named otherwise
    assert train_tiny(data, out, capsys, "--ensemble-size", "2",
                      "--members", "apart")[0] == 0  # as 0.2.0 trained them
    new, _ = load_run(out)
    expected = new.state_dict()
    assert new.kernel.fingerprint is not None and new.weight.shape == (1,)
    before = predicted_rows(out, data, tmp_path, capsys)
    as_written_by_0_2_0(out)
    old = load_checkpoint(out / "model_1" / "best.pt")
    assert {"kernel.alpha", "fingerprint_kernel.alpha", "kernel_mix", "blend"} <= set(
        old["state_dict"]) and old["config"]["fitted_blend"]
    ensemble, meta = load_run(out)
    assert len(ensemble) == 2 and ensemble.kernel.config == new.kernel.config
    assert _same_state(ensemble.state_dict(), expected)
    assert "conformal" in meta
    assert predicted_rows(out, data, tmp_path, capsys) == before
    # one 0.2.0 best.pt: that network alone, with the kernel part and weight it holds
    single, _ = load_run(out / "model_1" / "best.pt")
    assert len(single) == 1 and single.kernel.config == new.kernel.config
    assert _same_state(single.state_dict(),
                       {k.replace("networks.1.", "networks.0."): v for k, v in expected.items()
                        if not k.startswith("networks.0.")})
    molecules = [featurize(r["smiles"], new.descriptor_dim) for r in read_csv(data)[:8]]
    torch.testing.assert_close(single.member_predictions(molecules)[0],
                               new.member_predictions(molecules)[1], rtol=0, atol=0)


def test_a_checkpoint_saved_before_the_blend_weight_still_loads(tmp_path, capsys):
    data = freesolv_slice(tmp_path / "fs.csv", 30)
    out = tmp_path / "run"
    status, _, _ = train_tiny(data, out, capsys, "--kernel-ridge", "off")
    assert status == 0
    expected = load_run(out)[0].state_dict()
    as_written_by_0_2_0(out)  # no ensemble.pt: the weight lived in each best.pt
    best = out / "model_0" / "best.pt"
    ckpt = torch.load(best, weights_only=True)
    del ckpt["state_dict"]["blend"]  # as written before the blend weight existed
    del ckpt["checksum"]  # and before checksums
    torch.save(ckpt, best)
    ensemble, _ = load_run(out)
    assert ensemble.kernel is None and float(ensemble.weight) == 1.0
    assert _same_state(ensemble.state_dict(), expected)


def test_a_checkpoint_saved_before_laplacian_kernels_loads_as_an_rbf(tmp_path, capsys):
    data = freesolv_slice(tmp_path / "fs.csv", 30)
    out = tmp_path / "run"
    status, _, _ = train_tiny(data, out, capsys)  # a kernel ridge (--kernel-ridge auto)
    assert status == 0
    expected = load_run(out)[0].state_dict()
    assert float(expected["kernel.descriptor.norm"]) == RBF
    as_written_by_0_2_0(out)  # the kernel part inside each best.pt, under "kernel."
    best = out / "model_0" / "best.pt"
    ckpt = torch.load(best, weights_only=True)
    del ckpt["state_dict"]["kernel.norm"]  # as written before the buffer existed
    del ckpt["checksum"]  # and before checksums
    torch.save(ckpt, best)
    ensemble, _ = load_run(out)
    assert _same_state(ensemble.state_dict(), expected)


def test_auto_skips_the_kernel_ridge_with_a_note_where_on_refuses(tmp_path, capsys,
                                                                  monkeypatch):
    from setattn.molprop import run

    data = freesolv_slice(tmp_path / "fs.csv", 30)
    monkeypatch.setattr(run, "KERNEL_MAX_TRAIN", 5)  # fewer than the training part
    status, stdout, _ = train_tiny(data, tmp_path / "auto", capsys)
    assert status == 0 and "note: no kernel ridge (--kernel-ridge auto): it is fitted " \
        "on at most 5 training molecules, got" in stdout
    assert "kernel ridge on" not in stdout
    ensemble, _ = load_run(tmp_path / "auto")
    assert ensemble.kernel is None and float(ensemble.weight) == 1.0
    status, _, err = train_tiny(data, tmp_path / "big", capsys, "--kernel-ridge", "on")
    assert status == 2 and "--kernel-ridge: on, but it is fitted on at most 5" in err
    assert not (tmp_path / "big" / "model_0").exists()  # refused before training
    monkeypatch.setattr(run, "KERNEL_MAX_TRAIN", 20000)
    monkeypatch.setattr(run, "kernel_memory", lambda m: 10**15)  # more than any machine
    status, stdout, _ = train_tiny(data, tmp_path / "low", capsys)
    assert status == 0 and "note: no kernel ridge (--kernel-ridge auto): its fit on " \
        "24 training molecules needs about 1,000,000.0 GB of memory but" in stdout
    status, _, err = train_tiny(data, tmp_path / "low_on", capsys, "--kernel-ridge", "on")
    assert status == 2 and "--kernel-ridge: on, but its fit on 24 training" in err
    status, _, err = train_tiny(data, tmp_path / "bad", capsys, "--kernel-ridge", "on",
                                "--descriptors", "none")
    assert status == 2 and "on needs descriptors" in err


def test_a_resumed_run_keeps_the_kernel_ridge_it_started_with(tmp_path, capsys, monkeypatch):
    from setattn.molprop import run

    data = freesolv_slice(tmp_path / "fs.csv", 30)
    with_kernel, without = tmp_path / "with", tmp_path / "without"
    assert train_tiny(data, with_kernel, capsys)[0] == 0
    first = json.loads((with_kernel / "metrics.json").read_text())["test"]["rmse"]
    monkeypatch.setattr(run, "KERNEL_MAX_TRAIN", 5)  # auto would skip it now
    assert train_tiny(data, without, capsys)[0] == 0
    status, stdout, _ = train_tiny(data, with_kernel, capsys, "--resume")
    assert status == 0 and "kernel ridge on 206 descriptors" in stdout
    assert json.loads((with_kernel / "metrics.json").read_text())["test"]["rmse"] == first
    monkeypatch.setattr(run, "KERNEL_MAX_TRAIN", 20000)  # auto would fit it now
    status, stdout, _ = train_tiny(data, without, capsys, "--resume")
    assert status == 0 and "kernel ridge" not in stdout
    ensemble, _ = load_run(without)
    assert ensemble.kernel is None
    monkeypatch.setattr(run, "kernel_memory", lambda m: 10**15)  # no room for its fit
    status, _, err = train_tiny(data, with_kernel, capsys, "--resume")
    assert status == 2 and "--resume: the run started with a kernel ridge, but its fit on " \
        "24 training molecules needs about 1,000,000.0 GB" in err


def test_a_search_cap_at_or_above_the_size_changes_nothing():
    x, y = _problem(m=30)
    y[::4, 1] = float("nan")
    full, capped = KernelRidge(30, x.shape[1], 2), KernelRidge(30, x.shape[1], 2)
    assert full.fit(x.float(), y.float()) == capped.fit(x.float(), y.float(), search_size=30)
    for name, buffer in full.state_dict().items():
        assert torch.equal(buffer, capped.state_dict()[name]), name


@pytest.mark.parametrize(("m", "cap"), [(31, 12), (44, 20)])
def test_a_capped_search_chooses_on_its_sample_and_solves_on_every_label(m, cap):
    x, y = _problem(m=m, t=1)
    state = torch.get_rng_state()
    krr = KernelRidge(m, x.shape[1], 1)
    info = krr.fit(x.float(), y.float(), search_size=cap)
    assert torch.equal(torch.get_rng_state(), state)  # its own generator
    # the sample: the same draw the fit makes, from a generator of seed 0
    rows = torch.randperm(m, generator=torch.Generator().manual_seed(0))[:cap].sort().values
    z = krr.centres.double()
    d = torch.cdist(z, z).square()  # (M, M)
    yc = y[:, 0] - y[:, 0].mean()  # centred on every label, as the fit does
    search = {(g, r): mse for g in (0.1, 0.25, 0.5, 1.0)
              for mse, r, _, _ in loo_fits(torch.exp(-g / x.shape[1] * d[rows][:, rows]), yc[rows])}
    gamma, ridge = min(search, key=search.get)
    assert (info["gamma"], info["ridge"]) == (gamma, ridge)
    assert info["loo_rmse"] == pytest.approx(search[(gamma, ridge)] ** 0.5, rel=1e-6)
    query = x[:6] + 0.2  # (6, F)
    ref = _numpy_krr(x.numpy(), y[:, 0].numpy(), query.numpy(), gamma, ridge)
    np.testing.assert_allclose(krr(query.float())[:, 0].numpy(), ref, rtol=1e-4, atol=1e-4)


def test_a_capped_search_samples_each_task_among_its_own_labels():
    x, y = _problem(m=40)
    y[::2, 1] = float("nan")  # task 1: 20 labels, under the cap; task 0: 40, over it
    krr = KernelRidge(40, x.shape[1], 2)
    krr.fit(x.float(), y.float(), search_size=25)
    assert torch.all(krr.alpha[::2, 1] == 0) and torch.all(krr.alpha[1::2, 1] != 0)
    assert torch.all(krr.alpha[:, 0] != 0)  # solved on every label, not the 25 searched
