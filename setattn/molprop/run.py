"""A whole molecule run: read the CSV, split it, train an ensemble, write the results.

::

    run_training(run, output_dir)        # what ``setattn train`` does
      -> fit(model, train, val, ...)     # one model (``setattn.molprop.loop``)

What a run directory holds::

    .setattn-run       the marker that says "a setattn run": written first; a folder
                       without it is a run's only if it is new or empty
                       (``setattn.molprop.checkpoint.check_run_dir``)
    config.json        the run (data, columns, split, training and model settings)
    split.json         the file rows of the train / val / test parts, and the CSV's
                       fingerprint (``setattn.molprop.checkpoint``) --resume checks
    .setattn.lock      while the run is going (``setattn.molprop.checkpoint.RunLock``)
    model_<k>/best.pt  the best-validation weights of network k (for predict)
    model_<k>/last.pt  its full training state for resume (``setattn.molprop.loop``)
    ensemble.pt        the kernel part and the networks' weight against it
                       (``setattn.molprop.ensemble``): written once the kernel part is
                       fitted, again once the weight is
    log.csv            model, epoch, train_loss, val_loss, val_<metric>, lr, seconds
    curve.png          training loss and validation metric per epoch
    metrics.json       test and validation metrics (undefined ones with their reason),
                       split sizes, skipped rows, notes (salts: the largest fragment kept),
                       times; for regression the calibration of the 90 % prediction
                       intervals and how they did (``setattn.molprop.conformal``)
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch
from torch_geometric.data import Data

from setattn.datasets.files import quotable, read_column
from setattn.datasets.molecules import MoleculeNote
from setattn.domains.molecules import InvalidSmilesError
from setattn.files import atomic_open, write_json
from setattn.molprop import checkpoint, conformal, distributed, splits
from setattn.molprop.batching import stacked_targets
from setattn.molprop.checkpoint import (
    ENSEMBLE_FILE,
    LEGACY_KEYS,
    CheckpointError,
    RunLock,
    check_not_destination,
    load_checkpoint,
    read_ensemble_config,
    save_ensemble,
)
from setattn.molprop.config import (
    KERNEL_MAX_TRAIN,
    NetworkConfig,
    RunConfig,
    SettingError,
    TrainConfig,
    together_clash,
)
from setattn.molprop.distributed import model_device
from setattn.molprop.ensemble import NETWORK_WEIGHT, Ensemble, fit_network_weight
from setattn.molprop.featurize import featurize_csv, report_failures, skipped_rows
from setattn.molprop.kernels import KernelConfig, KernelPart
from setattn.molprop.loop import (
    CHECKPOINT_SECONDS,
    FitResult,
    fit,
    fit_members,
    load_kernels,
    quiet,
)
from setattn.molprop.metrics import one_class_tasks
from setattn.molprop.network import MoleculeNetwork, target_scaling
from setattn.molprop.pretrain import (
    encoder_network,
    load_encoder,
    load_pretrained,
    pretrained_architecture,
)
from setattn.molprop.scoring import ensemble_scores
from setattn.viz import plot_training_curve
from setattn.wording import counted

__all__ = ["TYPICAL_ATOMS", "EpochLog", "MemoryEstimate", "available_memory", "check_memory",
           "kernel_memory", "kernel_size", "parameter_count", "run_training",
           "trains_together", "training_memory"]

Log = Callable[[str], None]


TYPICAL_ATOMS = 30
"""Heavy atoms per molecule the memory estimate assumes before the data is read."""


_ACTIVATIONS_PER_LAYER = 18  # (N, D) floats one attention layer keeps for backward


_ACTIVATIONS_OTHER = 6  # embedding, pooling, head


def parameter_count(hidden: int, layers: int, *, num_tasks: int = 1,
                    descriptor_dim: int = 0, atom_dim: int = 59, bond_dim: int = 14,
                    layer_norm: bool = False, global_layers: int = 0,
                    heads: int = 4, max_hops: int = 8) -> int:
    """Parameters and buffers of a ``MoleculeNetwork`` (GATv2 layers; GAT has fewer),
    counted with Python integers, so absurd sizes give a number rather than an error."""
    d = hidden
    # two LayerNorms, four attention projections, a 2 D feed-forward, the distance biases
    block = 4 * d + 4 * (d * d + d) + 4 * d * d + 3 * d + (max_hops + 2) * heads
    conv = 2 * (d * d + d) + d + d + d * (bond_dim + 1) + (2 * d if layer_norm else 0)
    head = d * (2 * d + descriptor_dim) + d + num_tasks * d + num_tasks
    buffers = 2 * num_tasks + 2 * descriptor_dim  # target and descriptor scaling
    return (d * atom_dim + d + layers * conv + global_layers * block + (d + d * d + d) + head
            + buffers)


@dataclass
class MemoryEstimate:
    """Bytes a training run needs, by part."""

    parameters: int
    training: int
    kept_models: int
    activations: int

    @property
    def total(self) -> int:
        return self.training + self.kept_models + self.activations


def training_memory(hidden: int, heads: int, layers: int, batch_size: int,
                    ensemble_size: int, *, atoms_per_batch: int | None = None,
                    **sizes: int) -> MemoryEstimate:
    """Estimate the memory of training ``ensemble_size`` models one after the other.

    The model in training holds 4 float32 copies of its parameters (weights, gradients,
    AdamW's two moments); each finished member's weights stay in memory; a batch keeps
    about ``18 * layers + 6`` (N, D) float32 activations for the backward pass, E
    attention edges per atom (H, for the heads) included; a global attention block keeps
    as many, and H weights per pair of atoms of a molecule.

    Args:
        hidden, heads, layers: the model's D, H and L.
        batch_size: molecules per batch.
        ensemble_size: K.
        atoms_per_batch: N, heavy atoms of the largest batch (default: ``batch_size *
            TYPICAL_ATOMS``).
        sizes: further ``parameter_count`` arguments (num_tasks, descriptor_dim, ...).
    """
    n = atoms_per_batch if atoms_per_batch is not None else batch_size * TYPICAL_ATOMS
    params = parameter_count(hidden, layers, heads=heads, **sizes)
    global_layers = sizes.get("global_layers", 0)
    pairs = -(-n // max(batch_size, 1))  # atoms per molecule, rounded up: pairs per atom
    activations = 4 * n * (hidden * (_ACTIVATIONS_PER_LAYER * (layers + global_layers)
                                     + _ACTIVATIONS_OTHER)
                           + 3 * heads * layers + 4 * heads * pairs * global_layers)
    return MemoryEstimate(params, 4 * 4 * params, 4 * params * ensemble_size, activations)


def available_memory() -> int | None:
    """Bytes of memory available to this process now: MemAvailable of /proc/meminfo
    (else ``os.sysconf``), lowered to a cgroup's limit when one is set; None if unknown."""
    amount = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                amount = int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    if amount is None:
        try:
            amount = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            return None
    return min(amount, _cgroup_room() or amount)


def _cgroup_room() -> int | None:
    """Bytes left under a cgroup v2 memory limit, or None without one."""
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        used = int(Path("/sys/fs/cgroup/memory.current").read_text())
    except (OSError, ValueError):
        return None
    return None if limit == "max" else max(int(limit) - used, 0)


def _gb(n: int) -> str:
    return f"{n / 1e9:,.1f} GB" if n >= 1e8 else f"{n / 1e6:,.1f} MB"


KERNEL_MATRICES = 7
"""(M, M) float64 matrices at the peak of the kernel ridge's fit: distances, one gamma's
kernel and its labelled copy, the eigendecomposition's input, output and workspace, the
squared eigenvectors (measured: 480 MB above the process at M = 3,000, 6.7 of them)."""


def kernel_memory(m: int) -> int:
    """Bytes the kernel ridge's fit on M training molecules needs at its peak."""
    return KERNEL_MATRICES * 8 * m * m


def kernel_memory_obstacle(m: int, available: int | None = None) -> str | None:
    """Why the kernel ridge's fit on M training molecules would not fit in memory, or None.

    Args:
        available: bytes available (default: ``available_memory()``; None: unknown).
    """
    available = available_memory() if available is None else available
    need = kernel_memory(m)
    if available is not None and need > available:
        return (f"its fit on {m:,} training molecules needs about {_gb(need)} of memory "
                f"but {_gb(available)} is available")
    return None


def kernel_size(choice: str, m: int, usable: bool, available: int | None = None
                ) -> tuple[int, str | None]:
    """M of a run's kernel ridge (0: none), and a note where auto skips it.

    Args:
        choice: ``--kernel-ridge``: "auto", "on" or "off".
        m: training molecules.
        usable: whether the run can have one: it has descriptors (the run's config
            refuses "on" without them; the caller has already left out what "auto"
            skips by task, several classification tasks).
        available: bytes available (default: ``available_memory()``; None: unknown).

    Raises:
        ValueError: naming ``--kernel-ridge`` when "on" meets more than
            ``KERNEL_MAX_TRAIN`` training molecules or a fit that would not fit in memory.
    """
    if choice == "off" or not usable:
        return 0, None
    obstacle = (f"it is fitted on at most {KERNEL_MAX_TRAIN:,} training molecules, got "
                f"{m:,}" if m > KERNEL_MAX_TRAIN else kernel_memory_obstacle(m, available))
    if obstacle is None:
        return m, None
    if choice == "on":
        raise SettingError("kernel_ridge", f"on, but {obstacle}; use auto or off", colon=True)
    return 0, f"note: no kernel ridge (--kernel-ridge auto): {obstacle}"


def check_memory(estimate: MemoryEstimate, batch_size: int, ensemble_size: int,
                 available: int | None = None) -> None:
    """Refuse a run whose estimate exceeds the available memory.

    Args:
        estimate: from ``training_memory``.
        batch_size, ensemble_size: shown in the message.
        available: bytes available (default: ``available_memory()``; None: unknown,
            nothing is refused).

    Raises:
        SettingError: naming ``batch_size`` (and the other settings the estimate
            follows), with the estimate and what is available.
    """
    available = available_memory() if available is None else available
    if available is None or estimate.total <= available:
        return
    raise SettingError("batch_size", (
        f"with hidden, heads, layers and ensemble_size as set, this run needs "
        f"about {_gb(estimate.total)} of memory ({estimate.parameters:,} parameters: "
        f"{_gb(estimate.training)} to train one model, {_gb(estimate.kept_models)} for "
        f"the {ensemble_size} kept; {_gb(estimate.activations)} of activations for a "
        f"batch of {batch_size}) but {_gb(available)} is available; make the model, the "
        f"batch or the ensemble smaller"), colon=True)


def _check_labels(data: Sequence[Data], run: RunConfig) -> None:
    """Every target column needs a label among the valid molecules; classification
    labels must be 0, 1 or missing (the first offending row is named)."""
    labelled = ~torch.isnan(stacked_targets(data)).all(0)  # (T,)
    empty = [c for c, ok in zip(run.target_columns, labelled.tolist()) if not ok]
    if empty:
        raise ValueError(f"{Path(run.data).name}: target column(s) {empty} hold no label in "
                         f"any row with a valid SMILES; fill them or leave them out of "
                         f"--target-columns")
    if run.task != "classification":
        return
    for d in data:
        for t, value in enumerate(d.y[0].tolist()):
            if not math.isnan(value) and value not in (0.0, 1.0):
                raise ValueError(
                    f"{Path(run.data).name}: row {d.row}, column {run.target_columns[t]!r}: "
                    f"classification target {value:g} is not 0 or 1"
                )


def _split(data: Sequence[Data], run: RunConfig) -> splits.Split:
    n = len(data)
    if run.split == "column":
        labels = read_column(Path(run.data), run.split_column, run.encoding)
        return splits.column([labels[d.row] for d in data], [d.row for d in data],
                             f"{Path(run.data).name}: column {run.split_column!r}")
    if run.split == "random":
        return splits.random(n, run.split_sizes, run.seed)
    if run.split == "scaffold":
        return splits.scaffold([d.smiles for d in data], run.split_sizes, run.seed)
    return splits.kfold(n, run.split_sizes, run.seed, run.fold)


def _started_kernel(out: Path) -> tuple[int, bool, bool] | None:
    """The kernel part's size M of a started run, whether it stacks a fingerprint kernel
    ridge and whether the networks' weight is fitted per task (None: not started).

    Raises:
        ValueError: for a run started by setattn 0.2.0 (its members hold the kernel
            part): it cannot be resumed by this version.
    """
    saved = read_ensemble_config(out)
    if saved is not None:
        kernel = saved.get("kernel") or {}
        return (int(kernel.get("size", 0)), bool(kernel.get("fingerprints", False)),
                saved.get("weight") == "stacked")
    for name, kind in (("last.pt", "training"), ("best.pt", "model")):
        path = out / "model_0" / name
        if path.is_file():
            if any(key in load_checkpoint(path, kind)["config"] for key in LEGACY_KEYS):
                raise ValueError(f"--resume: {out} was started by setattn 0.2.0, whose "
                                 f"members each hold the kernel part; this version cannot "
                                 f"continue it: finish it with setattn 0.2.0, or start a "
                                 f"new run")
            return 0, False, False  # networks started, the kernel part never saved: none
    return None


def _check_resumable(out: Path, main: bool) -> None:
    """Refuse, on every rank and before anything is written, a run this version cannot
    continue (``_started_kernel``)."""
    error = None
    if main:
        try:
            _started_kernel(out)
        except ValueError as err:
            error = str(err)
    error = distributed.broadcast(error)
    if error:
        raise ValueError(error)


def _kernel_decision(run: RunConfig, n_train: int, started: int | None) -> tuple:
    """((M, note), error): the kernel ridge of a run, or of a resumed run as it started."""
    if started == 0:
        return (0, None), None
    if started:
        obstacle = kernel_memory_obstacle(n_train)
        if obstacle:
            return (0, None), (f"--resume: the run started with a kernel ridge, but "
                               f"{obstacle}; resume it where its fit fits, or start a new run")
        return (started, None), None
    # auto: regression and single-task classification; several classification tasks
    # on request (--kernel-ridge on)
    tasks = len(run.target_columns)
    several = run.task != "regression" and tasks > 1  # several classification tasks
    if run.kernel_ridge == "auto" and run.model.descriptor_dim and several:
        return (0, f"note: no kernel ridge (--kernel-ridge auto): {tasks} classification "
                   f"tasks; --kernel-ridge on fits one per task"), None
    try:
        return kernel_size(run.kernel_ridge, n_train,
                                  run.model.descriptor_dim > 0), None
    except SettingError as error:  # sent to the other ranks as plain values
        return (0, None), (error.name, error.reason)
    except ValueError as error:
        return (0, None), str(error)


def _kernel_size(run: RunConfig, n_train: int, log: Log, out: Path, resume: bool
                 ) -> tuple[int, bool, bool]:
    """M of the run's kernel ridge (0: none), whether it stacks a fingerprint kernel
    ridge and whether the network's blend weight is fitted per task, decided by the main
    process for all ranks; a resumed run keeps the choices it started with.

    Raises:
        ValueError: naming ``--kernel-ridge`` where "on" cannot fit it, or ``--resume``
            where the run started with one that cannot be fitted here.
    """
    decision = None
    if distributed.world().is_main:
        started = _started_kernel(out) if resume else None
        chosen = (run.kernel_fingerprints == "on",
                  run.network_weight == "stacked" and run.task == "regression")
        decision = (_kernel_decision(run, n_train, started and started[0]),
                    chosen if started is None else started[1:])
    ((size, note), error), (fingerprints, fitted) = distributed.broadcast(decision)
    if isinstance(error, tuple):
        raise SettingError(*error, colon=True)
    if error:
        raise ValueError(error)
    if note:
        log(note)
    return size, bool(size) and fingerprints, bool(size) and fitted


@dataclass
class _Parts:
    """The valid molecules of a run's CSV and its three parts (lists of ``Data``)."""

    data: list[Data]
    failures: list[InvalidSmilesError]
    train: list[Data]
    val: list[Data]
    test: list[Data]
    notes: list[MoleculeNote]
    fingerprint: dict

    def rows(self) -> dict[str, list[int]]:
        """``split.json``: the file rows of each part."""
        return {name: [int(d.row) for d in part]
                for name, part in (("train", self.train), ("val", self.val), ("test", self.test))}


def _read_parts(run: RunConfig, log: Log) -> _Parts:
    """Featurise ``run.data`` (cached), report invalid SMILES, and split it.

    Raises:
        ValueError: naming the file or the flag when nothing is left to train on, a
            part is empty, or the validation part has no labels.
    """
    source = Path(run.data).name
    # cached per CSV content and settings, featurised by a process pool for large sets
    molecules = featurize_csv(run.data, run.smiles_column, run.target_columns,
                              run.model.descriptor_dim, max_heavy_atoms=run.max_heavy_atoms,
                              encoding=run.encoding)
    report_failures(molecules.failures, source, run.strict, log, molecules.notes,
                    quotable(Path(run.data)))
    data = molecules.data
    if not data:
        raise ValueError(f"{source}: no valid molecule to train on")
    _check_labels(data, run)
    parts = [[data[i] for i in idx] for idx in _split(data, run)]
    for name, part in zip(("training", "validation", "test"), parts):
        if part:
            continue
        if run.split == "column" and name != "test":  # a column split may have no test part
            raise ValueError(f"{source}: column {run.split_column!r} names no {name} row "
                             f"among the {len(data)} valid molecules")
        if run.split != "column":
            raise SettingError("split_sizes", f"the {name} part is empty with "
                               f"{counted(len(data), 'valid molecule')}; "
                               f"use more data or other fractions", colon=True)
    if torch.isnan(stacked_targets(parts[1])).all():
        raise ValueError(f"{source}: the validation part has no labels at all")
    return _Parts(data, list(molecules.failures), *parts, list(molecules.notes),
                  checkpoint.data_fingerprint(run.data, molecules))


def _write_split(parts: _Parts, run: RunConfig, out: Path, resume: bool, log: Log) -> None:
    """``config.json`` and ``split.json``; on resume the data and the split must be the
    run's own."""
    split_path = out / "split.json"
    if resume and split_path.is_file():
        try:
            stored = json.loads(split_path.read_text())
            rows = {name: stored[name] for name in ("train", "val", "test")}
        except (ValueError, KeyError, TypeError):
            raise ValueError(f"{split_path}: not a setattn split file") from None
        note = checkpoint.check_same_data(stored.get("data"), parts.fingerprint, out)
        if note:
            log(note)
        if rows != parts.rows():
            raise ValueError(f"{split_path}: {Path(run.data).name} or the split settings "
                             f"changed since the run started; resume needs the same data")
    write_json(run.to_dict(), out / "config.json")
    write_json({**parts.rows(), "data": parts.fingerprint}, split_path)


def _check_memory(run: RunConfig, parts: _Parts | None = None) -> None:
    """Refuse a run the machine has not the memory for (``check_memory``); with
    ``parts``, for the largest training batch of its actual molecules."""
    m, t = run.model, run.train
    batch = t.batch_size or 64  # None: a run saved without one, legacy_batch_size <= 64
    sizes = (m.hidden, m.heads, m.layers + 1, batch, run.ensemble_size)
    if not all(isinstance(v, int) and v >= 1 for v in sizes):
        return  # out of range: ``validate`` names the flag
    atoms = None
    if parts is not None:
        sizes = sorted((d.num_nodes for d in parts.train), reverse=True)
        atoms = sum(sizes[:batch])
    estimate = training_memory(
        m.hidden, m.heads, m.layers, batch, run.ensemble_size, atoms_per_batch=atoms,
        num_tasks=len(run.target_columns), descriptor_dim=m.descriptor_dim,
        layer_norm=m.norm == "layer", global_layers=m.global_layers, max_hops=m.max_hops)
    check_memory(estimate, batch, run.ensemble_size)


def _network_config(run: RunConfig) -> NetworkConfig:
    """The run's network settings with its task and target count."""
    return NetworkConfig.from_dict(
        {**run.model.to_dict(), "num_tasks": len(run.target_columns), "task": run.task})


def _fit_kernel(run: RunConfig, parts: _Parts, size: int, fingerprints: bool,
                encoder: MoleculeNetwork | None, log: Log) -> tuple[KernelPart, dict]:
    """The kernel part fitted on the training part: to the standardised targets
    (regression) or the 0/1 labels (classification); with ``encoder``, a vector ridge
    on its molecule vectors stacked in."""
    log(f"kernel ridge: fitting on {size:,} training molecules (its time grows as M^3)")
    y = stacked_targets(parts.train)  # (M, T)
    if run.task == "regression":
        mean, std = target_scaling(y)
        y = (y - mean) / std  # (M, T)
    config = KernelConfig(size, run.model.descriptor_dim, len(run.target_columns), run.task,
                          fingerprints, None if encoder is None else encoder.config.to_dict())
    kernel, info = KernelPart.fit(parts.train, y, config, run.target_columns,
                                  progress=distributed.world().is_main, encoder=encoder)
    log(f"kernel ridge on {config.descriptor_dim} descriptors: {info['kernel']} kernel, "
        f"gamma {info['gamma']}, ridge {info['ridge']}, leave-one-out RMSE "
        f"{info['loo_rmse']:.4g} ("
        f"{'standardised' if run.task == 'regression' else 'on the 0/1 labels'}), "
        f"{info['seconds']:.1f}s")
    if "fingerprint" in info:
        weights = ", ".join(f"{w:.2f}" for w in info["descriptor_weight"])
        log(f"fingerprint kernel ridge: ridge {info['fingerprint']['ridge']}, "
            f"leave-one-out RMSE {info['fingerprint']['loo_rmse']:.4g}; stacked "
            f"with the descriptor one at weight {weights} (descriptors)")
    if "vectors" in info:
        weights = ", ".join(f"{w:.2f}" for w in info["vector_stack_weight"])
        log(f"encoder vector kernel ridge ({run.kernel_vectors}): {info['vectors']['kernel']} "
            f"kernel, gamma {info['vectors']['gamma']}, ridge {info['vectors']['ridge']}, "
            f"leave-one-out RMSE {info['vectors']['loo_rmse']:.4g}; stacked at weight "
            f"{weights} (the other ridges)")
    return kernel, info


def _epoch_callback(epoch_log: EpochLog | None, done: list[dict],
                    callback: Callable[[list[dict]], None] | None
                    ) -> Callable[[list[dict]], None]:
    """What ``fit`` calls after each epoch: rewrite ``epoch_log`` (when given) with the
    rows of the finished members (``done``, read at call time) and the current one's,
    then call ``callback``."""
    def on_epoch(rows: list[dict]) -> None:
        if epoch_log is not None:
            epoch_log.write([*done, *rows])
        if callback is not None:
            callback(rows)

    return on_epoch


def trains_together(run: RunConfig, network_config: NetworkConfig) -> bool:
    """Whether the run's networks (of ``network_config``, a pretrained encoder's
    architecture included) train side by side (``RunConfig.members``)."""
    return run.members == "together" or (
        run.members == "auto" and run.ensemble_size > 1 and distributed.world().size == 1
        and together_clash(run.train, network_config) is None)


def _train_members(run: RunConfig, parts: _Parts, network_config: NetworkConfig,
                   out: Path, encoder: dict | None, *, resume: bool,
                   callback: Callable[[list[dict]], None] | None, log: Log,
                   checkpoint_seconds: float) -> list[FitResult]:
    """Fit the K networks (each from ``encoder``'s weights when given) one after the
    other, or side by side with ``--members together``, rewriting ``log.csv`` each epoch;
    the compiled CPU kernels are loaded first (``load_kernels``), outside every fit's
    seconds."""
    main = distributed.world().is_main
    results: list[FitResult] = []
    done: list[dict] = []  # the log rows of the finished members
    epoch_log = EpochLog(out / "log.csv") if main else None
    # the compiled kernels load now, not in member 0's first epoch (its fit seconds)
    load_kernels(network_config, parts.train, run.train.device)
    models = []
    for k in range(run.ensemble_size):
        torch.manual_seed(run.train.seed + k)  # member k's initialisation
        models.append(MoleculeNetwork(network_config))
        if encoder is not None:  # the head stays freshly initialised
            load_encoder(models[k], encoder, run.pretrained)
    metas = [{"smiles_column": run.smiles_column, "member": k,
              "max_heavy_atoms": run.max_heavy_atoms} for k in range(run.ensemble_size)]
    if trains_together(run, network_config):
        results = fit_members(models, parts.train, parts.val, run.train,
                              [out / f"model_{k}" for k in range(run.ensemble_size)],
                              names=run.target_columns, metas=metas, resume=resume,
                              callback=_epoch_callback(epoch_log, [], callback), log=log,
                              checkpoint_seconds=checkpoint_seconds)
        if epoch_log is not None:
            epoch_log.write([row for r in results for row in r.rows])
        return results
    for k, model in enumerate(models):
        torch.manual_seed(run.train.seed + k)  # as when each member was built just before
        train_config = TrainConfig(**{**asdict(run.train), "seed": run.train.seed + k})
        on_epoch = _epoch_callback(epoch_log, done, callback)
        result = fit(model, parts.train, parts.val, train_config, out / f"model_{k}",
                     names=run.target_columns,
                     meta=metas[k], resume=resume, member=k, callback=on_epoch, log=log,
                     checkpoint_seconds=checkpoint_seconds)
        results.append(result)
        done += result.rows
        if epoch_log is not None:
            epoch_log.write(done)
    return results


def _save_ensemble(out: Path, members: int, kernel: KernelPart | None, fitted: bool,
                   weight: torch.Tensor | None = None) -> None:
    """``ensemble.pt`` (main process only): the kernel part and the networks' weight
    (default: the unfitted one)."""
    if distributed.world().is_main:
        how = "none" if kernel is None else "stacked" if fitted else "fixed"
        if weight is None:
            weight = torch.tensor(NETWORK_WEIGHT if kernel is not None else 1.0, device="cpu")
        save_ensemble(out / ENSEMBLE_FILE, members, kernel, weight, how)


def _metrics(run: RunConfig, parts: _Parts, ensemble: Ensemble, results: Sequence[FitResult],
             kernel_info: dict | None) -> dict:
    """``metrics.json`` (without the wall time): test and validation metrics of the
    ensemble and of each member, the stack's parts, split sizes and skipped rows."""
    names, task = run.target_columns, run.task
    scores = ensemble_scores(ensemble, parts.val, parts.test, task, names, kernel_info)
    member_test = scores.pop("member_test")
    metrics = {
        "task": task,
        "targets": list(names),
        "test": scores.pop("test"),
        "val": scores.pop("val"),
        "models": [{"best_epoch": r.best_epoch, "epochs_run": len(r.rows),
                    "test": member_test[k]} for k, r in enumerate(results)],
        "split": {"type": run.split, "seed": run.seed, "sizes": list(run.split_sizes),
                  "train": len(parts.train), "val": len(parts.val), "test": len(parts.test)},
        "molecules": len(parts.data),
        "skipped_rows": skipped_rows(parts.failures),
        "notes": [n._asdict() for n in parts.notes],
        **scores,  # uncertainty, components
    }
    # every fit (epochs, checkpoints and all), plus the kernel ridge's fit
    metrics["train_seconds"] = (sum(r.seconds for r in results)
                                + (kernel_info["seconds"] if kernel_info else 0.0))
    if run.split == "kfold":
        metrics["split"].update(fold=run.fold, folds=splits.num_folds(run.split_sizes))
    if run.split == "column":
        metrics["split"].update(column=run.split_column)
    return metrics


def run_training(
    run: RunConfig,
    output_dir: str | Path,
    *,
    resume: bool = False,
    callback: Callable[[list[dict]], None] | None = None,
    log: Log = print,
    checkpoint_seconds: float = CHECKPOINT_SECONDS,
) -> dict:
    """Train ``run.ensemble_size`` models on one split of ``run.data``; write the run.

    Args:
        run: the run's settings.
        output_dir: the run directory (created; see the module docstring).
        resume: continue an interrupted run in ``output_dir``: finished models are
            kept, the interrupted one goes on from its ``last.pt``.
        callback: called after every epoch (see ``fit``), with the current model's
            log rows so far (the last one is the new epoch's).
        log: where messages and epoch lines go.
        checkpoint_seconds: least training time between writes of a ``last.pt``
            (see ``fit``; 0: after every epoch).

    Returns:
        The metrics dict also written to ``output_dir/metrics.json``.

    Raises:
        FileNotFoundError, ValueError: for bad input, naming file, row, column or argument.
    """
    start = time.perf_counter()
    out = Path(output_dir)
    main = distributed.world().is_main  # under torchrun only rank 0 writes files and prints
    log = log if main else quiet
    _check_memory(run)  # the model's size alone, before anything is read or allocated
    run.validate()
    run, encoder = _with_encoder(run)
    if encoder is not None:
        _check_memory(run)  # the encoder's size
    vector_encoder = _vector_encoder(run)
    check_not_destination(out, {"--data": run.data}, run.ensemble_size)
    lock = _claim(out, main, resume)
    try:
        if resume:
            _check_resumable(out, main)
        parts = _read_parts(run, log)
        _check_memory(run, parts)  # with the largest batch of the actual molecules
        if main:
            _write_split(parts, run, out, resume, log)
        metrics = _train(run, parts, out, encoder, vector_encoder, resume=resume,
                         callback=callback, log=log, checkpoint_seconds=checkpoint_seconds)
        metrics["wall_time_s"] = time.perf_counter() - start
        if main:
            write_json(metrics, out / "metrics.json")
    finally:
        lock.release()
    return metrics


def _claim(out: Path, main: bool, resume: bool) -> RunLock:
    """Rank 0 claims ``out`` (``RunLock``); a refusal reaches every rank.

    Raises:
        ValueError: naming ``--output-dir`` if another run holds it, a dead one left its
            lock, it is a folder of other files (``run_files.check_run_dir``), or
            (without ``resume``) it already holds a run.
    """
    lock, error = RunLock(out, resume), None
    if main:
        try:
            lock.acquire()
            if not resume and (out / "config.json").is_file():
                raise ValueError(f"argument --output-dir: {out} already holds a run; pass "
                                 f"--resume to continue it, or choose another directory")
        except ValueError as err:
            lock.release()
            error = str(err)
    error = distributed.broadcast(error)
    if error:
        raise ValueError(error)
    return lock


def _with_encoder(run: RunConfig) -> tuple[RunConfig, dict | None]:
    """The run with its pretrained encoder's architecture (a copy; ``run`` itself when it
    has none) and the encoder's checkpoint (None: ``--pretrained none``).

    Raises:
        FileNotFoundError, CheckpointError: naming an encoder file missing or foreign.
    """
    if run.pretrained == "none":
        return run, None
    ckpt = load_pretrained(run.pretrained)
    model = NetworkConfig.from_dict({**run.model.to_dict(), **pretrained_architecture(ckpt)})
    return replace(run, model=model), ckpt


def _vector_encoder(run: RunConfig) -> MoleculeNetwork | None:
    """The frozen encoder whose vectors the kernel part regresses on (None: none).

    Raises:
        FileNotFoundError, CheckpointError: naming ``--kernel-vectors`` and the file.
    """
    if run.kernel_vectors == "none":
        return None
    try:
        return encoder_network(run.kernel_vectors)
    except FileNotFoundError as err:
        raise FileNotFoundError(f"argument --kernel-vectors: {err}") from None
    except CheckpointError as err:
        raise CheckpointError(f"argument --kernel-vectors: {err}") from None


def _one_class_notes(run: RunConfig, parts: _Parts) -> list[str]:
    """Before training, a note for each classification target with a single class (or
    no label) in a part, and what that means there; none for regression."""
    if run.task != "classification":
        return []
    effects = (("training part", parts.train, "the networks learn it from that alone"),
               ("validation part", parts.val, "early stopping's validation ROC-AUC leaves "
                                              "it out"),
               ("test part", parts.test, "its test ROC-AUC will be undefined"))
    return [f"note: {reason}; {effect}" for part, data, effect in effects if data
            for reason in one_class_tasks(stacked_targets(data, len(run.target_columns)),
                                          run.target_columns, part)]


def _train(run: RunConfig, parts: _Parts, out: Path, encoder: dict | None,
           vector_encoder: MoleculeNetwork | None, *, resume: bool,
           callback: Callable[[list[dict]], None] | None, log: Log,
           checkpoint_seconds: float) -> dict:
    """The kernel ridge (with ``vector_encoder``'s vector ridge when given) and the
    ensemble on ``parts``, the curve; the metrics."""
    main = distributed.world().is_main
    log(f"{Path(run.data).name}: {counted(len(parts.data), 'molecule')}, split {run.split} (seed "
        f"{run.seed}): {len(parts.train)} train / {len(parts.val)} val / {len(parts.test)} test")
    for note in _one_class_notes(run, parts):
        log(note)
    size, fingerprints, fitted = _kernel_size(run, len(parts.train), log, out, resume)
    kernel = kernel_info = None
    if size:
        kernel, kernel_info = _fit_kernel(run, parts, size, fingerprints, vector_encoder, log)
    # the kernel part first: a resumed run reads what it started with
    _save_ensemble(out, run.ensemble_size, kernel, fitted)
    if encoder is not None:
        log(f"networks start from the pretrained encoder {run.pretrained} (pretrained on "
            f"{encoder['meta']['molecules']['train']:,} molecules of "
            f"{encoder['meta']['corpus']['file']})")
    results = _train_members(run, parts, _network_config(run), out, encoder, resume=resume,
                             callback=callback, log=log, checkpoint_seconds=checkpoint_seconds)
    ensemble = Ensemble([r.model for r in results], kernel).to(model_device(results[0].model))
    if fitted:
        ensemble.weight = fit_network_weight(ensemble, parts.val).to(ensemble.weight.device)
        log("network weight in the blend, fitted on the validation part: "
            + ", ".join(f"{w:.2f}" for w in ensemble.weight.tolist()))
    _save_ensemble(out, len(ensemble), kernel, fitted, ensemble.weight)
    if main:
        rows = [row for r in results for row in r.rows]
        plot_training_curve(rows, out / "curve.png", metric=f"val_{results[0].monitor}")
    metrics = _metrics(run, parts, ensemble, results, kernel_info)
    if "uncertainty" in metrics:
        u = metrics["uncertainty"]["test"]
        if u["coverage"] is not None and u["mean_width"] is not None:
            log(f"{conformal.LEVEL:.0%} prediction intervals (calibrated on the validation "
                f"part) hold {u['coverage']:.1%} of the test labels, mean width "
                f"{u['mean_width']:.3g}")
        elif u["mean_width"] is None:
            log(f"note: the validation part has too few labels for {conformal.LEVEL:.0%} "
                f"prediction intervals of every target: they are unbounded")
    return metrics


def _line(row: dict) -> str:
    """One CSV line of ``row``'s values, floats to 6 significant digits."""
    buffer = io.StringIO()
    csv.writer(buffer).writerow([f"{v:.6g}" if isinstance(v, float) else v
                                 for v in row.values()])
    return buffer.getvalue()


class EpochLog:
    """The CSV log at ``path``.

    Args:
        path: the file to write.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._rows: list[dict] = []  # the rows formatted so far (held: compared by identity)
        self._lines: list[str] = []  # their CSV lines

    def write(self, rows: Sequence[dict]) -> None:
        """Rewrite the file with ``rows`` (nothing for none); the header is the first
        row's keys. Rows already written, as the same objects in the same places, keep
        their lines."""
        if not rows:
            return
        keep = 0
        while (keep < min(len(rows), len(self._rows))
               and rows[keep] is self._rows[keep]):
            keep += 1
        self._rows = list(rows)
        self._lines = [*self._lines[:keep], *(_line(row) for row in rows[keep:])]
        header = _line({key: key for key in rows[0]})
        # rewritten after every epoch, and its rows are in last.pt too: no fsync
        with atomic_open(self.path, "w", sync=False, encoding="utf-8", newline="") as handle:
            handle.write(header + "".join(self._lines))
