"""The vector ridge: a kernel ridge on the shipped encoder's frozen molecule vectors,
stacked with the descriptor and fingerprint ridges, in the kernel part, in a run, in its
saved model, in explanations; and the shipped encoder itself."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from molecule_runs import freesolv_slice, predicted_rows, run, train_tiny

from setattn.chem.descriptors import descriptor_set_named
from setattn.datasets import DATASETS_DIR
from setattn.datasets.files import file_sha256
from setattn.datasets.molecules import read_molecule_table
from setattn.molprop import shipped
from setattn.molprop.batching import batches, collate_molecules
from setattn.molprop.checkpoint import (
    ENSEMBLE_FILE,
    CheckpointError,
    load_checkpoint,
    load_run,
    save_checkpoint,
)
from setattn.molprop.explain import explain_molecule
from setattn.molprop.featurize import featurize
from setattn.molprop.kernels import FingerprintRidge, KernelConfig, KernelPart, KernelRidge
from setattn.molprop.pretrain import encoder_network, load_pretrained
from setattn.molprop.stacking import stack_weight

WIDTH = descriptor_set_named("rdkit").width


@pytest.fixture(scope="module")
def encoder():
    return encoder_network(shipped.encoder_path("default"))


@pytest.fixture(scope="module")
def molecules():
    """40 FreeSolv molecules featurised, with their standardised targets (40, 1)."""
    table = read_molecule_table(DATASETS_DIR / "molecules" / "freesolv.csv", "smiles",
                                ["expt"])
    data = [featurize(s, WIDTH) for s in table.smiles[:40]]
    y = torch.as_tensor(table.y[:40], dtype=torch.float32)  # (40, 1)
    return data, (y - y.mean()) / y.std()


def test_default_names_the_shipped_encoder_and_checks_its_bytes(tmp_path, monkeypatch):
    assert shipped.encoder_path("default") == shipped.DEFAULT_ENCODER
    assert shipped.encoder_path(tmp_path / "x.pt") == tmp_path / "x.pt"
    record = json.loads(shipped.DEFAULT_ENCODER.with_suffix(".json").read_text())
    assert record["encoder_sha256"] == shipped.DEFAULT_SHA256
    assert load_pretrained(shipped.DEFAULT_ENCODER)["config"]["hidden"] == 192
    damaged = tmp_path / "encoder.pt"
    content = bytearray(shipped.DEFAULT_ENCODER.read_bytes())
    content[-100] ^= 1
    damaged.write_bytes(content)
    monkeypatch.setattr(shipped, "DEFAULT_ENCODER", damaged)
    with pytest.raises(CheckpointError, match="SHA-256 .* reinstall setattn"):
        shipped.encoder_path("default")
    monkeypatch.setattr(shipped, "DEFAULT_ENCODER", tmp_path / "gone.pt")
    with pytest.raises(FileNotFoundError, match="gone.pt: the shipped encoder is missing"):
        shipped.encoder_path("default")


def test_the_kernel_part_stacks_the_vector_ridge_on_the_pair(encoder, molecules):
    data, y = molecules
    config = KernelConfig(len(data), WIDTH, 1, fingerprints=True,
                          vectors=encoder.config.to_dict())
    part, info = KernelPart.fit(data, y, config, encoder=encoder)
    # the pair's leave-one-out residuals, from the two ridges fitted alone
    fingerprint = FingerprintRidge(len(data), 1)
    _, r_f = fingerprint.fit(torch.cat([d.fingerprint for d in data]), y,
                             part.descriptor.searched)
    mix = float(part.mix[0])
    pair = mix * part.descriptor.loo_residuals[0] + (1 - mix) * r_f[0]  # (M,)
    with torch.no_grad():
        vectors = torch.cat([encoder.encode(b) for b in batches(data, 7)])  # (M, 384)
    alone = KernelRidge(len(data), vectors.shape[1], 1)
    chosen = alone.fit(vectors, y)  # batches of 7, not 256: float32 rounding differs
    assert chosen == {**info["vectors"], "loo_rmse": pytest.approx(info["vectors"]["loo_rmse"])}
    weight = stack_weight(pair, alone.loo_residuals[0], centre=1.0, shrink=False)
    assert info["vector_stack_weight"] == [pytest.approx(weight, abs=1e-6)]
    assert 0.0 <= weight < 1.0 and part.uses_vectors()  # these vectors earn weight
    batch = collate_molecules([featurize(s, WIDTH) for s in ("CCO", "c1ccccc1O", "CC(=O)N")])
    with torch.no_grad():
        p_pair = mix * part.descriptor(batch.descriptors) + (1 - mix) * part.fingerprint(
            batch.fingerprint).float()  # (3, 1)
        expected = weight * p_pair + (1 - weight) * alone(encoder.encode(batch))
        torch.testing.assert_close(part(batch), expected, rtol=1e-5, atol=1e-5)
    part.vector_mix.fill_(1.0)  # weight 1: the encoder is not run
    assert not part.uses_vectors()
    with torch.no_grad():
        torch.testing.assert_close(part(batch), p_pair)


def test_the_encoder_stays_frozen_and_in_eval_mode(encoder, molecules):
    data, y = molecules
    config = KernelConfig(len(data), WIDTH, 1, vectors=encoder.config.to_dict())
    part, _ = KernelPart.fit(data, y, config, encoder=encoder)
    part.train()
    assert not part.vectors.encoder.training and part.vectors.ridge.training
    assert not any(p.requires_grad for p in part.parameters())
    with pytest.raises(ValueError, match="pass the encoder exactly when"):
        KernelPart.fit(data, y, config)
    with pytest.raises(ValueError, match="pass the encoder exactly when"):
        KernelPart.fit(data, y, KernelConfig(len(data), WIDTH, 1), encoder=encoder)


def test_a_run_with_kernel_vectors_saves_the_encoder_and_predicts_what_it_fitted(
        tmp_path, capsys):
    data = freesolv_slice(tmp_path / "fs.csv", 40)
    out = tmp_path / "run"
    status, stdout, _ = train_tiny(data, out, capsys, "--kernel-vectors", "default",
                                   epochs=2)
    assert status == 0, stdout
    assert "encoder vector kernel ridge (default)" in stdout
    metrics = json.loads((out / "metrics.json").read_text())
    (weight,) = metrics["components"]["kernel"]["vector_stack_weight"]
    ensemble, _ = load_run(out)
    kernel = ensemble.kernel
    assert float(kernel.vector_mix[0]) == pytest.approx(weight)
    shipped_state = load_pretrained(shipped.DEFAULT_ENCODER)["state_dict"]
    saved = load_checkpoint(out / ENSEMBLE_FILE, "ensemble")
    for key, value in shipped_state.items():  # the model carries the encoder's weights
        assert torch.equal(saved["state_dict"][f"kernel.vectors.encoder.{key}"], value)
    rows = predicted_rows(out, data, tmp_path, capsys)[:5]
    batch = collate_molecules([featurize(r["smiles"], ensemble.descriptor_dim) for r in rows])
    network = ensemble.networks[0]
    with torch.no_grad():
        b = float(ensemble.weight[0])
        expected = network.to_units(b * network(batch) + (1 - b) * kernel(batch))  # (5, 1)
    got = torch.tensor([float(r["expt"]) for r in rows])
    torch.testing.assert_close(got, expected[:, 0], rtol=1e-5, atol=1e-5)
    kernel.vector_mix.fill_(0.0)  # the vectors alone: atoms still carry the kernel part
    a = explain_molecule(ensemble, "CC(=O)Nc1ccc(O)cc1").attribution
    assert float(a.values.sum()) == pytest.approx(a.prediction - a.baseline,
                                                  abs=max(a.delta, 1e-4) + 1e-3)


def test_a_missing_or_foreign_encoder_is_named_before_anything_is_read(tmp_path, capsys):
    data = freesolv_slice(tmp_path / "fs.csv", 30)
    status, _, err = train_tiny(data, tmp_path / "a", capsys, "--kernel-vectors",
                                tmp_path / "none.pt")
    assert status != 0 and "argument --kernel-vectors:" in err and "none.pt" in err
    assert not (tmp_path / "a" / "split.json").exists()
    foreign = tmp_path / "foreign.pt"
    save_checkpoint({"kind": "model", "config": {}, "state_dict": {}, "meta": {}}, foreign)
    status, _, err = train_tiny(data, tmp_path / "b", capsys, "--kernel-vectors", foreign)
    assert status != 0 and "argument --kernel-vectors:" in err and "foreign.pt" in err


def test_a_model_whose_encoder_config_is_out_of_range_is_refused(tmp_path, capsys):
    data = freesolv_slice(tmp_path / "fs.csv", 30)
    out = tmp_path / "run"
    assert train_tiny(data, out, capsys, "--kernel-vectors", "default")[0] == 0
    path = out / ENSEMBLE_FILE
    ckpt = load_checkpoint(path, "ensemble")
    ckpt["config"]["kernel"]["vectors"]["hidden"] = 10 ** 9
    save_checkpoint(ckpt, path)
    with pytest.raises(CheckpointError, match="kernel config refused"):
        load_run(out)


def test_pretrained_default_fine_tunes_the_shipped_encoder(tmp_path, capsys):
    data = freesolv_slice(tmp_path / "fs.csv", 30)
    out = tmp_path / "run"
    status, stdout, _ = train_tiny(data, out, capsys, "--pretrained", "default")
    assert status == 0 and "networks start from the pretrained encoder default" in stdout
    ensemble, _ = load_run(out)
    assert ensemble.networks[0].config.hidden == 192  # the encoder's architecture


def test_embed_reads_the_shipped_encoder(tmp_path, capsys):
    data = freesolv_slice(tmp_path / "fs.csv", 5)
    status, _, err = run(["embed", "--model", "default", "--data", data, "--output",
                          tmp_path / "v.csv", "--smiles-column", "smiles"], capsys)
    assert status == 0, err
    header = (tmp_path / "v.csv").read_text().splitlines()[0].split(",")
    assert header[0] == "smiles" and len(header) == 2 + 384
    status, usage, _ = run(["embed", "--help"], capsys)
    assert status == 0 and "or default: the encoder shipped" in " ".join(usage.split())


def test_the_shipped_encoder_is_package_data():
    pyproject = (Path(__file__).parents[2] / "pyproject.toml").read_text()
    listed = pyproject.split("[tool.setuptools.package-data]")[1].split("[")[1]
    root = Path(shipped.__file__).parents[1]  # setattn/
    relative = shipped.DEFAULT_ENCODER.relative_to(root)
    patterns = [p.strip(' "') for p in listed.split("]")[0].split(",")]
    assert any(relative.match(p) for p in patterns)
    assert any(relative.with_suffix(".json").match(p) for p in patterns)
    assert file_sha256(shipped.DEFAULT_ENCODER) == shipped.DEFAULT_SHA256
