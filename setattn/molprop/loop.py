"""Training one molecule model: epochs, early stopping, checkpoints, resume.

    fit(model, train, val, config, out_dir)  ->  FitResult (best model loaded)
    fit_members(models, train, val, config, out_dirs)  ->  [FitResult] (K side by side)

Each epoch: optimiser steps over shuffled batches (``PackedMolecules``), one pass over
the validation set, then the bookkeeping of ``Progress`` (best epoch, patience) and of
the two checkpoints: ``best.pt`` (kept in memory when the validation metric improves)
and ``last.pt``, both written when ``_LastCheckpoint`` decides. Under ``torchrun``
every rank runs ``fit`` on its share of each batch (``setattn.molprop.distributed``);
only rank 0 writes files and prints.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import BatchSampler, RandomSampler
from torch_geometric.data import Batch, Data
from tqdm import tqdm

from setattn.files import json_safe
from setattn.molprop import distributed
from setattn.molprop.batching import (
    MoleculeBatch,
    PackedMolecules,
    batches,
    collate_molecules,
    stacked_targets,
)
from setattn.molprop.checkpoint import (
    CheckpointError,
    build_network,
    load_checkpoint,
    load_network,
    save_checkpoint,
    snapshot,
)
from setattn.molprop.config import (
    NetworkConfig,
    SettingError,
    TrainConfig,
    legacy_batch_size,
    resolve_device,
    together_clash,
)
from setattn.molprop.distributed import autocast, model_device, to_device
from setattn.molprop.ensemble import forward_batches
from setattn.molprop.members import MemberGroup
from setattn.molprop.metrics import (
    evaluate,
    improved,
    masked_loss,
    member_losses,
    monitor_metric,
    shard_loss,
)
from setattn.molprop.network import MoleculeNetwork

__all__ = ["CHECKPOINT_SECONDS", "DivergedError", "FitResult", "Progress", "fit", "fit_members"]

Log = Callable[[str], None]

CHECKPOINT_SECONDS = 10.0
"""Least training time between two writes of ``last.pt`` (besides the final one and the
one on an error or Ctrl-C). A process killed outright (SIGKILL, power loss) loses at
most this much training, which ``--resume`` redoes with the same numbers."""


class DivergedError(ValueError):
    """Training never reached a finite validation metric: the settings (most often a
    too high ``--lr``) make it diverge. A ``ValueError``: bad input, not a bug."""


@dataclass
class FitResult:
    """What ``fit`` returns.

    Attributes:
        model: the model with its best-validation weights loaded, in eval mode.
        best_epoch: the epoch (1-based) of those weights.
        best_value: the monitored validation value there.
        monitor: "rmse", "roc_auc" or "loss".
        rows: one log row per finished epoch.
        seconds: wall time of ``fit`` (set-up, epochs, checkpoints, loading the best
            weights), including the time before a resume up to its checkpoint.
    """

    model: MoleculeNetwork
    best_epoch: int
    best_value: float
    monitor: str
    rows: list[dict]
    seconds: float = 0.0


@dataclass
class Progress:
    """Where training stands after a finished epoch (saved in ``last.pt``).

    Attributes:
        monitor: the validation metric early stopping watches.
        epoch: epochs finished.
        best_epoch: the epoch of the best validation value so far (0: none yet).
        best_value: that value (None: none finite yet).
        bad_epochs: epochs since it last improved.
        finished: training is over (last epoch, or out of patience).
        rows: one log row per finished epoch.
        seconds: training time up to now, resumed runs included.
    """

    monitor: str
    epoch: int = 0
    best_epoch: int = 0
    best_value: float | None = None
    bad_epochs: int = 0
    finished: bool = False
    rows: list[dict] = field(default_factory=list)
    seconds: float = 0.0

    def to_dict(self) -> dict:
        """The fields as a dict, ``rows`` shared rather than copied: an epoch replaces the
        list, never changes it (``dataclasses.asdict`` copied every row every epoch)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


class EpochBatches:
    """An epoch's shuffled training batches each time it is iterated, cut out of a
    ``PackedMolecules`` (``training_batch``).

    The batches and their order are those of ``DataLoader(range(M), batch_sampler=
    sampler, generator=generator)``: like it, each pass draws one number of the
    generator before the sampler's shuffle, so a seed gives the same batches either way;
    the loader's per-batch machinery (fetching M indices one by one, its profiling
    hooks) is left out. ``len`` is the number of batches per epoch.

    Args:
        packed: the training molecules.
        sampler: the batches of indices (this rank's shares).
        generator: the generator the sampler shuffles with.
    """

    def __init__(self, packed: PackedMolecules, sampler: distributed.ShardBatchSampler,
                 generator: torch.Generator) -> None:
        self.packed, self.sampler, self.generator = packed, sampler, generator

    def __len__(self) -> int:
        return len(self.sampler)

    def __iter__(self) -> Iterator[MoleculeBatch]:
        # DataLoader's draw (the generator is a CPU one)
        torch.empty((), dtype=torch.int64, device="cpu").random_(generator=self.generator)
        for indices in self.sampler:
            yield self.packed.training_batch(indices)


@dataclass
class _Training:
    """The moving parts of one model's training, built once by ``_set_up``."""

    model: MoleculeNetwork
    net: torch.nn.Module  # the model, or its DDP wrapper
    loader: EpochBatches
    sampler: distributed.ShardBatchSampler
    generator: torch.Generator
    optimizer: torch.optim.Optimizer
    scheduler: Any
    train_y: Tensor  # (M, T)
    val_y: Tensor  # (M_val, T)
    device: torch.device
    precision: str

    def _rng(self) -> dict:
        """The random states training draws from (the GPU's too on CUDA)."""
        rng = {"torch": torch.get_rng_state(), "loader": self.generator.get_state()}
        if self.device.type == "cuda":
            rng["cuda"] = torch.cuda.get_rng_state(self.device)
        return rng

    def state(self, progress: Progress, copy: bool) -> dict:
        """The ``last.pt`` payload; ``copy`` keeps this moment's state while training
        goes on."""
        state = {"kind": "training", "config": self.model.config.to_dict(),
                 "state_dict": self.model.state_dict(),
                 "optimizer": self.optimizer.state_dict(),
                 "scheduler": self.scheduler.state_dict(),
                 "rng": self._rng(),
                 "progress": progress.to_dict()}
        return snapshot(state) if copy else state

    def restore(self, state: dict) -> dict:
        """Load a ``last.pt`` payload; returns its progress (``Progress.to_dict``, or
        ``_Members.to_dict`` for members trained together)."""
        self.model.load_state_dict(state["state_dict"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.generator.set_state(state["rng"]["loader"])
        torch.set_rng_state(state["rng"]["torch"])
        if self.device.type == "cuda" and "cuda" in state["rng"]:
            torch.cuda.set_rng_state(state["rng"]["cuda"].cpu(), self.device)
        return state["progress"]


class _BestCheckpoint:
    """``best.pt``: the weights of the best epoch so far, kept in memory when they
    improve (a copy costs a fraction of a write) and written by ``_LastCheckpoint``
    just before each ``last.pt``, so that a resumed run finds the best weights of the
    progress it resumes. Rank 0 only."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.pending: dict | None = None  # the best epoch's payload, not yet written

    def improved(self, model: MoleculeNetwork, meta: dict, epoch: int,
                 val_metrics: dict) -> None:
        """Keep the weights of the epoch just finished and its validation metrics."""
        self.pending = snapshot(
            {"kind": "model", "config": model.config.to_dict(),
             "state_dict": model.state_dict(),
             "meta": {**meta, "epoch": epoch, "val": json_safe(val_metrics)}})

    def write(self) -> None:
        if self.pending is not None:
            save_checkpoint(self.pending, self.path)
            self.pending = None


class _LastCheckpoint:
    """When ``last.pt`` is written: once ``seconds`` of training have passed since the
    last write (0: every epoch), after the final epoch, and, through ``rescue``, for the
    last finished epoch when training stops on an exception. ``best`` is written first
    each time. Rank 0 only."""

    def __init__(self, path: Path, seconds: float, enabled: bool,
                 best: _BestCheckpoint) -> None:
        self.path, self.seconds, self.enabled, self.best = path, seconds, enabled, best
        self.written = time.perf_counter()  # the last write (or the start)
        self.pending: dict | None = None  # the last finished epoch's state, not yet written

    def epoch_done(self, training: _Training, progress: Progress) -> None:
        if not self.enabled:
            return
        due = (progress.finished or self.seconds <= 0
               or time.perf_counter() - self.written >= self.seconds)
        self.pending = training.state(progress, copy=not due)
        if due:
            self.best.write()
            save_checkpoint(self.pending, self.path)
            self.pending, self.written = None, time.perf_counter()

    def rescue(self) -> None:
        self.best.write()
        if self.pending is not None:
            save_checkpoint(self.pending, self.path)


def _parameter_groups(model: MoleculeNetwork, config: TrainConfig
                      ) -> tuple[list[dict], list[float]]:
    """The optimiser's parameter groups and their peak learning rates: one group at
    ``config.lr``, or, with ``encoder_lr`` other than 1, the head at ``lr`` and the
    encoder at ``lr * encoder_lr`` (the head first: its rate is the one logged)."""
    if config.encoder_lr == 1.0:
        return [{"params": list(model.parameters())}], [config.lr]
    encoder = model.encoder_parameters()
    held = {id(p) for p in encoder}
    head = [p for p in model.parameters() if id(p) not in held]
    return [{"params": head}, {"params": encoder}], [config.lr, config.lr * config.encoder_lr]


def _set_up(model: MoleculeNetwork, train_data: Sequence[Data], val_data: Sequence[Data],
            config: TrainConfig) -> _Training:
    """Batches, target and descriptor scaling, optimiser and schedule of a fresh model,
    moved to ``config.device``."""
    w = distributed.world()
    if config.freeze_epochs and w.size > 1:  # DDP expects a gradient of every parameter
        raise SettingError("freeze_epochs", "trains in one process only, not under torchrun",
                           colon=True)
    device = resolve_device(config.device)
    batch_size = config.batch_size or legacy_batch_size(len(train_data))
    generator = torch.Generator().manual_seed(config.seed)
    train_list = list(train_data)
    # the batches of DataLoader(shuffle=True, generator=generator); rank r gets its share
    sampler = distributed.ShardBatchSampler(
        BatchSampler(RandomSampler(train_list, generator=generator), batch_size, False),
        w.rank, w.size)
    # batches cut out of the training set concatenated once (faster than PyG's collate)
    loader = EpochBatches(PackedMolecules(train_list), sampler, generator)
    train_y = stacked_targets(train_data)  # (M, T)
    descriptors = (torch.cat([d.descriptors for d in train_data])
                   if model.config.descriptor_dim else None)  # (M, F_desc)
    model.fit_scaling(train_y, descriptors)
    model.to(device)
    groups, peaks = _parameter_groups(model, config)
    # fused: one kernel for all parameters instead of a loop of small ones per parameter
    optimizer = torch.optim.AdamW(groups, lr=config.lr, weight_decay=config.weight_decay,
                                  fused=True)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(
        optimizer, max_lr=peaks, total_steps=config.epochs * len(loader))
    return _Training(model, model, loader, sampler, generator, optimizer, scheduler,
                     train_y, stacked_targets(val_data), device, config.precision)


def _start(training: _Training, config: TrainConfig, last_path: Path, resume: bool,
           log: Log, member: int) -> Progress:
    """The progress to start from: ``last.pt``'s when resuming from one, else a new one
    (seeding what training draws). Wraps the model in DDP under torchrun, and in
    ``torch.compile`` with ``config.compile``."""
    w = distributed.world()
    state = None
    if resume:  # rank 0 reads the checkpoint; every rank gets it
        state = distributed.broadcast(
            load_checkpoint(last_path, "training") if w.is_main and last_path.is_file() else None)
    if state is not None:
        _check_architecture(state["config"], training.model, last_path)
        progress = Progress(**training.restore(state))
        if progress.epoch:
            log(f"model {member}: resuming after epoch {progress.epoch} from {last_path}")
    else:
        torch.manual_seed(config.seed)  # dropout and anything else drawn during training
        progress = Progress(monitor_metric(training.model.config.task, training.val_y))
    # DDP averages gradients over the ranks (and starts every rank from rank 0's weights)
    training.net = DistributedDataParallel(training.model) if w.size > 1 else training.model
    if config.compile:  # one compiled graph serves every batch size and molecule count
        training.net = torch.compile(training.net, dynamic=True)
    return progress


def _check_architecture(saved: Any, model: MoleculeNetwork, path: Path) -> None:
    """Refuse to resume from ``path`` when the model it holds differs from the one the
    run's settings build (``config.json`` edited since), naming the first field that
    differs.

    Raises:
        CheckpointError: naming ``path``, the field and both values.
    """
    if not isinstance(saved, dict):
        raise CheckpointError(f"{path}: its 'config' is not a dict of model settings")
    now = model.config.to_dict()
    saved = NetworkConfig.from_dict(saved, str(path), "config.").to_dict()
    for key in now:
        if saved[key] != now[key]:
            raise CheckpointError(
                f"{path}: the model was trained with model.{key} {saved[key]!r}, but the "
                f"run's settings (config.json) now give {now[key]!r}; --resume continues a "
                f"run with the settings it started with: restore config.json or start a "
                f"new run")


def _train_epoch(training: _Training, batches: Iterable[MoleculeBatch]
                 ) -> tuple[float, float]:
    """One pass of optimiser steps over ``batches``; returns the mean training loss per
    molecule over all ranks, and the learning rate of the epoch's last step (the
    schedule's ``get_last_lr`` after it is the next step's). The sampler says which
    molecules each batch holds."""
    w = distributed.world()
    model, sampler = training.model, training.sampler
    task = model.config.task
    model.train()
    total, count = 0.0, 0
    lr = training.optimizer.param_groups[0]["lr"]
    for batch in batches:
        batch = to_device(batch, training.device)  # targets included
        with autocast(training.device, training.precision):
            out = training.net(batch).float()  # (G_r, T)
        y = model.scale_targets(batch.y)  # (G_r, T)
        if w.size == 1:
            loss = masked_loss(out, y, task)
        else:
            labelled = int((~torch.isnan(training.train_y[sampler.current])).sum())
            loss = shard_loss(out, y, task, labelled, w.size, sampler.padding)
        training.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        lr = training.optimizer.param_groups[0]["lr"]  # this step's
        training.optimizer.step()
        training.scheduler.step()
        total += loss.item() / w.size * len(sampler.current)
        count += len(sampler.current)
    return distributed.all_reduce_sum(total) / max(count, 1), lr


def _validate(training: _Training, val_data: Sequence[Data], cached: list[Batch],
              names: Sequence[str]) -> tuple[float, dict]:
    """Validation loss and metrics; one pass shared out over the ranks. ``cached`` holds
    this rank's validation batches (built on the first call, the same every epoch)."""
    model = training.model

    def rank_outputs(part: Sequence[Data]) -> Tensor:
        if not cached:
            cached.extend(batches(part))
        model.eval()
        with torch.no_grad():  # no graph kept for a backward that never comes
            return forward_batches(model, cached, model_device(model), model.config.num_tasks)

    val_out = distributed.gather_predictions(rank_outputs, val_data)  # (M_val, T)
    task = model.config.task
    val_loss = masked_loss(val_out, model.scale_targets(training.val_y), task).item()
    return val_loss, evaluate(training.val_y, model.to_units(val_out), task, names,
                              "validation part")


def _run_epoch(training: _Training, progress: Progress, val_data: Sequence[Data],
               cached: list[Batch], config: TrainConfig, names: Sequence[str],
               member: int) -> tuple[bool, dict]:
    """One epoch: optimiser steps, validation, and ``progress`` brought up to date (its
    new log row last). Returns whether the validation value improved, and the
    validation metrics."""
    w = distributed.world()
    epoch = progress.epoch + 1
    start = time.perf_counter()
    if config.freeze_epochs:  # a pretrained encoder frozen at first: only the head trains
        for p in training.model.encoder_parameters():
            p.requires_grad_(epoch > config.freeze_epochs)
    bar = tqdm(training.loader, desc=f"model {member} epoch {epoch}/{config.epochs}",
               leave=False, disable=None if w.is_main else True, unit="batch")
    train_loss, lr = _train_epoch(training, bar)
    val_loss, val_metrics = _validate(training, val_data, cached, names)
    value = val_loss if progress.monitor == "loss" else val_metrics[progress.monitor]
    better = improved(value, progress.best_value, progress.monitor)
    if better:
        progress.best_epoch, progress.best_value, progress.bad_epochs = epoch, value, 0
    else:
        progress.bad_epochs += 1
    row = {"model": member, "epoch": epoch, "train_loss": train_loss, "val_loss": val_loss,
           f"val_{progress.monitor}": value, "lr": lr,
           "seconds": time.perf_counter() - start}
    progress.rows = [*progress.rows, row]
    progress.epoch = epoch
    progress.finished = distributed.broadcast(  # every rank stops with rank 0
        epoch >= config.epochs or progress.bad_epochs >= config.patience)
    return better, val_metrics


def _fmt(value: float) -> str:
    return f"{value:.4f}" if abs(value) >= 1e-3 or value == 0 else f"{value:.2e}"


def _epoch_line(member: int, epochs: int, progress: Progress, better: bool) -> str:
    row, key = progress.rows[-1], f"val_{progress.monitor}"
    return (f"model {member} epoch {row['epoch']:3d}/{epochs}  "
            f"train_loss {_fmt(row['train_loss'])}  val_loss {_fmt(row['val_loss'])}  "
            f"{key} {_fmt(row[key])}  lr {row['lr']:.2e}"
            f"  {row['seconds']:.1f}s{'  *' if better else ''}")


def load_kernels(config: NetworkConfig, molecules: Sequence[Data], device: str = "auto"
                 ) -> float:
    """Load the engine's compiled CPU kernels that a network of ``config`` calls, before
    any model trains: a throwaway network passes the first two of ``molecules`` forward
    and backward. Numba loads a kernel on its first call (from its cache, or compiling
    it once per machine), so without this the first training epoch would hold that
    start-up. The global random state is left as it was; nothing is trained or kept.

    Args:
        config: the networks' architecture.
        molecules: training molecules (the first two are used).
        device: the training device spec; off the CPU nothing is loaded.

    Returns:
        The seconds it took (0.0 when nothing was loaded).
    """
    if resolve_device(device).type != "cpu" or not molecules:
        return 0.0
    clock = time.perf_counter()
    with torch.random.fork_rng(devices=[]):
        network = MoleculeNetwork(config)
        network(collate_molecules(list(molecules[:2]))).sum().backward()
    return time.perf_counter() - clock


def fit(
    model: MoleculeNetwork,
    train_data: Sequence[Data],
    val_data: Sequence[Data],
    config: TrainConfig,
    out_dir: str | Path,
    *,
    names: Sequence[str],
    meta: dict | None = None,
    resume: bool = False,
    member: int = 0,
    callback: Callable[[list[dict]], None] | None = None,
    log: Log = print,
    checkpoint_seconds: float = CHECKPOINT_SECONDS,
) -> FitResult:
    """Train one model with early stopping, checkpointing as it goes.

    ``out_dir/best.pt`` holds the best validation weights: kept in memory when they
    improve, written before every write of ``last.pt``.
    ``out_dir/last.pt`` holds the full state after a finished epoch (model, optimiser,
    schedule, RNG states, progress): written once ``checkpoint_seconds`` of training
    have passed since the last write, after the final epoch, and, when training stops
    on an exception (Ctrl-C included), for the last finished epoch. With ``resume``
    and an existing ``last.pt`` training goes on from there and ends at the same
    epoch, with the same numbers, as a run that was never interrupted.

    Args:
        model: a freshly built model (its ``fit_scaling`` is called here).
        train_data: training molecules, each with ``y`` (1, T).
        val_data: validation molecules.
        config: training settings.
        out_dir: this model's checkpoint folder.
        names: the T target names (for metrics).
        meta: extra JSON-like metadata stored in ``best.pt`` (e.g. column names).
        resume: continue from ``out_dir/last.pt`` if it exists.
        member: ensemble index, shown in progress lines and logged.
        callback: called after each epoch (once its ``last.pt`` is written or kept for
            writing), with this model's log rows so far (the last one is the new
            epoch's); an exception it raises still gets that epoch saved.
        log: where epoch lines go.
        checkpoint_seconds: least training time between writes of ``last.pt``;
            0 writes it after every epoch.

    Returns:
        A ``FitResult`` with the best model loaded; ``DivergedError`` if the validation
        metric was never finite.
    """
    clock, out_dir, w = time.perf_counter(), Path(out_dir), distributed.world()
    log = log if w.is_main else quiet
    training = _set_up(model, train_data, val_data, config)
    best = _BestCheckpoint(out_dir / "best.pt")
    last = _LastCheckpoint(out_dir / "last.pt", checkpoint_seconds, w.is_main, best)
    progress = _start(training, config, last.path, resume, log, member)
    clock -= progress.seconds  # the time spent before a resumed checkpoint
    meta = {"task": model.config.task, "target_columns": list(names), **(meta or {})}
    cached: list[Batch] = []  # this rank's validation batches
    try:
        while not progress.finished:
            better, val_metrics = _run_epoch(training, progress, val_data, cached, config,
                                             names, member)
            if better and w.is_main:
                best.improved(model, meta, progress.epoch, val_metrics)
            progress.seconds = time.perf_counter() - clock
            last.epoch_done(training, progress)
            log(_epoch_line(member, config.epochs, progress, better))
            if callback is not None:
                callback(progress.rows)
            if progress.finished and progress.epoch < config.epochs:
                log(f"model {member}: early stop after epoch {progress.epoch} "
                    f"({config.patience} epochs without a better val_{progress.monitor})")
    except BaseException:  # Ctrl-C, a failing callback: keep the last finished epoch
        last.rescue()
        raise
    best_model = _load_best(best.path, training.device)
    if best_model is None:
        raise DivergedError(f"model {member}: the validation {progress.monitor} was never "
                            f"finite (did training diverge? try a lower --lr)")
    return FitResult(best_model, int(progress.best_epoch), float(progress.best_value),
                     progress.monitor, list(progress.rows), time.perf_counter() - clock)


def quiet(line: str) -> None:
    """A log that prints nothing: ranks other than 0 train in silence, and the API
    with ``verbose=False``."""


def _load_best(path: Path, device: torch.device) -> MoleculeNetwork | None:
    """The best model of ``fit`` on ``device`` (None if none was saved), read by rank 0
    and broadcast."""
    w = distributed.world()
    if w.size == 1:
        return load_network(path, device)[0] if path.is_file() else None
    ckpt = distributed.broadcast(
        load_checkpoint(path, "model") if w.is_main and path.is_file() else None)
    return None if ckpt is None else build_network(ckpt, path, device)


@dataclass
class _Members:
    """Where K members trained together stand (saved in their ``last.pt``).

    Attributes:
        members: each member's ``Progress``; a member out of patience stays finished
            while the others train on (its best weights are kept, later ones ignored).
        epoch: epochs the group has run.
        seconds: training time up to now, resumed runs included.
    """

    members: list[Progress]
    epoch: int = 0
    seconds: float = 0.0

    @property
    def finished(self) -> bool:
        return all(p.finished for p in self.members)

    def to_dict(self) -> dict:
        return {"members": [p.to_dict() for p in self.members], "epoch": self.epoch,
                "seconds": self.seconds}


class _Bests:
    """The members' ``best.pt``, written together before their shared ``last.pt``."""

    def __init__(self, bests: Sequence[_BestCheckpoint]) -> None:
        self.bests = list(bests)

    def write(self) -> None:
        for best in self.bests:
            best.write()


def _start_members(training: _Training, config: TrainConfig, last_path: Path, resume: bool,
                   log: Log, k: int) -> _Members:
    """``_start`` for K members trained together: the progress of ``last.pt`` when
    resuming from one, else a new one (seeding what training draws)."""
    state = load_checkpoint(last_path, "training") if resume and last_path.is_file() else None
    if state is None:
        torch.manual_seed(config.seed)  # dropout and anything else drawn during training
        monitor = monitor_metric(training.model.config.task, training.val_y)
        return _Members([Progress(monitor) for _ in range(k)])
    _check_architecture(state["config"], training.model, last_path)
    saved = training.restore(state)
    if not isinstance(saved, dict) or len(saved.get("members", ())) != k:
        raise CheckpointError(f"{last_path}: not the state of {k} networks trained together "
                              f"(--members together); resume with the run's own settings "
                              f"(config.json) or start a new run")
    members = _Members([Progress(**p) for p in saved["members"]], saved["epoch"],
                       saved["seconds"])
    if members.epoch:
        log(f"models 0-{k - 1}: resuming after epoch {members.epoch} from {last_path}")
    return members


def _train_members_epoch(training: _Training, batches: Iterable[MoleculeBatch]
                         ) -> tuple[list[float], float]:
    """``_train_epoch`` for a ``MemberGroup``: one optimiser step per batch on the sum of
    the members' losses (each member's gradient is its own loss's). Returns each
    member's mean training loss per molecule and the last step's learning rate."""
    group, sampler = training.model, training.sampler
    group.train()
    total, count = None, 0
    lr = training.optimizer.param_groups[0]["lr"]
    for batch in batches:
        batch = to_device(batch, training.device)  # targets included
        out = group(batch)  # (G, K, T)
        losses = member_losses(out, group.scale_targets(batch.y), group.config.task)  # (K,)
        training.optimizer.zero_grad(set_to_none=True)
        losses.sum().backward()
        lr = training.optimizer.param_groups[0]["lr"]  # this step's
        training.optimizer.step()
        training.scheduler.step()
        seen = losses.detach() * len(sampler.current)  # (K,)
        total = seen if total is None else total + seen
        count += len(sampler.current)
    return (total.cpu() / max(count, 1)).tolist(), lr


def _validate_members(training: _Training, val_data: Sequence[Data], cached: list[Batch],
                      names: Sequence[str]) -> list[tuple[float, dict]]:
    """``_validate`` for each member of a ``MemberGroup``: (loss, metrics) per member."""
    group = training.model
    if not cached:
        cached.extend(batches(val_data))
    group.eval()
    with torch.no_grad():
        out = torch.cat([group(to_device(b, training.device)) for b in cached]).cpu()  # (M, K, T)
    task, y = group.config.task, training.val_y
    scaled = group.scale_targets(y)  # (M, T)
    return [(masked_loss(out[:, m], scaled, task).item(),
             evaluate(y, group.to_units(out[:, m]), task, names, "validation part"))
            for m in range(group.members)]


def _run_members_epoch(training: _Training, members: _Members, val_data: Sequence[Data],
                       cached: list[Batch], config: TrainConfig, names: Sequence[str]
                       ) -> dict[int, tuple[bool, dict]]:
    """``_run_epoch`` for members trained together: one pass of optimiser steps for all,
    validation, and each member's progress that is not finished brought up to date.
    Returns, for those members, whether their validation value improved and their
    validation metrics."""
    k = len(members.members)
    members.epoch += 1
    start = time.perf_counter()
    bar = tqdm(training.loader, desc=f"models 0-{k - 1} epoch {members.epoch}/{config.epochs}",
               leave=False, disable=None, unit="batch")
    train_losses, lr = _train_members_epoch(training, bar)
    validated = _validate_members(training, val_data, cached, names)
    seconds = (time.perf_counter() - start) / k  # each member's share of the pass
    outcome = {}
    for m, progress in enumerate(members.members):
        if progress.finished:
            continue
        val_loss, val_metrics = validated[m]
        value = val_loss if progress.monitor == "loss" else val_metrics[progress.monitor]
        better = improved(value, progress.best_value, progress.monitor)
        if better:
            progress.best_epoch, progress.best_value, progress.bad_epochs = \
                members.epoch, value, 0
        else:
            progress.bad_epochs += 1
        progress.rows = [*progress.rows, {
            "model": m, "epoch": members.epoch, "train_loss": train_losses[m],
            "val_loss": val_loss, f"val_{progress.monitor}": value, "lr": lr,
            "seconds": seconds}]
        progress.epoch = members.epoch
        progress.finished = (members.epoch >= config.epochs
                             or progress.bad_epochs >= config.patience)
        outcome[m] = better, val_metrics
    return outcome


def fit_members(
    models: Sequence[MoleculeNetwork],
    train_data: Sequence[Data],
    val_data: Sequence[Data],
    config: TrainConfig,
    out_dirs: Sequence[str | Path],
    *,
    names: Sequence[str],
    metas: Sequence[dict],
    resume: bool = False,
    callback: Callable[[list[dict]], None] | None = None,
    log: Log = print,
    checkpoint_seconds: float = CHECKPOINT_SECONDS,
) -> list[FitResult]:
    """Train K models side by side (``setattn.molprop.members.MemberGroup``): each step
    runs every member on one shared batch, in one pass. Each member keeps ``fit``'s
    early stopping, its own ``best.pt`` in its folder of ``out_dirs``; one ``last.pt``,
    in the first member's folder, holds the whole group's state, and ``resume``
    continues from it with the same numbers. Training ends when every member is out of
    patience or at the last epoch; a member finished earlier trains on with the others
    but keeps the best weights of its own epochs.

    Member k differs from a ``fit`` of the same initial network only in its batch
    order: every member draws the batches of ``config.seed``.

    Args:
        models: K freshly built models of one configuration (``MemberGroup.supports``);
            their weights start the group and receive each member's best weights.
        train_data, val_data, config, names, resume, log, checkpoint_seconds: as ``fit``.
        out_dirs: each member's checkpoint folder.
        metas: each member's extra metadata for its ``best.pt``.
        callback: called after each epoch with every member's log rows so far.

    Returns:
        One ``FitResult`` per member; its ``seconds`` are the group's divided by K.

    Raises:
        SettingError: under ``torchrun`` or with a setting ``together_clash`` names
            (members train together in one process, in float32, eagerly, all weights
            alike: no frozen encoder, no encoder rate of its own).
    """
    clash = "torchrun" if distributed.world().size > 1 else together_clash(config,
                                                                           models[0].config)
    if clash is not None:
        raise SettingError("members", f"together cannot train with {clash}; use --members "
                           f"apart", colon=True)
    clock, k = time.perf_counter(), len(models)
    group = MemberGroup(models)
    training = _set_up(group, train_data, val_data, config)
    out_dirs = [Path(d) for d in out_dirs]
    bests = [_BestCheckpoint(d / "best.pt") for d in out_dirs]
    last = _LastCheckpoint(out_dirs[0] / "last.pt", checkpoint_seconds, True, _Bests(bests))
    members = _start_members(training, config, last.path, resume, log, k)
    clock -= members.seconds  # the time spent before a resumed checkpoint
    metas = [{"task": group.config.task, "target_columns": list(names), **m} for m in metas]
    cached: list[Batch] = []  # the validation batches
    try:
        while not members.finished:
            outcome = _run_members_epoch(training, members, val_data, cached, config, names)
            for m, (better, val_metrics) in outcome.items():
                if better:
                    bests[m].improved(group.write_member(m, models[m]), metas[m],
                                      members.epoch, val_metrics)
            members.seconds = time.perf_counter() - clock
            last.epoch_done(training, members)
            for m, (better, _) in outcome.items():
                progress = members.members[m]
                log(_epoch_line(m, config.epochs, progress, better))
                if progress.finished and progress.epoch < config.epochs:
                    log(f"model {m}: early stop after epoch {progress.epoch} "
                        f"({config.patience} epochs without a better val_{progress.monitor})")
            if callback is not None:
                callback([row for p in members.members for row in p.rows])
    except BaseException:  # Ctrl-C, a failing callback: keep the last finished epoch
        last.rescue()
        raise
    seconds = time.perf_counter() - clock
    results = []
    for m, (best, progress) in enumerate(zip(bests, members.members)):
        best_model = _load_best(best.path, training.device)
        if best_model is None:
            raise DivergedError(f"model {m}: the validation {progress.monitor} was never "
                                f"finite (did training diverge? try a lower --lr)")
        results.append(FitResult(best_model, int(progress.best_epoch),
                                 float(progress.best_value), progress.monitor,
                                 list(progress.rows), seconds / k))
    return results
