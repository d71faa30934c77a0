"""Self-supervised pretraining of the molecule network's encoder on unlabelled SMILES.

    pretrain(config, out_dir)  ->  PretrainResult      (setattn pretrain)
    load_pretrained(path)      ->  the encoder checkpoint
    load_encoder(network, ckpt)    (fine-tuning: setattn train --pretrained PATH)
    encoder_ensemble(path)     ->  the encoder alone, for its molecule vectors (setattn embed)

The targets come from each molecule itself, computed once with its atom graph (the
feature cache of ``featurize_csv``, one shard of ``SHARD`` molecules at a time):

- its RDKit 2D descriptors (the default set), each standardised by the mean and standard
  deviation of the training part's values clipped to their 0.5-99.5 % quantiles, the
  z-scores clipped to +-``Z_CLIP`` (a descriptor that does not vary is left out);
- which of the folded Morgan count fingerprint's ``BITS`` slots are set.

The network is a ``MoleculeNetwork`` whose head predicts all of them (F_desc + BITS
outputs) from the atom graph alone (no descriptors in its readout); the loss is the mean
squared error of the z-scores plus the binary cross entropy of the bits. The encoder is
every part of the network but its head: the atom embedding, the graph attention layers,
the global blocks and the readout. ``encoder.pt`` keeps the weights of the epoch with the
lowest loss on a held-out part of the corpus, with the corpus's provenance (file, SHA-256,
rows), the settings, the loss curve and the training time.

Training resumes after an interruption from ``last.pt`` (written every
``checkpoint_seconds`` of training, mid-epoch too, and on Ctrl-C): each epoch's order is a
seeded permutation, so a resumed run continues where it stopped.
"""

from __future__ import annotations

import csv
import gzip
import json
import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from torch_geometric.data import Data
from tqdm import tqdm

from setattn.datasets.files import existing_file, file_sha256
from setattn.datasets.molecules import read_molecule_table
from setattn.domains.fingerprints import BITS
from setattn.files import atomic_open, json_safe
from setattn.molprop.batching import PackedMolecules, batches
from setattn.molprop.checkpoint import (
    CheckpointError,
    check_output_dir,
    load_checkpoint,
    load_run,
    save_checkpoint,
    snapshot,
)
from setattn.molprop.config import (
    DEFAULT_DESCRIPTORS,
    DEVICE_HELP,
    MAX_HEAVY_ATOMS,
    NetworkConfig,
    Range,
    SettingError,
    check_ranges,
    descriptor_dim,
    lr_option,
    option,
    resolve_device,
    weight_decay_option,
)
from setattn.molprop.ensemble import Ensemble
from setattn.molprop.featurize import featurize_csv
from setattn.molprop.network import MoleculeNetwork
from setattn.molprop.shipped import encoder_path
from setattn.wording import counted

__all__ = ["ARCHITECTURE", "PretrainConfig", "PretrainResult", "command_line", "encoder_ensemble",
           "encoder_network", "load_embedding_model", "load_encoder", "load_pretrained", "pretrain",
           "pretrain_targets", "pretrained_architecture", "read_config"]

Log = Callable[[str], None]

SHARD = 20_000
"""Molecules featurised (and cached) together: the unit of the featurisation's progress."""

Z_CLIP = 6.0
"""Standardised descriptor targets are clipped to +-this."""

ARCHITECTURE = ("hidden", "layers", "heads", "conv", "norm", "global_layers", "max_hops",
                "atom_dim", "bond_dim")
"""The ``NetworkConfig`` fields the encoder's weights fix: a fine-tuned network takes
them from the checkpoint."""

ENCODER_FILE = "encoder.pt"
LAST_FILE = "last.pt"
RECORD_FILE = "pretrain.json"
CORPUS_FILE = "corpus.csv"


@dataclass
class PretrainConfig:
    """A pretraining run (saved as ``pretrain.json``; ``--resume`` reads it back).

    Attributes:
        corpus: CSV of SMILES (``.csv`` or ``.csv.gz``), labels ignored.
        smiles_column: its SMILES column.
        molecules: how many of its rows, drawn at random with ``seed`` (0: all).
        holdout: the share of them held out to choose the epoch.
        epochs, batch_size, lr, weight_decay: AdamW with a OneCycle schedule.
        seed: the draw, the initialisation and every epoch's order.
        hidden, layers, heads, conv, global_layers: the encoder (``NetworkConfig``).
        descriptors: the descriptor set predicted (not "none").
        device: where it trains.
    """

    corpus: str = option(None, "CSV of SMILES (.csv or .csv.gz; other columns are ignored; "
                         "required unless --resume)")
    smiles_column: str = option("smiles", "its SMILES column")
    molecules: int = option(200_000, "rows drawn at random from the corpus (0: all)",
                            type=int, bounds=Range(0))
    holdout: float = option(0.02, "share of them held out to choose the epoch", type=float,
                            bounds=Range(0, low_open=True, below=0.5))
    epochs: int = option(8, "passes over the training molecules", type=int,
                         bounds=Range(1, largest=10_000))
    batch_size: int = option(128, "molecules per batch", type=int,
                             bounds=Range(1, largest=65_536))
    lr: float = lr_option()
    weight_decay: float = weight_decay_option()
    seed: int = option(0, "seed of the draw, the initialisation and the batch order",
                       type=int, bounds=Range(0))
    hidden: int = option(192, "atom state width (divisible by --heads)", type=int,
                         bounds=Range(1, largest=4096))
    layers: int = option(3, "graph attention layers", type=int, bounds=Range(1, largest=64))
    heads: int = option(4, "attention heads per layer and in the readout", type=int,
                        bounds=Range(1, largest=64))
    conv: str = option("gat", "graph attention layers", choices=["gat", "gatv2"])
    global_layers: int = option(0, "global attention blocks after the last N layers",
                                type=int, bounds=Range(0, largest=64))
    descriptors: str = option(DEFAULT_DESCRIPTORS, "descriptor set predicted",
                              choices=["fast", "lean", "rdkit"])
    device: str = option("auto", DEVICE_HELP, metavar="DEVICE")

    def network(self, outputs: int) -> NetworkConfig:
        """The pretraining network: the encoder with a head of ``outputs`` values."""
        config = NetworkConfig(num_tasks=outputs, hidden=self.hidden, layers=self.layers,
                               heads=self.heads, conv=self.conv,
                               global_layers=self.global_layers)
        config.validate()
        return config

    def validate(self) -> None:
        """Raises ``SettingError`` naming a setting out of range."""
        check_ranges(self)
        if self.hidden % self.heads:
            raise SettingError("hidden", f"{self.hidden} is not divisible by heads "
                               f"{self.heads}", colon=True)
        if self.global_layers > self.layers:
            raise SettingError("global_layers", f"must be at most layers {self.layers}, "
                               f"got {self.global_layers}")


@dataclass
class PretrainResult:
    """What ``pretrain`` returns.

    Attributes:
        encoder: the path of ``encoder.pt``.
        best_epoch: the epoch of its weights.
        rows: one row per finished epoch (training and held-out losses, seconds).
        molecules: training and held-out molecule counts, and the corpus rows skipped.
        seconds: featurisation and training time, resumed runs included.
    """

    encoder: Path
    best_epoch: int
    rows: list[dict]
    molecules: dict
    seconds: dict = field(default_factory=dict)


# -- the corpus ---------------------------------------------------------------------------

def draw_rows(n_rows: int, molecules: int, seed: int) -> list[int]:
    """``molecules`` of ``n_rows`` row numbers (all for 0), in a seeded random order."""
    rows = list(range(n_rows))
    random.Random(seed).shuffle(rows)
    return rows if molecules == 0 else rows[:molecules]


def write_corpus(config: PretrainConfig, out: Path, log: Log = print) -> Path:
    """``corpus.csv`` in ``out``: the drawn SMILES with their row in the corpus file.

    Raises:
        FileNotFoundError, ValueError: the corpus file or its SMILES column is missing, or
        the file has no row.
    """
    table = read_molecule_table(config.corpus, config.smiles_column, [])
    n_rows = len(table.smiles)
    if n_rows == 0:
        raise ValueError(f"{config.corpus}: no rows below the header, nothing to pretrain on")
    rows = draw_rows(n_rows, config.molecules, config.seed)
    log(f"drew {len(rows):,} of the {n_rows:,} rows of {config.corpus}")
    path = out / CORPUS_FILE
    with atomic_open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["smiles", "corpus_row"])
        writer.writerows((table.smiles[r], r) for r in rows)
    return path


def _shard_files(corpus: Path, out: Path) -> list[Path]:
    """The corpus cut into shards of ``SHARD`` molecules (``shards/NNNN.csv.gz``),
    written once."""
    shards = out / "shards"
    done = shards / "done.json"
    if done.is_file():
        return [shards / name for name in json.loads(done.read_text())]
    shards.mkdir(exist_ok=True)
    with open(corpus, newline="") as handle:
        reader = csv.reader(handle)
        header = next(reader)
        names, part = [], []

        def flush() -> None:
            name = f"{len(names):04d}.csv.gz"
            with atomic_open(shards / name, "wb") as raw, \
                    gzip.open(raw, "wt", newline="") as text:
                writer = csv.writer(text)
                writer.writerow(header)
                writer.writerows(part)
            names.append(name)
            part.clear()

        for record in reader:
            part.append(record)
            if len(part) == SHARD:
                flush()
        if part or not names:
            flush()
    with atomic_open(done, "w") as handle:
        json.dump(names, handle)
    return [shards / name for name in names]


def featurize_corpus(corpus: Path, out: Path, descriptors: str, *, progress: bool = True
                     ) -> tuple[list[Data], int]:
    """Every molecule of ``corpus.csv`` with its descriptors and fingerprint, one shard at a
    time through the feature cache (a second call reads the cache), with a progress bar.

    Returns:
        (molecules in corpus order, count of rows skipped: invalid or too large).
    """
    width = descriptor_dim(descriptors)
    data: list[Data] = []
    skipped = 0
    files = _shard_files(corpus, out)
    with open(corpus, newline="") as handle:
        rows = sum(1 for _ in csv.reader(handle)) - 1  # below the header
    with tqdm(total=rows, desc="featurise", unit="mol", disable=not progress,
              smoothing=0.1) as bar:
        for file in files:
            part = featurize_csv(file, "smiles", [], width, max_heavy_atoms=MAX_HEAVY_ATOMS)
            data.extend(part.data)
            skipped += len(part.failures)
            bar.update(len(part.data) + len(part.failures))
    return data, skipped


# -- targets ------------------------------------------------------------------------------

@dataclass
class Targets:
    """How the descriptor and fingerprint targets are made from a molecule's features.

    Attributes:
        low, high: (F_desc,) clip bounds of each descriptor (training quantiles).
        mean, std: (F_desc,) of the clipped training values.
        keep: (F_desc,) bool, descriptors that vary in the training part.
    """

    low: Tensor
    high: Tensor
    mean: Tensor
    std: Tensor
    keep: Tensor

    @classmethod
    def fit(cls, descriptors: Tensor) -> Targets:
        """From (M, F_desc) training descriptors."""
        d = torch.nan_to_num(descriptors.double(), nan=0.0, posinf=0.0, neginf=0.0)
        sample = d[torch.linspace(0, len(d) - 1, min(len(d), 100_000), device=d.device).long()]
        low = torch.quantile(sample, 0.005, dim=0)  # (F_desc,)
        high = torch.quantile(sample, 0.995, dim=0)  # (F_desc,)
        clipped = d.clamp(low, high)  # (M, F_desc)
        std = clipped.std(0)  # (F_desc,)
        keep = std > 1e-9
        return cls(low.float(), high.float(), clipped.mean(0).float(),
                   std.clamp_min(1e-9).float(), keep)

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in ("low", "high", "mean", "std", "keep")}

    def descriptors(self, raw: Tensor) -> Tensor:
        """(G, F_desc) raw descriptors -> their z-scores, clipped; 0 where left out."""
        raw = torch.nan_to_num(raw, nan=0.0, posinf=0.0, neginf=0.0)
        z = ((raw.clamp(self.low, self.high) - self.mean) / self.std).clamp(-Z_CLIP, Z_CLIP)
        return z * self.keep  # (G, F_desc)


def pretrain_targets(batch: Any, targets: Targets) -> tuple[Tensor, Tensor]:
    """The batch's (G, F_desc) descriptor z-scores and (G, BITS) fingerprint bits (0/1)."""
    return targets.descriptors(batch.descriptors), (batch.fingerprint > 0).float()


def pretrain_loss(out: Tensor, z: Tensor, bits: Tensor, keep: Tensor) -> Tensor:
    """Mean squared error of the kept descriptors plus binary cross entropy of the bits.

    Args:
        out: (G, F_desc + BITS) network outputs; z: (G, F_desc); bits: (G, BITS);
        keep: (F_desc,) bool.
    """
    width = z.shape[1]
    mse = (out[:, :width] - z).square()[:, keep].mean()
    bce = F.binary_cross_entropy_with_logits(out[:, width:], bits)
    return mse + bce


# -- checkpoints --------------------------------------------------------------------------

def load_pretrained(path: str | Path) -> dict:
    """An ``encoder.pt`` checkpoint (kind "pretrained"), read with ``weights_only=True``;
    ``default`` reads the encoder shipped with setattn (``setattn.molprop.shipped``).

    Raises:
        FileNotFoundError: naming a missing file; ``CheckpointError``: naming a file that
        is not a setattn encoder checkpoint.
    """
    path = encoder_path(path)
    ckpt = load_checkpoint(path, "pretrained")
    architecture = ckpt["config"]
    if not isinstance(architecture, dict) or set(architecture) != set(ARCHITECTURE):
        raise CheckpointError(f"{path}: its 'config' does not name the encoder's "
                              f"{', '.join(ARCHITECTURE)}")
    return ckpt


def pretrained_architecture(ckpt: dict) -> dict:
    """The ``NetworkConfig`` fields the encoder fixes (``ARCHITECTURE``)."""
    return dict(ckpt["config"])


def load_encoder(network: MoleculeNetwork, ckpt: dict, path: str | Path = "encoder.pt"
                 ) -> None:
    """Copy a pretrained encoder's weights into ``network`` (its head stays as it is).

    Raises:
        CheckpointError: naming ``path`` and the first architecture setting that differs,
            or the weights that do not fit.
    """
    now = network.config.to_dict()
    for key, value in pretrained_architecture(ckpt).items():
        if now[key] != value:
            raise CheckpointError(f"{path}: the encoder was pretrained with model.{key} "
                                  f"{value!r}, this network has {now[key]!r}")
    state = ckpt["state_dict"]
    expected = set(network.encoder_state())
    if set(state) != expected:
        extra = sorted(set(state) - expected)[:3]
        missing = sorted(expected - set(state))[:3]
        raise CheckpointError(f"{path}: the encoder's weights do not fit this network "
                              f"(unexpected {extra}, missing {missing})")
    try:
        network.load_state_dict(state, strict=False)
    except RuntimeError as err:
        first = str(err).strip().splitlines()[0]
        raise CheckpointError(f"{path}: the encoder's weights do not fit ({first})") from None


def encoder_network(path: str | Path) -> MoleculeNetwork:
    """The encoder of an ``encoder.pt`` as a network on the CPU, in eval mode: its
    ``encode`` gives (M, 2 D) molecule vectors from the atom graph (D the encoder's
    ``hidden``; no descriptors). Pretraining's head is not kept: the network's own head
    is untrained and predicts nothing worth reading.

    Raises:
        FileNotFoundError, CheckpointError: as ``load_pretrained``.
    """
    ckpt = load_pretrained(path)
    config = NetworkConfig.from_dict({**NetworkConfig().to_dict(),
                                      **pretrained_architecture(ckpt)})
    network = MoleculeNetwork(config)
    load_encoder(network, ckpt, path)
    return network.eval()


def encoder_ensemble(path: str | Path, device: str | torch.device = "cpu") -> Ensemble:
    """``encoder_network(path)`` as an ensemble of one network on ``device``, for its
    molecule vectors alone (``Ensemble.member_vectors``,
    ``setattn.molprop.predict.embed_smiles``, ``setattn embed``).

    Raises:
        FileNotFoundError, CheckpointError: as ``load_pretrained``.
    """
    return Ensemble([encoder_network(path).to(device)])


def load_embedding_model(path: str | Path, device: str | torch.device = "cpu", *,
                         name: str = "--model") -> tuple[Ensemble, dict]:
    """What ``setattn embed`` reads vectors with: a run (``load_run``: its directory or
    one ``best.pt``), or a pretrained encoder (its ``encoder.pt``, the folder
    ``setattn pretrain`` wrote it to, or ``default``: the encoder shipped with setattn,
    ``setattn.molprop.shipped``), as ``encoder_ensemble``.

    Returns:
        (ensemble, meta): meta is the run's (``load_run``), or ``{"kind": "pretrained",
        "encoder": path}`` for an encoder (its corpus's SMILES column is not the
        data's: the default column is then ``smiles``).

    Raises:
        FileNotFoundError, CheckpointError: naming what is missing or not ours.
    """
    path = encoder_path(path)
    encoder = path
    if path.is_dir() and not (path / "config.json").is_file():
        encoder = path / ENCODER_FILE
        if not encoder.is_file():
            raise FileNotFoundError(f"argument {name}: {path} is neither a setattn run "
                                    f"directory (no config.json) nor a pretraining folder "
                                    f"(no {ENCODER_FILE})")
    if encoder.is_file() and load_checkpoint(encoder, None).get("kind") == "pretrained":
        return encoder_ensemble(encoder, device), {"kind": "pretrained",
                                                   "encoder": str(encoder)}
    return load_run(path, device, name=name)


# -- training -----------------------------------------------------------------------------

def _epoch_order(n: int, seed: int, epoch: int) -> list[int]:
    """The molecules' order in ``epoch`` (0-based), the same on every resume."""
    generator = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    return torch.randperm(n, generator=generator, device="cpu").tolist()


def _held_out_loss(network: MoleculeNetwork, held: Sequence[Data], targets: Targets,
                   device: torch.device, batch_size: int) -> float:
    network.eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for batch in batches(held, batch_size):
            batch = batch.to(device)
            z, bits = pretrain_targets(batch, targets)
            loss = pretrain_loss(network(batch), z, bits, targets.keep)
            total += float(loss) * batch.num_graphs
            count += batch.num_graphs
    return total / max(count, 1)


def command_line(config: PretrainConfig, out: str | Path) -> str:
    """The ``setattn pretrain`` command that runs ``config`` into ``out``: every setting
    spelled out, so that it reproduces the run whatever the defaults become."""
    flags = [f"--output-dir {out}"]
    for name, value in asdict(config).items():
        flags.append(f"--{name.replace('_', '-')} {value}")
    return "setattn pretrain " + " ".join(flags)


def _record(out: Path, config: PretrainConfig, provenance: dict, rows: list[dict],
            best_epoch: int, molecules: dict, seconds: dict, finished: bool) -> None:
    record = {"command": command_line(config, out), "config": asdict(config),
              "corpus": provenance, "molecules": molecules,
              "best_epoch": best_epoch, "epochs": rows, "seconds": seconds,
              "finished": finished}
    encoder = out / ENCODER_FILE
    if encoder.is_file():
        record["encoder_sha256"] = file_sha256(encoder)
    with atomic_open(out / RECORD_FILE, "w") as handle:
        json.dump(json_safe(record), handle, indent=1)


def read_config(out: str | Path) -> PretrainConfig:
    """The settings of the pretraining in ``out`` (its ``pretrain.json``)."""
    file = Path(out) / RECORD_FILE
    if not file.is_file():
        raise FileNotFoundError(f"{file}: no pretraining to resume in {out}")
    saved = json.loads(file.read_text())["config"]
    return PretrainConfig(**saved)


def pretrain(config: PretrainConfig | None, out_dir: str | Path, *, resume: bool = False,
             checkpoint_seconds: float = 60.0, log: Log = print, progress: bool = True
             ) -> PretrainResult:
    """Pretrain an encoder on ``config.corpus`` into ``out_dir`` (see the module docstring).

    Args:
        config: the settings (None with ``resume``: those of the run in ``out_dir``).
        out_dir: the folder written: ``corpus.csv``, ``shards/``, ``last.pt``,
            ``encoder.pt`` and ``pretrain.json``.
        resume: continue the run in ``out_dir`` with its own settings.
        checkpoint_seconds: least training time between two writes of ``last.pt``.

    Raises:
        SettingError: a setting out of range; FileNotFoundError / ValueError: the corpus
        or its column is missing, or it holds too few valid molecules.
    """
    out = Path(out_dir)
    if resume:
        saved = read_config(out)
        if config is not None and asdict(config) != asdict(saved):
            differ = [k for k, v in asdict(config).items() if asdict(saved)[k] != v]
            raise SettingError(differ[0], f"--resume continues the run with its own "
                               f"settings ({RECORD_FILE}); it has {getattr(saved, differ[0])!r}")
        config = saved
    assert config is not None
    config.validate()
    corpus_file = existing_file(config.corpus, "--corpus")
    provenance = {"file": corpus_file.name, "sha256": file_sha256(corpus_file),
                  "smiles_column": config.smiles_column}
    if not resume:
        check_output_dir(out, "--output-dir")
        if (out / RECORD_FILE).is_file():
            raise ValueError(f"argument --output-dir: {out} holds a pretraining run "
                             f"({RECORD_FILE}); continue it with --resume or choose "
                             f"another folder")
        out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    corpus = out / CORPUS_FILE
    if not (resume and corpus.is_file()):
        corpus = write_corpus(config, out, log)  # an empty corpus stops here, no record
    if not resume:
        _record(out, config, provenance, [], 0, {}, {}, False)  # the settings, for --resume
    data, skipped = featurize_corpus(corpus, out, config.descriptors, progress=progress)
    n_held = max(1, round(config.holdout * len(data)))
    if len(data) - n_held < config.batch_size:
        raise ValueError(f"{config.corpus}: {counted(len(data), 'valid molecule')} "
                         f"({counted(skipped, 'row')} skipped: invalid or too large), too "
                         f"few to pretrain with batches of {config.batch_size} and a "
                         f"held-out part of {config.holdout:g}")
    train, held = data[:-n_held], data[-n_held:]
    featurised = time.perf_counter() - started
    molecules = {"train": len(train), "held_out": len(held), "skipped": skipped}
    log(f"pretraining on {len(train):,} molecules, {len(held):,} held out "
        f"({counted(skipped, 'row')} skipped: invalid or too large)")
    targets = Targets.fit(torch.cat([d.descriptors for d in train]))
    device = resolve_device(config.device)
    targets = Targets(**{k: v.to(device) for k, v in targets.to_dict().items()})
    width = train[0].descriptors.shape[1]
    torch.manual_seed(config.seed)
    network = MoleculeNetwork(config.network(width + BITS)).to(device)
    optimizer = torch.optim.AdamW(network.parameters(), lr=config.lr,
                                  weight_decay=config.weight_decay)
    steps = math.ceil(len(train) / config.batch_size)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=config.lr,
                                                    total_steps=config.epochs * steps)
    state = {"epoch": 0, "step": 0, "rows": [], "best_epoch": 0, "best_loss": None,
             "seconds": 0.0, "loss_sum": 0.0, "count": 0}
    last = out / LAST_FILE
    if resume and last.is_file():
        saved_state = load_checkpoint(last, "pretraining", map_location=device)
        network.load_state_dict(saved_state["state_dict"])
        optimizer.load_state_dict(saved_state["optimizer"])
        scheduler.load_state_dict(saved_state["scheduler"])
        state = dict(saved_state["progress"])
        log(f"resuming at epoch {state['epoch'] + 1}, batch {state['step']} of {steps}")
    packed = PackedMolecules(train)
    architecture = {k: network.config.to_dict()[k] for k in ARCHITECTURE}

    def save_last() -> None:
        save_checkpoint({"kind": "pretraining", "config": network.config.to_dict(),
                         "state_dict": network.state_dict(),
                         "optimizer": optimizer.state_dict(),
                         "scheduler": scheduler.state_dict(), "progress": dict(state)}, last)

    def save_encoder() -> None:
        save_checkpoint({"kind": "pretrained", "config": architecture,
                         "state_dict": snapshot(network.encoder_state()),
                         "meta": json_safe({"corpus": provenance, "molecules": molecules,
                                            "settings": asdict(config),
                                            "epoch": state["epoch"],
                                            "held_out_loss": state["best_loss"]})},
                        out / ENCODER_FILE)

    clock = time.perf_counter()
    written = clock
    try:
        while state["epoch"] < config.epochs:
            network.train()
            order = _epoch_order(len(train), config.seed, state["epoch"])
            first = state["step"]
            bar = tqdm(total=steps, initial=first, desc=f"epoch {state['epoch'] + 1}",
                       unit="batch", disable=not progress, leave=False)
            for step in range(first, steps):
                batch = packed.batch(order[step * config.batch_size:
                                           (step + 1) * config.batch_size]).to(device)
                z, bits = pretrain_targets(batch, targets)
                loss = pretrain_loss(network(batch), z, bits, targets.keep)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                scheduler.step()
                state["loss_sum"] += float(loss.detach()) * batch.num_graphs
                state["count"] += batch.num_graphs
                state["step"] = step + 1
                bar.update(1)
                now = time.perf_counter()
                if now - written >= checkpoint_seconds:
                    state["seconds"] += now - clock
                    clock = written = now
                    save_last()
            bar.close()
            held_loss = _held_out_loss(network, held, targets, device, 256)
            now = time.perf_counter()
            state["seconds"] += now - clock
            clock = now
            state["epoch"] += 1
            row = {"epoch": state["epoch"], "train_loss": state["loss_sum"] / state["count"],
                   "held_out_loss": held_loss, "seconds": state["seconds"]}
            state["rows"] = [*state["rows"], row]
            state.update(step=0, loss_sum=0.0, count=0)
            if state["best_loss"] is None or held_loss < state["best_loss"]:
                state["best_loss"], state["best_epoch"] = held_loss, state["epoch"]
                save_encoder()
            save_last()
            written = time.perf_counter()
            log(f"epoch {row['epoch']}: training loss {row['train_loss']:.4f}, held-out "
                f"{held_loss:.4f}{' (best)' if state['best_epoch'] == state['epoch'] else ''}")
            _record(out, config, provenance, state["rows"], state["best_epoch"], molecules,
                    {"featurise": featurised, "train": state["seconds"]}, False)
    except KeyboardInterrupt:
        state["seconds"] += time.perf_counter() - clock
        save_last()
        raise
    seconds = {"featurise": featurised, "train": state["seconds"]}
    _record(out, config, provenance, state["rows"], state["best_epoch"], molecules, seconds,
            True)
    return PretrainResult(out / ENCODER_FILE, state["best_epoch"], state["rows"], molecules,
                          seconds)
