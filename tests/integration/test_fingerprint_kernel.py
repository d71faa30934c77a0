"""The fingerprint kernel ridge: the MinMax kernel, its leave-one-out fit, the stack with
the descriptor kernel ridge, and its place in the molecule model (the ``Ensemble``'s kernel
part) and the commands."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from molecule_runs import (
    freesolv_run,
    freesolv_slice,
    predicted_rows,
    run_from_before,
    train_tiny,
)
from rdkit import Chem
from rdkit.Chem import rdFingerprintGenerator
from torch_geometric.data import Data

from setattn.domains.fingerprints import (
    BITS,
    COUNT_CAP,
    RADIUS,
    count_fingerprint,
    fingerprint_shares,
)
from setattn.molprop.batching import collate_molecules
from setattn.molprop.checkpoint import ENSEMBLE_FILE, load_checkpoint, load_run
from setattn.molprop.explain import explain_molecule
from setattn.molprop.featurize import featurize
from setattn.molprop.kernels import (
    FP_RIDGES,
    FingerprintRidge,
    KernelConfig,
    KernelPart,
    dense_minmax_kernel,
    minmax_kernel,
)
from setattn.molprop.stacking import stack_weight


def stack_weights(loo_d: list[torch.Tensor], loo_f: list[torch.Tensor]) -> list[float]:
    """The descriptor ridge's weight of each task against the fingerprint one, as the
    kernel part stacks them: unshrunk, 1 where their residuals agree."""
    return [stack_weight(a, b, 1.0, shrink=False) for a, b in zip(loo_d, loo_f)]


def _counts(g: int, f: int = 40, seed: int = 0) -> torch.Tensor:
    """(g, f) sparse uint8 counts, mostly zero, a few large, one row empty."""
    gen = torch.Generator().manual_seed(seed)
    counts = torch.randint(0, 4, (g, f), generator=gen) * (torch.rand(g, f, generator=gen) < 0.3)
    counts[0, 0] = 200
    counts[-1] = 0
    return counts.to(torch.uint8)


def _minmax_reference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    out = np.ones((len(a), len(b)))
    for i, u in enumerate(a.astype(float)):
        for j, v in enumerate(b.astype(float)):
            top, bottom = np.minimum(u, v).sum(), np.maximum(u, v).sum()
            out[i, j] = top / bottom if bottom else 1.0
    return out


def test_minmax_kernel_equals_the_sums_of_minima_over_maxima():
    a, b = _counts(9), _counts(7, seed=1)
    got = minmax_kernel(a, b)
    assert got.dtype == torch.float64 and got.shape == (9, 7)
    np.testing.assert_allclose(got.numpy(), _minmax_reference(a.numpy(), b.numpy()),
                               rtol=0, atol=1e-15)
    k = minmax_kernel(a, a).numpy()
    np.testing.assert_allclose(np.diag(k), 1.0)  # empty rows included: alike
    assert np.linalg.eigvalsh(k).min() > -1e-12  # positive semi-definite


def test_count_fingerprints_are_morgan_counts_folded_and_capped():
    mol = Chem.MolFromSmiles("CCCCCCCCCCCCO")
    fp = count_fingerprint(mol)
    assert fp.shape == (1, BITS) and fp.dtype == torch.uint8
    unfolded = rdFingerprintGenerator.GetMorganGenerator(radius=RADIUS) \
        .GetSparseCountFingerprint(mol).GetNonzeroElements()  # {environment id: count}
    folded = np.zeros(BITS, dtype=np.int64)
    for key, count in unfolded.items():
        folded[key % BITS] += count
    np.testing.assert_array_equal(fp[0].numpy(), folded)
    long_chain = count_fingerprint(Chem.MolFromSmiles("C" * 400))
    assert int(long_chain.max()) == COUNT_CAP  # the CH2 environment occurs 398 times


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_stack_weight_is_the_least_squares_weight_clipped(seed):
    gen = torch.Generator().manual_seed(seed)
    r_d, r_f = torch.randn(50, generator=gen, dtype=torch.float64), \
        torch.randn(50, generator=gen, dtype=torch.float64) * (0.5 + seed)
    (w,) = stack_weights([r_d], [r_f])
    grid = np.linspace(0, 1, 10001)
    errors = [float((g * r_d + (1 - g) * r_f).square().mean()) for g in grid]
    assert abs(w - grid[int(np.argmin(errors))]) <= 1e-4
    assert stack_weights([r_d], [r_d * 3]) == [1.0]  # the fingerprint fit only worse
    assert stack_weights([r_d * 3], [r_d]) == [0.0]
    assert stack_weights([r_d], [r_d]) == [1.0]  # the same residuals: descriptors kept


def _problem(m: int = 30):
    fps = _counts(m, f=64, seed=3)
    gen = torch.Generator().manual_seed(4)
    y = torch.stack([fps[:, :8].double().sum(1), fps[:, 8:16].double().sum(1).sqrt()], 1)
    y = y + 0.1 * torch.randn(m, 2, generator=gen, dtype=torch.float64)
    y[5, 1] = float("nan")
    return fps, y.float()


def _all_rows(y: torch.Tensor) -> list[tuple[torch.Tensor, bool]]:
    return [((~torch.isnan(y[:, t])).nonzero()[:, 0], False) for t in range(y.shape[1])]


def test_fit_chooses_by_leave_one_out_and_its_residuals_are_refits_without_each():
    fps, y = _problem()
    model = FingerprintRidge(len(fps), 2, bits=64)
    info, residuals = model.fit(fps, y, _all_rows(y))
    assert info["ridge"] in FP_RIDGES
    k = _minmax_reference(fps.numpy(), fps.numpy())
    for t in range(2):
        rows = (~torch.isnan(y[:, t])).nonzero()[:, 0].numpy()
        yt = y[rows, t].double().numpy()
        offset = yt.mean()
        kk = k[np.ix_(rows, rows)]
        alpha = np.linalg.solve(kk + info["ridge"] * np.eye(len(rows)), yt - offset)
        np.testing.assert_allclose(model.alpha[rows, t].double().numpy(), alpha, rtol=1e-5,
                                   atol=1e-6)
        for i in (0, 7):  # leave molecule i out, refit, predict it
            keep = np.delete(np.arange(len(rows)), i)
            fit = np.linalg.solve(kk[np.ix_(keep, keep)] + info["ridge"] * np.eye(len(keep)),
                                  yt[keep] - offset)
            predicted = kk[i, keep] @ fit + offset
            assert residuals[t][i].item() == pytest.approx(yt[i] - predicted, abs=1e-8)
    predicted = model(fps)  # on the training molecules: K alpha + offset
    np.testing.assert_allclose(predicted[:, 0].numpy(),
                               k @ model.alpha[:, 0].double().numpy() + float(model.offset[0]),
                               rtol=1e-6, atol=1e-6)


def test_a_sampled_search_is_solved_on_every_label():
    fps, y = _problem(40)
    searched = [(torch.arange(0, 40, 2), True), (torch.arange(0, 40, 2), True)]
    model = FingerprintRidge(40, 2, bits=64)
    info, residuals = model.fit(fps, y, searched)
    assert [len(r) for r in residuals] == [20, 20]
    assert bool((model.alpha[1::2, 0] != 0).all())  # the unsearched molecules carry weight
    assert float(model.alpha[5, 1]) == 0.0  # no label, no weight


def test_the_kernel_part_stacks_the_two_ridges_by_their_leave_one_out_residuals():
    counts, y = _problem()
    fingerprints = torch.zeros(len(counts), BITS, dtype=torch.uint8)
    fingerprints[:, :counts.shape[1]] = counts  # (M, BITS)
    gen = torch.Generator().manual_seed(6)
    descriptors = counts[:, :5].float() + torch.randn(len(counts), 5, generator=gen)  # (M, 5)
    train = [Data(descriptors=descriptors[i:i + 1], fingerprint=fingerprints[i:i + 1])
             for i in range(len(counts))]
    config = KernelConfig(len(counts), 5, 2, fingerprints=True)
    part, info = KernelPart.fit(train, y, config)
    alone = FingerprintRidge(len(counts), 2)
    fp_info, residuals = alone.fit(fingerprints, y, part.descriptor.searched)
    weights = stack_weights(part.descriptor.loo_residuals, residuals)
    assert info["fingerprint"] == fp_info and info["descriptor_weight"] == weights
    assert part.mix.tolist() == pytest.approx(weights)
    molecules = Data(descriptors=descriptors[:7] + 0.1, fingerprint=fingerprints[:7])
    with torch.no_grad():
        expected = (part.mix * part.descriptor(molecules.descriptors)
                    + (1 - part.mix) * alone(molecules.fingerprint).float())  # (7, 2)
        torch.testing.assert_close(part(molecules), expected)


def test_bad_shapes_are_refused():
    fps, y = _problem()
    with pytest.raises(ValueError, match="expected fingerprints"):
        FingerprintRidge(len(fps) + 1, 2, bits=64).fit(fps, y, _all_rows(y))


def test_a_run_stacks_the_two_kernel_ridges_and_predicts_what_it_saved(tmp_path, capsys):
    data, out, stdout, metrics = freesolv_run(tmp_path, capsys)
    assert "fingerprint kernel ridge: ridge" in stdout
    (weight,) = metrics["components"]["kernel"]["descriptor_weight"]
    assert 0.0 <= weight <= 1.0
    ensemble, _ = load_run(out)
    kernel = ensemble.kernel
    assert kernel.config.fingerprints and float(kernel.mix[0]) == weight
    rows = predicted_rows(out, data, tmp_path, capsys)[:6]
    batch = collate_molecules([featurize(r["smiles"], ensemble.descriptor_dim)
                               for r in rows])
    network = ensemble.networks[0]
    with torch.no_grad():
        descriptor = kernel.descriptor(batch.descriptors)[:, 0].double()
        fingerprint = kernel.fingerprint(batch.fingerprint)[:, 0]
        stacked = weight * descriptor + (1 - weight) * fingerprint  # standardised
        b = float(ensemble.weight[0])  # the network's weight, fitted on the validation part
        expected = network.to_units(
            (b * network(batch)[:, 0].double() + (1 - b) * stacked)[:, None])
    got = torch.tensor([float(r["expt"]) for r in rows])
    np.testing.assert_allclose(got.numpy(), expected[:, 0].numpy(), rtol=1e-5, atol=1e-5)
    del batch.fingerprint
    kernel.mix.fill_(0.5)  # the fingerprints weigh in: they must be there
    assert ensemble.uses_fingerprints()
    with pytest.raises(ValueError, match="Morgan count fingerprints"):
        kernel(batch)
    with pytest.raises(ValueError, match="Morgan count fingerprints"):
        ensemble.member_units(batch)
    kernel.mix.fill_(1.0)  # descriptors alone: the fingerprints are not read
    assert not kernel.uses_fingerprints() and not ensemble.uses_fingerprints()
    torch.testing.assert_close(kernel(batch), kernel.descriptor(batch.descriptors),
                               rtol=0, atol=0)


def test_off_keeps_the_descriptor_kernel_ridge_alone(tmp_path, capsys):
    data = freesolv_slice(tmp_path / "fs.csv", 30)
    out = tmp_path / "run"
    status, stdout, _ = train_tiny(data, out, capsys, "--kernel-fingerprints", "off")
    assert status == 0 and "fingerprint kernel ridge" not in stdout
    ensemble, _ = load_run(out)
    assert ensemble.kernel is not None and ensemble.kernel.fingerprint is None
    assert not ensemble.kernel.config.fingerprints and not ensemble.uses_fingerprints()
    assert "kernel.mix" not in ensemble.state_dict()
    saved = load_checkpoint(out / ENSEMBLE_FILE, "ensemble")
    assert not saved["config"]["kernel"]["fingerprints"]
    assert not any(k.startswith(("kernel.fingerprint.", "kernel.mix"))
                   for k in saved["state_dict"])
    assert "descriptor_weight" not in json.loads(
        (out / "metrics.json").read_text())["components"]["kernel"]


def test_integrated_gradients_carry_the_fingerprint_part_to_the_atoms(tmp_path, capsys):
    _, out, _, _ = freesolv_run(tmp_path, capsys)
    ensemble, _ = load_run(out)
    smiles = "CC(=O)Nc1ccc(O)cc1"
    explained = explain_molecule(ensemble, smiles)
    a = explained.attribution
    assert a.values.shape == (11,)
    # complete: the contributions add up to the prediction minus the empty molecule's,
    # whose fingerprint part is the fingerprint kernel ridge's offset alone
    assert float(a.values.sum()) == pytest.approx(a.prediction - a.baseline,
                                                  abs=max(a.delta, 1e-4) + 1e-3)
    ensemble.kernel.mix.fill_(0.0)  # the kernel part all fingerprints: atoms still differ
    only = explain_molecule(ensemble, smiles).attribution
    assert float(only.values.std()) > 0
    assert float(only.values.sum()) == pytest.approx(only.prediction - only.baseline,
                                                     abs=max(only.delta, 1e-4) + 1e-3)


def test_fingerprint_shares_split_each_count_over_its_environments():
    mol = Chem.MolFromSmiles("CC(=O)Nc1ccc(O)cc1")
    shares = fingerprint_shares(mol)
    np.testing.assert_allclose(shares.sum(0), count_fingerprint(mol)[0].numpy(), atol=1e-12)
    assert shares.shape == (11, BITS) and (shares >= 0).all()
    capped = Chem.MolFromSmiles("C" * 400)
    np.testing.assert_allclose(fingerprint_shares(capped).sum(0),
                               count_fingerprint(capped)[0].numpy(), atol=1e-9)


def test_the_dense_kernel_equals_the_sparse_one_on_whole_counts():
    a, b = _counts(6), _counts(5, seed=2)
    np.testing.assert_array_equal(dense_minmax_kernel(a.double(), b).numpy(),
                                  minmax_kernel(a, b).numpy())


def test_a_run_started_without_fingerprints_resumes_without_them(tmp_path, capsys):
    data = freesolv_slice(tmp_path / "fs.csv", 30)
    out = tmp_path / "run"
    first = run_from_before(data, out, capsys, "--kernel-fingerprints", "off",
                             "kernel_fingerprints")  # the default now: on
    status, stdout, _ = train_tiny(data, out, capsys, "--resume")
    assert status == 0 and "fingerprint kernel ridge" not in stdout
    ensemble, _ = load_run(out)
    assert ensemble.kernel is not None and ensemble.kernel.fingerprint is None
    assert json.loads((out / "metrics.json").read_text())["test"]["rmse"] == first


def test_the_kernel_in_blocks_equals_the_kernel_at_once(monkeypatch):
    from setattn.molprop import kernels

    a, b = _counts(11), _counts(5, seed=5)
    whole = minmax_kernel(a, b)
    monkeypatch.setattr(kernels, "BLOCK", 3)  # blocks of 3, 3, 3 and 2 rows
    np.testing.assert_array_equal(minmax_kernel(a, b).numpy(), whole.numpy())
