"""setattn pretrain: targets, encoder checkpoints, resume, and fine-tuning in train."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch
from molecule_runs import keep_threads  # noqa: F401 (a fixture, used by name)

from setattn import cli
from setattn.datasets.molecules import read_molecule_table
from setattn.molprop import pretrain as pt
from setattn.molprop.batching import collate_molecules
from setattn.molprop.checkpoint import CheckpointError, load_checkpoint
from setattn.molprop.config import NetworkConfig, SettingError, new_run
from setattn.molprop.featurize import featurize
from setattn.molprop.network import MoleculeNetwork
from setattn.molprop.run import run_training

FREESOLV = Path(__file__).resolve().parents[2] / "datasets" / "molecules" / "freesolv.csv"
TINY = dict(molecules=160, epochs=2, batch_size=32, hidden=16, layers=1, heads=2, seed=3)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """A corpus of 200 SMILES (FreeSolv's, targets dropped), with one invalid row."""
    table = read_molecule_table(FREESOLV, "smiles", [])
    path = tmp_path_factory.mktemp("corpus") / "corpus.csv"
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["name", "SMILES"])
        writer.writerows([f"m{i}", s] for i, s in enumerate(table.smiles[:199]))
        writer.writerow(["bad", "not a smiles"])
    return path


@pytest.fixture(scope="module")
def pretrained(corpus, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("pretrained")
    config = pt.PretrainConfig(corpus=str(corpus), smiles_column="SMILES", **TINY)
    pt.pretrain(config, out, progress=False, log=lambda line: None)
    return out


def test_descriptor_targets_are_clipped_z_scores_without_constant_columns():
    torch.manual_seed(0)
    d = torch.randn(1000, 3) * torch.tensor([1.0, 10.0, 0.0]) + 5.0  # column 2 constant
    d[0, 0] = 1e6  # an outlier, clipped to the 99.5 % quantile
    targets = pt.Targets.fit(d)
    assert targets.keep.tolist() == [True, True, False]
    z = targets.descriptors(d)
    assert z.abs().max() <= pt.Z_CLIP and z[:, 2].abs().max() == 0
    assert z[1:, 1].mean().abs() < 0.05 and (z[1:, 1].std() - 1).abs() < 0.05
    assert z[0, 0] == z[:, 0].max()  # the outlier sits at the clip bound
    assert torch.isfinite(targets.descriptors(torch.full((1, 3), float("nan")))).all()


def test_the_loss_leaves_out_the_descriptors_that_do_not_vary():
    out = torch.zeros(2, 3 + 4)
    z = torch.tensor([[1.0, 2.0, 100.0], [1.0, 2.0, 100.0]])
    bits = torch.ones(2, 4)
    keep = torch.tensor([True, True, False])
    expected = (1 + 4) / 2 + torch.log(torch.tensor(2.0))  # MSE of two + BCE at logit 0
    assert pt.pretrain_loss(out, z, bits, keep).item() == pytest.approx(expected.item())


def test_draw_rows_is_a_seeded_sample():
    assert pt.draw_rows(10, 4, 1) == pt.draw_rows(10, 4, 1)
    assert pt.draw_rows(10, 4, 1) != pt.draw_rows(10, 4, 2)
    assert sorted(pt.draw_rows(10, 0, 5)) == list(range(10))


def test_pretraining_writes_an_encoder_with_its_provenance(pretrained, corpus):
    record = json.loads((pretrained / pt.RECORD_FILE).read_text())
    assert record["finished"] and len(record["epochs"]) == 2
    args = cli.build_parser().parse_args(record["command"].split()[1:])  # it reproduces the run
    assert pt.PretrainConfig(**{k: getattr(args, k) for k in record["config"]}) == \
        pt.PretrainConfig(**record["config"])
    assert record["molecules"]["train"] + record["molecules"]["held_out"] == 159
    assert record["molecules"]["skipped"] == 1  # the invalid row
    assert record["corpus"]["file"] == corpus.name and len(record["corpus"]["sha256"]) == 64
    losses = [row["held_out_loss"] for row in record["epochs"]]
    assert record["best_epoch"] == 1 + losses.index(min(losses))
    ckpt = pt.load_pretrained(pretrained / pt.ENCODER_FILE)
    assert ckpt["config"]["hidden"] == 16 and ckpt["config"]["layers"] == 1
    assert not any(key.startswith("head.") for key in ckpt["state_dict"])
    assert ckpt["meta"]["epoch"] == record["best_epoch"]


def test_the_encoder_loads_into_a_network_of_its_architecture(pretrained):
    ckpt = pt.load_pretrained(pretrained / pt.ENCODER_FILE)
    network = MoleculeNetwork(NetworkConfig(**ckpt["config"], descriptor_dim=206))
    head = network.head[0].weight.clone()
    pt.load_encoder(network, ckpt)
    for key, value in ckpt["state_dict"].items():
        assert torch.equal(network.state_dict()[key], value), key
    assert torch.equal(network.head[0].weight, head)  # the head is the network's own
    wider = MoleculeNetwork(NetworkConfig(**{**ckpt["config"], "hidden": 32}))
    with pytest.raises(CheckpointError, match="model.hidden 16, this network has 32"):
        pt.load_encoder(wider, ckpt, "enc.pt")


@pytest.mark.usefixtures("keep_threads")
def test_embed_writes_the_encoders_vectors(pretrained, tmp_path, capsys):
    """``setattn embed --model`` takes the pretraining folder or its encoder.pt; the
    vectors are what a network fine-tuned from it starts with (readout and atom sum)."""
    data = tmp_path / "mols.csv"
    data.write_text("smiles\nCCO\nnot a smiles\nc1ccccc1O\n")
    outputs = [tmp_path / "folder.csv", tmp_path / "file.csv"]
    for model, output in zip([pretrained, pretrained / pt.ENCODER_FILE], outputs):
        assert cli.main(["embed", "--model", str(model), "--data", str(data),
                         "--output", str(output)]) == 0
        assert "wrote 3 rows of 32 numbers" in capsys.readouterr().out  # 2 x hidden 16
    assert outputs[0].read_text() == outputs[1].read_text()
    with open(outputs[0], newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert rows[1]["m0_0"] == "" and rows[1]["error"].startswith("invalid SMILES")
    ckpt = pt.load_pretrained(pretrained / pt.ENCODER_FILE)
    network = MoleculeNetwork(NetworkConfig(**ckpt["config"], num_tasks=3))  # any head
    fresh = network.encode(collate_molecules([featurize("CCO", 0)]))[0]  # (32,)
    pt.load_encoder(network, ckpt)
    network.eval()
    with torch.no_grad():
        want = network.encode(collate_molecules([featurize(s, 0) for s in
                                                 ("CCO", "c1ccccc1O")]))  # (2, 32)
    got = torch.tensor([[float(r[f"m0_{i}"]) for i in range(32)] for r in (rows[0], rows[2])])
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    assert not torch.allclose(fresh.detach(), want[0], atol=1e-3)  # the encoder's weights


@pytest.mark.usefixtures("keep_threads")
def test_embed_names_a_folder_that_holds_no_model_and_keeps_the_encoder(pretrained, tmp_path,
                                                                        capsys):
    data = tmp_path / "mols.csv"
    data.write_text("smiles\nCCO\n")
    status = cli.main(["embed", "--model", str(tmp_path), "--data", str(data),
                       "--output", str(tmp_path / "v.csv")])
    err = capsys.readouterr().err
    assert status == 2 and "argument --model" in err and "no encoder.pt" in err
    record = (pretrained / pt.RECORD_FILE).read_bytes()
    status = cli.main(["embed", "--model", str(pretrained), "--data", str(data),
                       "--output", str(pretrained / pt.RECORD_FILE)])
    assert status == 2 and "--model's pretrain.json" in capsys.readouterr().err
    assert (pretrained / pt.RECORD_FILE).read_bytes() == record


def test_a_training_checkpoint_is_not_an_encoder(pretrained):
    with pytest.raises(CheckpointError, match="not a setattn pretrained checkpoint"):
        pt.load_pretrained(pretrained / pt.LAST_FILE)
    assert load_checkpoint(pretrained / pt.LAST_FILE, "pretraining")["progress"]["epoch"] == 2


def test_an_interrupted_pretraining_resumes_to_the_same_numbers(corpus, pretrained, tmp_path,
                                                                monkeypatch):
    config = pt.PretrainConfig(corpus=str(corpus), smiles_column="SMILES", **TINY)
    calls = {"n": 0}
    loss = pt.pretrain_loss

    def interrupted(*args):
        calls["n"] += 1
        if calls["n"] == 9:  # the third batch of epoch 2 (5 batches and a held-out pass each)
            raise KeyboardInterrupt
        return loss(*args)

    monkeypatch.setattr(pt, "pretrain_loss", interrupted)
    monkeypatch.setattr(pt, "SHARD", 64)  # three shards
    with pytest.raises(KeyboardInterrupt):
        pt.pretrain(config, tmp_path, checkpoint_seconds=0, progress=False, log=lambda _: None)
    assert load_checkpoint(tmp_path / pt.LAST_FILE, "pretraining")["progress"]["step"] == 2
    assert len(list((tmp_path / "shards").glob("*.csv.gz"))) == 3
    monkeypatch.setattr(pt, "pretrain_loss", loss)
    result = pt.pretrain(None, tmp_path, resume=True, progress=False, log=lambda _: None)
    whole = json.loads((pretrained / pt.RECORD_FILE).read_text())["epochs"]
    for got, expected in zip(result.rows, whole, strict=True):
        assert got["train_loss"] == pytest.approx(expected["train_loss"], rel=1e-5)
        assert got["held_out_loss"] == pytest.approx(expected["held_out_loss"], rel=1e-5)


def test_a_new_pretraining_does_not_overwrite_one(corpus, pretrained):
    config = pt.PretrainConfig(corpus=str(corpus), smiles_column="SMILES", **TINY)
    with pytest.raises(ValueError, match="holds a pretraining run"):
        pt.pretrain(config, pretrained, progress=False)


def test_cli_pretrain_errors_name_the_flag(corpus, pretrained, tmp_path, capsys):
    assert cli.main(["pretrain", "--output-dir", str(tmp_path / "a")]) == 2
    assert "argument --corpus: is required" in capsys.readouterr().err
    assert cli.main(["pretrain", "--output-dir", str(tmp_path / "b"), "--corpus",
                     str(corpus)]) == 2  # its SMILES column is SMILES
    assert "smiles" in capsys.readouterr().err
    assert cli.main(["pretrain", "--output-dir", str(pretrained), "--resume",
                     "--epochs", "5"]) == 2
    assert "argument --epochs: is 5, but the pretraining" in capsys.readouterr().err


def test_a_corpus_too_small_is_named_with_its_counts(tmp_path):
    empty, small = tmp_path / "empty.csv", tmp_path / "small.csv"
    empty.write_text("smiles\n")
    small.write_text("smiles\nCCO\nnot a smiles\n")
    with pytest.raises(ValueError, match="empty.csv: no rows below the header"):
        pt.pretrain(pt.PretrainConfig(corpus=str(empty), **TINY), tmp_path / "a",
                    progress=False, log=lambda line: None)
    assert not (tmp_path / "a" / pt.RECORD_FILE).exists()  # nothing to resume
    lines: list[str] = []
    with pytest.raises(ValueError, match=r"small.csv: 1 valid molecule \(1 row skipped: "
                       r"invalid or too large\), too few to pretrain with batches of 32"):
        pt.pretrain(pt.PretrainConfig(corpus=str(small), **TINY), tmp_path / "b",
                    progress=False, log=lines.append)
    assert lines == [f"drew 2 of the 2 rows of {small}"]


def test_fine_tuning_starts_from_the_encoder_and_freezes_it(pretrained, tmp_path):
    encoder = pretrained / pt.ENCODER_FILE
    run = new_run({"data": str(FREESOLV), "target_columns": ["expt"], "epochs": 2,
                   "ensemble_size": 1, "kernel_ridge": "off", "pretrained": str(encoder),
                   "freeze_epochs": 2})
    run_training(run, tmp_path, log=lambda _: None)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["model"]["hidden"] == 16 and config["model"]["layers"] == 1  # the encoder's
    best = load_checkpoint(tmp_path / "model_0" / "best.pt")
    ckpt = pt.load_pretrained(encoder)
    for key, value in ckpt["state_dict"].items():  # frozen for every epoch: unchanged
        assert torch.equal(best["state_dict"][key], value), key
    torch.manual_seed(0)  # as member 0 starts: its head before training
    initial = MoleculeNetwork(NetworkConfig.from_dict(config["model"]))
    assert not torch.equal(best["state_dict"]["head.0.weight"], initial.head[0].weight)


def test_freezing_needs_an_encoder():
    run = new_run({"data": str(FREESOLV), "target_columns": ["expt"], "freeze_epochs": 1})
    with pytest.raises(SettingError, match="freeze_epochs: needs a pretrained encoder"):
        run.validate()


def test_a_slower_encoder_moves_less_and_the_head_keeps_the_rate(pretrained, tmp_path):
    encoder = pretrained / pt.ENCODER_FILE
    moved = {}
    for scale in (1.0, 1e-3):
        out = tmp_path / str(scale)
        run = new_run({"data": str(FREESOLV), "target_columns": ["expt"], "epochs": 2,
                       "ensemble_size": 1, "kernel_ridge": "off", "pretrained": str(encoder),
                       "encoder_lr": scale})
        run_training(run, out, log=lambda _: None)
        best = load_checkpoint(out / "model_0" / "best.pt")["state_dict"]
        start = pt.load_pretrained(encoder)["state_dict"]
        moved[scale] = max(float((best[k] - v).abs().max()) for k, v in start.items()
                           if v.is_floating_point())
        last = load_checkpoint(out / "model_0" / "last.pt", "training")
        groups = last["optimizer"]["param_groups"]
        assert [g["max_lr"] for g in groups] == pytest.approx(
            [1e-3] if scale == 1.0 else [1e-3, 1e-3 * scale])
    assert moved[1e-3] < moved[1.0] / 20


def test_a_slower_encoder_needs_an_encoder():
    run = new_run({"data": str(FREESOLV), "target_columns": ["expt"], "encoder_lr": 0.1})
    with pytest.raises(SettingError, match="encoder_lr: needs a pretrained encoder"):
        run.validate()
