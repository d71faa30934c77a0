"""One trainer for molecule property prediction: the engine behind ``setattn train``.

    run_training(run, output_dir)        # read CSV, split, train K models, write results
      -> fit(model, train, val, ...)     # one model: epochs, early stopping, checkpoints

What a run directory holds:

    config.json        the run (data, columns, split, training and model settings)
    split.json         the file rows of the train / val / test parts
    model_<k>/best.pt  the best-validation weights of ensemble member k (for predict)
    model_<k>/last.pt  the full training state for resume: after the last finished epoch
                       when training ends or stops on an error or Ctrl-C, else at most
                       ``CHECKPOINT_SECONDS`` of training old
    log.csv            model, epoch, train_loss, val_loss, val_<metric>, lr, seconds
    curve.png          training loss and validation metric per epoch
    metrics.json       test and validation metrics, split sizes, skipped rows, times

Checkpoints are plain dicts of tensors and JSON-like values with a format marker,
written atomically (temporary file in the same folder, then ``os.replace``) and read
with ``torch.load(..., weights_only=True)``: a file that is not ours is refused and
never executes code.

Losses: masked MSE on standardised targets (regression), masked BCE with logits
(classification); a missing label (NaN) counts in neither the loss nor the metrics.
"""

from __future__ import annotations

import csv
import ctypes
import io
import json
import math
import pickle
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import BatchSampler, RandomSampler
from torch.utils.data import DataLoader as IndexLoader
from torch_geometric.data import Batch, Data
from tqdm import tqdm

from setattn import distributed, splits
from setattn.domains.molecules import InvalidSmilesError, mol_to_data
from setattn.files import atomic_open
from setattn.models.kernel import KernelRidge
from setattn.models.molecule import MoleculeModel, MoleculeModelConfig, target_scaling
from setattn.moldata import PackedMolecules, collate_molecules, featurize_csv

__all__ = [
    "FORMAT",
    "CheckpointError",
    "DivergedError",
    "FitResult",
    "RunConfig",
    "TrainConfig",
    "atomic_open",
    "average_precision",
    "classification_metrics",
    "evaluate",
    "featurize",
    "fit",
    "keep_freed_memory",
    "legacy_batch_size",
    "load_checkpoint",
    "load_model",
    "load_run",
    "masked_loss",
    "predict",
    "predict_all",
    "regression_metrics",
    "rdkit_descriptors",
    "roc_auc",
    "run_training",
    "save_checkpoint",
    "shard_loss",
]

FORMAT = 1
"""Checkpoint and run format version, stored under the key ``"setattn_format"``."""

KERNEL_MAX_TRAIN = 3000
"""Most training molecules for which ``--kernel-ridge auto`` fits the kernel ridge: its
closed-form fit grows as M^3."""

Log = Callable[[str], None]


# ----------------------------------------------------------------------------
# Settings
# ----------------------------------------------------------------------------


@dataclass
class TrainConfig:
    """How one model is trained.

    Attributes:
        epochs: maximum number of epochs (the OneCycle schedule spans them all).
        batch_size: molecules per batch. 64 (chemprop's default too) trained as well
            as 32 on FreeSolv and ESOL (split seeds 3-8, see ``MoleculeModelConfig``)
            in fewer, larger steps; None (runs saved before) uses ``legacy_batch_size``.
        lr: peak learning rate of the OneCycle schedule (AdamW).
        weight_decay: AdamW weight decay.
        patience: stop after this many epochs without a better validation metric.
        seed: seeds the model's initialisation and the batch order.
    """

    epochs: int = 60
    batch_size: int | None = 64
    lr: float = 1e-3
    weight_decay: float = 0.0
    patience: int = 20
    seed: int = 0

    def validate(self) -> None:
        for name in ("epochs", "patience"):
            if getattr(self, name) < 1:
                raise ValueError(f"argument --{name}: must be >= 1, got {getattr(self, name)}")
        if self.batch_size is not None and self.batch_size < 1:
            raise ValueError(f"argument --batch-size: must be >= 1, got {self.batch_size}")
        if not 0 < self.lr < math.inf:
            raise ValueError(f"argument --lr: must be > 0 and finite, got {self.lr}")
        if not 0 <= self.weight_decay < math.inf:
            raise ValueError(f"argument --weight-decay: must be >= 0 and finite, "
                             f"got {self.weight_decay}")


@dataclass
class RunConfig:
    """A whole ``setattn train`` run, saved as ``config.json`` (and read back on resume).

    Attributes:
        data: the CSV file.
        smiles_column: name of its SMILES column.
        target_columns: names of its T target columns.
        task: "regression" or "classification".
        split: "random", "scaffold" or "kfold" (see ``setattn.splits``).
        split_sizes: (train, validation, test) fractions.
        seed: split seed; ensemble member k is seeded with ``seed + k``.
        fold: the test fold of a k-fold split.
        ensemble_size: K models trained on the same split.
        strict: refuse the data if a SMILES is invalid or empty (else skip it).
        kernel_ridge: "auto" blends a descriptor kernel ridge into regression models
            trained on at most ``KERNEL_MAX_TRAIN`` molecules with descriptors; "off".
        train: training settings.
        model: model settings (``num_tasks`` and ``task`` follow the run).
    """

    data: str
    target_columns: list[str]
    smiles_column: str = "smiles"
    task: str = "regression"
    split: str = "random"
    split_sizes: list[float] = field(default_factory=lambda: [0.8, 0.1, 0.1])
    seed: int = 0
    fold: int = 0
    ensemble_size: int = 1
    strict: bool = False
    kernel_ridge: str = "auto"
    train: TrainConfig = field(default_factory=TrainConfig)
    model: MoleculeModelConfig = field(default_factory=MoleculeModelConfig)

    def validate(self) -> None:
        if self.task not in ("regression", "classification"):
            raise ValueError(f"argument --task: must be regression or classification, "
                             f"got {self.task!r}")
        if self.split not in splits.SPLITS:
            raise ValueError(f"argument --split: must be one of {list(splits.SPLITS)}, "
                             f"got {self.split!r}")
        splits.check_sizes(self.split_sizes)
        if self.ensemble_size < 1:
            raise ValueError(f"argument --ensemble-size: must be >= 1, got {self.ensemble_size}")
        if not self.target_columns:
            raise ValueError("argument --target-columns: give at least one target column")
        if self.seed < 0:
            raise ValueError(f"argument --seed: must be >= 0, got {self.seed}")
        if self.kernel_ridge not in ("auto", "off"):
            raise ValueError(f"argument --kernel-ridge: must be auto or off, "
                             f"got {self.kernel_ridge!r}")
        self.train.validate()
        self.model.validate()

    def to_dict(self) -> dict:
        d = asdict(self)
        d["model"] = self.model.to_dict()
        return {"setattn_format": FORMAT, **d}

    @classmethod
    def from_dict(cls, d: dict, source: str = "config.json") -> RunConfig:
        if d.get("setattn_format") != FORMAT:
            raise ValueError(f"{source}: not a setattn run configuration "
                             f"(setattn_format {d.get('setattn_format')!r}, expected {FORMAT})")
        d = {k: v for k, v in d.items() if k != "setattn_format"}
        known = {f.name for f in fields(cls)}
        if set(d) - known:
            raise ValueError(f"{source}: unknown keys {sorted(set(d) - known)}")
        d["train"] = TrainConfig(**d.get("train", {}))
        d["model"] = MoleculeModelConfig.from_dict(d.get("model", {}))
        return cls(**d)


def legacy_batch_size(n_train: int) -> int:
    """The batch size of runs saved with ``batch_size`` None (before it defaulted to 64):
    32 molecules below 2000 training molecules, else 64. ``--resume`` keeps it for them."""
    return 32 if n_train < 2000 else 64


# ----------------------------------------------------------------------------
# Features
# ----------------------------------------------------------------------------


def _descriptor_value(fn: Any, mol: Any) -> float:
    """One RDKit descriptor, NaN when RDKit cannot compute it for this molecule."""
    try:
        return float(fn(mol))
    except (RuntimeError, ValueError, ZeroDivisionError, OverflowError):
        return float("nan")


# Left out for speed, measured on Tox21 (ms per molecule): qed 3.9, the BCUT2D family
# 1.1, SPS 0.5; Ipc overflows float32 on large molecules. The rest take about 8 ms.
_SLOW_DESCRIPTORS = ("qed", "SPS", "Ipc", "BCUT2D_")


def descriptor_functions() -> list[tuple[str, Any]]:
    """(name, function) of the RDKit 2D descriptors the model uses, in a fixed order."""
    from rdkit.Chem import Descriptors

    return [(name, fn) for name, fn in Descriptors.descList
            if not name.startswith(_SLOW_DESCRIPTORS)]


def rdkit_descriptors(smiles: str) -> Tensor:
    """RDKit's 2D descriptors of a molecule (largest fragment), (1, F_desc) float32.

    Non-finite values (and values beyond float32), and descriptors RDKit fails to
    compute for the molecule, become 0.
    """
    from rdkit import Chem, rdBase

    from setattn.domains.molecules import keep_largest_fragment

    with rdBase.BlockLogs():
        mol = keep_largest_fragment(Chem.MolFromSmiles(smiles))
        Chem.FastFindRings(mol)  # fragments come back without ring information
        values = np.array([_descriptor_value(fn, mol) for _, fn in descriptor_functions()],
                          dtype=np.float64)
    values = np.where(np.abs(values) < 1e30, values, 0.0)  # inf, nan and float32 overflow
    return torch.from_numpy(np.nan_to_num(values)).float()[None]  # (1, F_desc)


def descriptor_count() -> int:
    """F_desc of ``rdkit_descriptors`` with the installed RDKit."""
    return len(descriptor_functions())


def add_descriptors(data: Data, descriptor_dim: int) -> Data:
    """Attach ``descriptors`` (1, F_desc) to ``data`` when the model uses them."""
    if descriptor_dim:
        d = rdkit_descriptors(data.smiles)
        if d.shape[1] != descriptor_dim:
            raise ValueError(
                f"the model expects {descriptor_dim} descriptors but this RDKit computes "
                f"{d.shape[1]}; retrain with this RDKit version"
            )
        data.descriptors = d
    return data


def featurize(smiles: str, descriptor_dim: int = 0, *, row: int | None = None,
              source: str | None = None) -> Data:
    """One molecule as the model's input (``mol_to_data`` plus descriptors if used).

    Raises:
        InvalidSmilesError: for an empty or unparsable SMILES.
    """
    return add_descriptors(mol_to_data(smiles, row=row, source=source), descriptor_dim)


# ----------------------------------------------------------------------------
# Loss and metrics
# ----------------------------------------------------------------------------


def masked_loss(out: Tensor, y: Tensor, task: str) -> Tensor:
    """Mean loss over the labelled entries only.

    Args:
        out: (G, T) model outputs (standardised values or logits).
        y: (G, T) targets in the same units, NaN where missing.
        task: "regression" (MSE) or "classification" (BCE with logits).

    Returns:
        A scalar; 0 (still on the autograd graph) when nothing is labelled.
    """
    losses, mask = _masked_losses(out, y, task)  # (G, T), (G, T)
    return losses.sum() / mask.sum().clamp_min(1)


def _masked_losses(out: Tensor, y: Tensor, task: str) -> tuple[Tensor, Tensor]:
    """(G, T) per-entry losses, zero where the label is missing, and the (G, T) label mask."""
    mask = ~torch.isnan(y)  # (G, T)
    target = torch.where(mask, y, torch.zeros_like(y))  # (G, T)
    if task == "regression":
        losses = (out - target).square()  # (G, T)
    else:
        losses = F.binary_cross_entropy_with_logits(out, target, reduction="none")  # (G, T)
    return losses * mask, mask


def shard_loss(out: Tensor, y: Tensor, task: str, labelled: int, world_size: int,
               padding: bool = False) -> Tensor:
    """One rank's part of a global batch's mean loss, scaled for gradient averaging.

    ``DistributedDataParallel`` averages gradients over the N ranks, so each rank
    returns N times its share: the average is then the gradient of the global
    batch's ``masked_loss``, whatever the shares' sizes.

    Args:
        out: (G_r, T) this rank's model outputs.
        y: (G_r, T) its targets (NaN where missing).
        task: "regression" or "classification".
        labelled: labelled entries in the whole global batch (all ranks).
        world_size: N.
        padding: this rank's batch is padding (weighted by zero).

    Returns:
        A scalar: N * (summed loss of this rank's labelled entries) / ``labelled``.
    """
    losses, _ = _masked_losses(out, y, task)  # (G_r, T)
    return losses.sum() * (0.0 if padding else world_size / max(labelled, 1))


def _binary_curve(y: np.ndarray, s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """True and false positive counts at each distinct score threshold, high to low."""
    order = np.argsort(-s, kind="stable")
    s, y = s[order], y[order]
    last = np.r_[np.nonzero(np.diff(s))[0], y.size - 1]  # end of each run of equal scores
    tps = np.cumsum(y)[last]
    fps = last + 1 - tps
    return tps, fps


def roc_auc(y: np.ndarray, s: np.ndarray) -> float:
    """Area under the ROC curve (ties count one half), NaN unless both classes occur.

    Args:
        y: (M,) labels 0 or 1.
        s: (M,) scores, higher meaning class 1.
    """
    y, s = np.asarray(y, dtype=np.float64), np.asarray(s, dtype=np.float64)
    pos = y.sum()
    if pos == 0 or pos == y.size:
        return math.nan
    tps, fps = _binary_curve(y, s)
    tpr = np.r_[0.0, tps / pos]
    fpr = np.r_[0.0, fps / (y.size - pos)]
    return float(np.sum(np.diff(fpr) * (tpr[1:] + tpr[:-1]) / 2))  # trapezoids


def average_precision(y: np.ndarray, s: np.ndarray) -> float:
    """Area under the precision-recall curve as average precision (step-wise, no
    interpolation, as scikit-learn's ``average_precision_score``); NaN without positives.

    Args:
        y: (M,) labels 0 or 1.
        s: (M,) scores, higher meaning class 1.
    """
    y, s = np.asarray(y, dtype=np.float64), np.asarray(s, dtype=np.float64)
    pos = y.sum()
    if pos == 0:
        return math.nan
    tps, fps = _binary_curve(y, s)
    precision = tps / (tps + fps)
    recall = tps / pos
    return float(np.sum(np.diff(np.r_[0.0, recall]) * precision))


def _nanmean(values: Sequence[float]) -> float:
    finite = [v for v in values if not math.isnan(v)]
    return float(np.mean(finite)) if finite else math.nan


def regression_metrics(y: Tensor, p: Tensor, names: Sequence[str]) -> dict:
    """RMSE, MAE and R^2 per target and averaged over targets, labelled entries only.

    Args:
        y: (M, T) targets, NaN where missing.
        p: (M, T) predictions in target units.
        names: the T target names.

    Returns:
        ``{"rmse", "mae", "r2"}`` averaged over targets, plus ``"per_task"`` when T > 1.
    """
    per_task = {}
    for t, name in enumerate(names):
        mask = ~torch.isnan(y[:, t])  # (M,)
        yt, pt = y[mask, t].double(), p[mask, t].double()
        if yt.numel() == 0:
            per_task[name] = {"rmse": math.nan, "mae": math.nan, "r2": math.nan}
            continue
        err = pt - yt
        total = (yt - yt.mean()).square().sum().item()
        per_task[name] = {
            "rmse": err.square().mean().sqrt().item(),
            "mae": err.abs().mean().item(),
            "r2": 1.0 - err.square().sum().item() / total if total > 0 else math.nan,
        }
    result = {k: _nanmean([m[k] for m in per_task.values()]) for k in ("rmse", "mae", "r2")}
    if len(names) > 1:
        result["per_task"] = per_task
    return result


def classification_metrics(y: Tensor, p: Tensor, names: Sequence[str]) -> dict:
    """ROC-AUC and PR-AUC (average precision) per task and averaged over tasks.

    A task whose labelled entries hold a single class has NaN metrics and is left
    out of the averages.

    Args:
        y: (M, T) labels 0 / 1, NaN where missing.
        p: (M, T) probabilities (or any scores).
        names: the T task names.

    Returns:
        ``{"roc_auc", "pr_auc", "per_task": {name: {"roc_auc", "pr_auc"}}}``.
    """
    per_task = {}
    for t, name in enumerate(names):
        mask = ~torch.isnan(y[:, t])  # (M,)
        yt, pt = y[mask, t].numpy(), p[mask, t].double().numpy()
        both = 0 < yt.sum() < yt.size
        per_task[name] = {
            "roc_auc": roc_auc(yt, pt) if both else math.nan,
            "pr_auc": average_precision(yt, pt) if both else math.nan,
        }
    return {
        "roc_auc": _nanmean([m["roc_auc"] for m in per_task.values()]),
        "pr_auc": _nanmean([m["pr_auc"] for m in per_task.values()]),
        "per_task": per_task,
    }


def evaluate(y: Tensor, p: Tensor, task: str, names: Sequence[str]) -> dict:
    """``regression_metrics`` or ``classification_metrics`` by ``task``."""
    if task == "regression":
        return regression_metrics(y, p, names)
    return classification_metrics(y, p, names)


def _monitor(task: str, val_y: Tensor) -> str:
    """The validation metric for early stopping: rmse, roc_auc, or the validation loss
    when no validation task holds both classes (ROC-AUC undefined)."""
    if task == "regression":
        return "rmse"
    for t in range(val_y.shape[1]):
        labels = val_y[:, t][~torch.isnan(val_y[:, t])]
        if labels.numel() and 0 < labels.sum() < labels.numel():
            return "roc_auc"
    return "loss"


def _improved(value: float, best: float | None, monitor: str) -> bool:
    if math.isnan(value):
        return False
    if best is None:
        return True
    return value > best if monitor == "roc_auc" else value < best


# ----------------------------------------------------------------------------
# Checkpoints
# ----------------------------------------------------------------------------


class CheckpointError(ValueError):
    """A file that is not a setattn checkpoint (or not the kind expected)."""


class DivergedError(ValueError):
    """Training never reached a finite validation metric: the settings (most often a
    too high ``--lr``) make it diverge. A ``ValueError``: bad input, not a bug."""


def save_checkpoint(payload: dict, path: str | Path) -> Path:
    """Write ``payload`` atomically: a temporary file in the same folder, then rename.

    A crash while writing leaves the previous checkpoint untouched.

    Args:
        payload: a dict of tensors and JSON-like values (no other objects).
        path: the checkpoint file.
    """
    with atomic_open(path, "wb") as handle:
        torch.save({"setattn_format": FORMAT, **payload}, handle)
    return path


_REQUIRED = {
    "model": ("kind", "config", "state_dict", "meta"),
    "training": ("kind", "config", "state_dict", "optimizer", "scheduler", "rng", "progress"),
}


def load_checkpoint(path: str | Path, kind: str = "model") -> dict:
    """Read a checkpoint written by ``save_checkpoint``, refusing anything else.

    Loading uses ``torch.load(..., weights_only=True)``: a pickle that would import
    or call code is rejected before anything runs.

    Args:
        path: the file.
        kind: "model" (best weights, for prediction) or "training" (resume state).

    Returns:
        The checkpoint dict.

    Raises:
        FileNotFoundError: if ``path`` does not exist (naming it).
        CheckpointError: naming ``path`` if it is not a setattn checkpoint of that kind.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such checkpoint file")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:  # refused by the weights-only unpickler
        code = re.search(r"Unsupported global: GLOBAL (\S+)", str(err))
        if code:
            raise CheckpointError(
                f"{path}: not a setattn checkpoint: loading it would run code "
                f"({code.group(1)}); refused by torch.load(weights_only=True), nothing was "
                f"executed"
            ) from None
        detail = re.search(r"WeightsUnpickler error:\s*(.+)", str(err))
        raise CheckpointError(
            f"{path}: not a setattn checkpoint (torch.load(weights_only=True) refused it"
            f"{': ' + detail.group(1).strip() if detail else ''}); nothing was executed"
        ) from None
    except Exception as err:  # truncated or not a torch file at all
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise CheckpointError(
            f"{path}: not a setattn checkpoint (unreadable by torch.load: {reason})"
        ) from None
    if not isinstance(ckpt, dict) or "setattn_format" not in ckpt:
        raise CheckpointError(f"{path}: not a setattn checkpoint (no 'setattn_format' marker)")
    if ckpt["setattn_format"] != FORMAT:
        raise CheckpointError(f"{path}: checkpoint format {ckpt['setattn_format']!r} is not "
                              f"{FORMAT}; it was written by another setattn version")
    missing = [key for key in _REQUIRED[kind] if key not in ckpt]
    if missing or ckpt.get("kind") != kind:
        raise CheckpointError(f"{path}: not a setattn {kind} checkpoint "
                              f"(kind {ckpt.get('kind')!r}, missing keys {missing})")
    return ckpt


def _build_model(ckpt: dict, path: Path) -> MoleculeModel:
    """A model from a checkpoint's config and weights; mismatches name the file."""
    try:
        model = MoleculeModel(MoleculeModelConfig.from_dict(dict(ckpt["config"])))
        state = dict(ckpt["state_dict"])
        if model.kernel is None:  # saved before models had a blend weight: the network alone
            state.setdefault("blend", model.blend.clone())
        model.load_state_dict(state)
    except (TypeError, ValueError, RuntimeError, KeyError) as err:
        first = str(err).strip().splitlines()[0]
        raise CheckpointError(
            f"{path}: the weights do not match the model its config describes ({first})"
        ) from None
    return model.eval()


def load_model(path: str | Path) -> tuple[MoleculeModel, dict]:
    """A trained model (in eval mode) and its metadata from a ``best.pt`` file.

    Returns:
        (model, meta) with meta holding ``task``, ``target_columns``,
        ``smiles_column``, ``epoch`` and ``val`` metrics.
    """
    path = Path(path)
    ckpt = load_checkpoint(path, "model")
    return _build_model(ckpt, path), dict(ckpt["meta"])


def load_run(path: str | Path) -> tuple[list[MoleculeModel], dict]:
    """The ensemble of a run directory (or one ``best.pt`` file) for prediction.

    Returns:
        (models, meta): the K models in eval mode and the first one's metadata.

    Raises:
        FileNotFoundError: naming the folder or file that is missing.
        CheckpointError: if a checkpoint is not ours.
    """
    path = Path(path)
    if path.is_file():
        model, meta = load_model(path)
        return [model], meta
    config_path = path / "config.json"
    if not config_path.is_file():
        raise FileNotFoundError(
            f"argument --model: {path} is not a setattn run directory (no config.json)"
        )
    run = RunConfig.from_dict(json.loads(config_path.read_text()), str(config_path))
    loaded = [load_model(path / f"model_{k}" / "best.pt") for k in range(run.ensemble_size)]
    return [m for m, _ in loaded], loaded[0][1]


# ----------------------------------------------------------------------------
# Training one model
# ----------------------------------------------------------------------------


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

    model: MoleculeModel
    best_epoch: int
    best_value: float
    monitor: str
    rows: list[dict]
    seconds: float = 0.0


@torch.no_grad()
def predict(model: MoleculeModel, data: Sequence[Data], batch_size: int = 256) -> Tensor:
    """(M, T) predictions (target units or probabilities) for M molecules, in order."""
    model.eval()
    outs = [model.predict(batch) for batch in _batches(data, batch_size)]
    return torch.cat(outs) if outs else torch.zeros(0, model.config.num_tasks)


def predict_all(model: MoleculeModel, data: Sequence[Data]) -> Tensor:
    """``predict`` on all ranks together: each predicts a shard, all get the (M, T) whole."""
    return distributed.gather_predictions(lambda part: predict(model, part), data)


@torch.no_grad()
def _outputs(model: MoleculeModel, batches: Sequence[Batch]) -> Tensor:
    """(M, T) forward outputs (standardised regression values or logits) of the
    molecules of ``batches``, in order."""
    model.eval()
    outs = [model(batch) for batch in batches]
    return torch.cat(outs) if outs else torch.zeros(0, model.config.num_tasks)


def _batches(data: Sequence[Data], batch_size: int = 256) -> list[Batch]:
    """``data`` in consecutive batches, as ``DataLoader(data, batch_size)`` yields them."""
    data = list(data)
    return [collate_molecules(data[i:i + batch_size]) for i in range(0, len(data), batch_size)]


def _targets(data: Sequence[Data]) -> Tensor:
    """(M, T) stacked targets."""
    return torch.cat([d.y for d in data]) if data else torch.zeros(0, 1)


def _fmt(value: float) -> str:
    return f"{value:.4f}" if abs(value) >= 1e-3 or value == 0 else f"{value:.2e}"


CHECKPOINT_SECONDS = 10.0
"""Least training time between two writes of ``last.pt`` (besides the final one and the
one on an error or Ctrl-C). Writing it after every epoch cost about 7 ms of FreeSolv's
150 ms epochs (a one-off profile, 2.75 MB per write); a process killed outright
(SIGKILL, power loss) loses at most this much training, which ``--resume`` redoes with
the same numbers."""


def _training_state(model: MoleculeModel, optimizer: torch.optim.Optimizer,
                    scheduler: Any, generator: torch.Generator, progress: dict,
                    snapshot: bool) -> dict:
    """The ``last.pt`` payload; ``snapshot`` copies every tensor, so that it keeps this
    moment's state while training goes on."""
    state = {"kind": "training", "config": model.config.to_dict(),
             "state_dict": model.state_dict(), "optimizer": optimizer.state_dict(),
             "scheduler": scheduler.state_dict(),
             "rng": {"torch": torch.get_rng_state(), "loader": generator.get_state()},
             "progress": dict(progress)}
    return _copied(state) if snapshot else state


def _copied(obj: Any) -> Any:
    """``obj`` with every tensor, dict and list in it copied (plain values shared): what
    ``copy.deepcopy`` gives a checkpoint payload, faster (1.0 vs 7.0 ms for the default
    molecule model's training state, measured once)."""
    if isinstance(obj, Tensor):
        return obj.clone()
    if isinstance(obj, dict):
        return {k: _copied(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_copied(v) for v in obj]
    return obj


# glibc's mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3


def keep_freed_memory() -> bool:
    """Let glibc's malloc keep freed memory for reuse instead of handing it back to the OS.

    Every training step allocates and frees the same megabytes of tensors. By default
    glibc returns blocks above its mmap threshold, and the top of the heap, to the kernel
    when they are freed, so the next step page-faults them in again: about 1500 page
    faults per Tox21 step of 64 molecules, 10-15 % of its time (``fit`` calls this).
    The process then keeps up to its peak heap size allocated. Does nothing where
    ``mallopt`` is missing (not glibc).

    Returns:
        Whether both settings were applied.
    """
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    # blocks up to 32 MB (glibc's largest threshold) come from the heap, which is
    # trimmed only when 256 MB at its top are free
    return bool(mallopt(_M_MMAP_THRESHOLD, 32 << 20)) and bool(
        mallopt(_M_TRIM_THRESHOLD, 256 << 20))


def fit(
    model: MoleculeModel,
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

    ``out_dir/best.pt`` holds the best validation weights, written when they improve.
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
        A ``FitResult`` with the best model loaded.
    """
    clock = time.perf_counter()
    out_dir = Path(out_dir)
    w = distributed.world()
    log = log if w.is_main else _quiet
    task = model.config.task
    keep_freed_memory()
    batch_size = config.batch_size or legacy_batch_size(len(train_data))
    generator = torch.Generator().manual_seed(config.seed)
    train_list = list(train_data)
    # the batches of DataLoader(shuffle=True, generator=generator); rank r gets its share
    sampler = distributed.ShardBatchSampler(
        BatchSampler(RandomSampler(train_list, generator=generator), batch_size, False),
        w.rank, w.size)
    # batches cut out of the training set concatenated once (PyG's collate costs ~6x more)
    loader = IndexLoader(range(len(train_list)), batch_sampler=sampler, generator=generator,
                         collate_fn=PackedMolecules(train_list).batch)
    train_y = _targets(train_data)  # (M, T)
    descriptors = (torch.cat([d.descriptors for d in train_data])
                   if model.config.descriptor_dim else None)  # (M, F_desc)
    model.fit_scaling(train_y, descriptors)
    # fused: one kernel for all parameters instead of a loop of small ones per parameter
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr,
                                  weight_decay=config.weight_decay, fused=True)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(
        optimizer, max_lr=config.lr, total_steps=config.epochs * len(loader))
    val_y = _targets(val_data)  # (M_val, T)
    monitor = _monitor(task, val_y)
    progress = {"epoch": 0, "best_epoch": 0, "best_value": None, "bad_epochs": 0,
                "finished": False, "rows": [], "monitor": monitor}
    best_path, last_path = out_dir / "best.pt", out_dir / "last.pt"
    meta = {"task": task, "target_columns": list(names), **(meta or {})}

    state = None
    if resume:  # rank 0 reads the checkpoint; every rank gets it
        state = distributed.broadcast(
            load_checkpoint(last_path, "training") if w.is_main and last_path.is_file() else None)
    if state is not None:
        model.load_state_dict(state["state_dict"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        generator.set_state(state["rng"]["loader"])
        torch.set_rng_state(state["rng"]["torch"])
        progress = dict(state["progress"])
        clock -= progress.get("seconds", 0.0)  # the time spent before the checkpoint
        if progress["epoch"]:
            log(f"model {member}: resuming after epoch {progress['epoch']} from {last_path}")
    else:
        torch.manual_seed(config.seed)  # dropout and anything else drawn during training
    # DDP averages gradients over the ranks (and starts every rank from rank 0's weights)
    net = DistributedDataParallel(model) if w.size > 1 else model

    metric_key = f"val_{monitor}"
    batched: list[Batch] = []  # this rank's validation batches: the same every epoch

    def val_batches(part: Sequence[Data]) -> list[Batch]:
        if not batched:
            batched.extend(_batches(part))
        return batched

    written = time.perf_counter()  # when last.pt was last written (or training began)
    pending: dict | None = None  # the last finished epoch's state, when not yet written
    try:
        while not progress["finished"]:
            epoch = progress["epoch"] + 1
            start = time.perf_counter()
            bar = tqdm(loader, desc=f"model {member} epoch {epoch}/{config.epochs}",
                       leave=False, disable=None if w.is_main else True, unit="batch")
            train_loss = _train_epoch(net, model, bar, optimizer, scheduler, sampler, train_y)
            # one pass over the validation set (shared out over the ranks): loss and metrics
            val_out = distributed.gather_predictions(
                lambda part: _outputs(model, val_batches(part)), val_data)  # (M_val, T)
            val_loss = masked_loss(val_out, model.scale_targets(val_y), task).item()
            val_metrics = evaluate(val_y, model.to_units(val_out), task, names)
            value = val_loss if monitor == "loss" else val_metrics[monitor]
            improved = _improved(value, progress["best_value"], monitor)
            if improved:
                progress.update(best_epoch=epoch, best_value=value, bad_epochs=0)
                if w.is_main:
                    save_checkpoint({"kind": "model", "config": model.config.to_dict(),
                                     "state_dict": model.state_dict(),
                                     "meta": {**meta, "epoch": epoch,
                                              "val": _json_safe(val_metrics)}}, best_path)
            else:
                progress["bad_epochs"] += 1
            row = {"model": member, "epoch": epoch, "train_loss": train_loss,
                   "val_loss": val_loss, metric_key: value,
                   "lr": scheduler.get_last_lr()[0], "seconds": time.perf_counter() - start}
            progress["rows"] = [*progress["rows"], row]
            progress["epoch"] = epoch
            progress["finished"] = distributed.broadcast(  # every rank stops with rank 0
                epoch >= config.epochs or progress["bad_epochs"] >= config.patience)
            progress["seconds"] = time.perf_counter() - clock
            if w.is_main:
                due = (progress["finished"] or checkpoint_seconds <= 0
                       or time.perf_counter() - written >= checkpoint_seconds)
                pending = _training_state(model, optimizer, scheduler, generator, progress,
                                          snapshot=not due)
                if due:
                    save_checkpoint(pending, last_path)
                    pending, written = None, time.perf_counter()
            log(f"model {member} epoch {epoch:3d}/{config.epochs}  "
                f"train_loss {_fmt(row['train_loss'])}  val_loss {_fmt(val_loss)}  "
                f"{metric_key} {_fmt(value)}  lr {row['lr']:.2e}"
                f"  {row['seconds']:.1f}s{'  *' if improved else ''}")
            if callback is not None:
                callback(progress["rows"])
            if progress["finished"] and epoch < config.epochs:
                log(f"model {member}: early stop after epoch {epoch} "
                    f"({config.patience} epochs without a better {metric_key})")
    except BaseException:
        if pending is not None:  # keep the last finished epoch (Ctrl-C, a failing callback)
            save_checkpoint(pending, last_path)
        raise

    best = _load_best(best_path)
    if best is None:
        raise DivergedError(f"model {member}: the validation {monitor} was never finite "
                            f"(did training diverge? try a lower --lr)")
    return FitResult(best, int(progress["best_epoch"]), float(progress["best_value"]),
                     monitor, list(progress["rows"]), time.perf_counter() - clock)


def _train_epoch(net: torch.nn.Module, model: MoleculeModel, batches: Iterable[Batch],
                 optimizer: torch.optim.Optimizer, scheduler: Any,
                 sampler: distributed.ShardBatchSampler, train_y: Tensor) -> float:
    """One pass of optimiser steps over ``batches``; returns the mean training loss per
    molecule over all ranks. ``net`` is ``model``, or its DDP wrapper; ``sampler`` says
    which molecules each batch holds (rows of ``train_y`` (M, T))."""
    w = distributed.world()
    task = model.config.task
    model.train()
    total, count = 0.0, 0
    for batch in batches:
        out, y = net(batch), model.scale_targets(batch.y)  # (G_r, T) each
        if w.size == 1:
            loss = masked_loss(out, y, task)
        else:
            labelled = int((~torch.isnan(train_y[sampler.current])).sum())
            loss = shard_loss(out, y, task, labelled, w.size, sampler.padding)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        scheduler.step()
        total += loss.item() / w.size * len(sampler.current)
        count += len(sampler.current)
    return distributed.all_reduce_sum(total) / max(count, 1)


def _quiet(line: str) -> None:
    """The log of ranks other than 0: they train in silence."""


def _load_best(path: Path) -> MoleculeModel | None:
    """The best model of ``fit`` (None if none was saved), read by rank 0 and broadcast."""
    w = distributed.world()
    if w.size == 1:
        return load_model(path)[0] if path.is_file() else None
    ckpt = distributed.broadcast(
        load_checkpoint(path, "model") if w.is_main and path.is_file() else None)
    return None if ckpt is None else _build_model(ckpt, path)


def _json_safe(obj: Any) -> Any:
    """Floats stay floats, NaN becomes None (JSON has no NaN); dicts and lists recurse."""
    if isinstance(obj, dict):
        return {k: _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_safe(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


# ----------------------------------------------------------------------------
# A whole run: data, split, ensemble, results
# ----------------------------------------------------------------------------


def _check_labels(data: Sequence[Data], run: RunConfig) -> None:
    """Classification labels must be 0, 1 or missing; name the first offending row."""
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
    if run.split == "random":
        return splits.random(n, run.split_sizes, run.seed)
    if run.split == "scaffold":
        return splits.scaffold([d.smiles for d in data], run.split_sizes, run.seed)
    return splits.kfold(n, run.split_sizes, run.seed, run.fold)


def _write_json(obj: Any, path: Path) -> None:
    """Atomic JSON write (temporary file, then rename)."""
    with atomic_open(path, "w", encoding="utf-8") as handle:
        json.dump(_json_safe(obj), handle, indent=2)
        handle.write("\n")


def _write_log(rows: Sequence[dict], path: Path) -> None:
    """The CSV log of all models' epochs, rewritten whole (atomically) each time."""
    if not rows:
        return
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(rows[0]))
    writer.writeheader()
    for row in rows:
        writer.writerow({k: f"{v:.6g}" if isinstance(v, float) else v for k, v in row.items()})
    # rewritten after every epoch, and its rows are in last.pt too: no fsync
    with atomic_open(path, "w", sync=False, encoding="utf-8", newline="") as handle:
        handle.write(buffer.getvalue())


def _ensemble_predict(models: Sequence[MoleculeModel], data: Sequence[Data]) -> Tensor:
    """(M, T) mean prediction of the models."""
    return torch.stack([predict_all(m, data) for m in models]).mean(0)


def _kernel_size(run: RunConfig, n_train: int) -> int:
    """M of the run's kernel ridge: the training molecules, or 0 for none."""
    on = (run.kernel_ridge == "auto" and run.task == "regression"
          and run.model.descriptor_dim > 0 and n_train <= KERNEL_MAX_TRAIN)
    return n_train if on else 0


def fit_kernel(train: Sequence[Data], config: MoleculeModelConfig,
               names: Sequence[str]) -> tuple[KernelRidge, dict]:
    """The kernel ridge of a regression model, fitted to standardised training targets.

    Raises:
        ValueError: naming a target column without any training label.

    Returns:
        The fitted module and ``{"gamma", "ridge", "loo_rmse", "seconds"}``.
    """
    start = time.perf_counter()
    y = _targets(train)  # (M, T)
    mean, std = target_scaling(y)
    kernel = KernelRidge(len(train), config.descriptor_dim, config.num_tasks)
    info = kernel.fit(torch.cat([d.descriptors for d in train]), (y - mean) / std, names)
    return kernel, {**info, "seconds": time.perf_counter() - start}


def _component_metrics(models: Sequence[MoleculeModel], data: Sequence[Data], task: str,
                       names: Sequence[str]) -> dict:
    """Metrics of the attention network (the ensemble's mean) alone and of the kernel
    ridge alone on ``data``."""
    y = _targets(data)  # (M, T)
    batches = _batches(data)
    with torch.no_grad():
        net = torch.stack([_outputs(m, batches) for m in models]).mean(0)  # (M, T)
        kernel_out = torch.cat([models[0].kernel_outputs(b) for b in batches])  # (M, T)
    return {"attention": evaluate(y, models[0].to_units(net), task, names),
            "kernel_ridge": evaluate(y, models[0].to_units(kernel_out), task, names)}


def _skipped(failures: Sequence[InvalidSmilesError]) -> list[dict]:
    return [{"row": f.row, "smiles": f.smiles, "reason": f.reason} for f in failures]


def report_failures(failures: Sequence[InvalidSmilesError], source: str, strict: bool,
                    log: Log = print) -> None:
    """List invalid or empty SMILES with their rows; with ``strict`` raise instead.

    Raises:
        ValueError: with ``strict`` and at least one failure, listing them.
    """
    if not failures:
        return
    lines = [f"  row {f.row}: {f.smiles!r}: {f.reason}" for f in failures]
    shown = lines if len(lines) <= 50 else [*lines[:50], f"  ... and {len(lines) - 50} more"]
    if strict:
        raise ValueError(f"{source}: {len(failures)} invalid or empty SMILES (--strict):\n"
                         + "\n".join(shown))
    log(f"{source}: skipping {len(failures)} row(s) with invalid or empty SMILES "
        f"(rows counted from 0, header excluded):\n" + "\n".join(shown))


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
    log = log if main else _quiet
    run.validate()
    source = Path(run.data).name
    # cached per CSV content and settings, featurised by a process pool for large sets
    molecules = featurize_csv(run.data, run.smiles_column, run.target_columns,
                              run.model.descriptor_dim)
    report_failures(molecules.failures, source, run.strict, log)
    data = molecules.data
    if not data:
        raise ValueError(f"{source}: no valid molecule to train on")
    _check_labels(data, run)
    train_idx, val_idx, test_idx = _split(data, run)
    for part, idx in (("training", train_idx), ("validation", val_idx), ("test", test_idx)):
        if not idx:
            raise ValueError(f"argument --split-sizes: the {part} part of {len(data)} molecules "
                             f"is empty; use more data or other fractions")
    train = [data[i] for i in train_idx]
    val = [data[i] for i in val_idx]
    test = [data[i] for i in test_idx]
    if torch.isnan(_targets(val)).all():
        raise ValueError(f"{source}: the validation part has no labels at all")

    out.mkdir(parents=True, exist_ok=True)
    split_rows = {name: [int(data[i].row) for i in idx]
                  for name, idx in (("train", train_idx), ("val", val_idx), ("test", test_idx))}
    split_path = out / "split.json"
    if main and resume and split_path.is_file():
        if json.loads(split_path.read_text()) != split_rows:
            raise ValueError(f"{split_path}: {source} or the split settings changed since the "
                             f"run started; resume needs the same data")
    if main:
        _write_json(run.to_dict(), out / "config.json")
        _write_json(split_rows, split_path)
    log(f"{source}: {len(data)} molecules, split {run.split} (seed {run.seed}): "
        f"{len(train)} train / {len(val)} val / {len(test)} test")

    names = run.target_columns
    results: list[FitResult] = []
    all_rows: list[dict] = []
    model_config = MoleculeModelConfig.from_dict(
        {**run.model.to_dict(), "num_tasks": len(names), "task": run.task,
         "kernel_size": _kernel_size(run, len(train))})
    kernel = kernel_info = None
    if model_config.kernel_size:
        kernel, kernel_info = fit_kernel(train, model_config, names)
        log(f"kernel ridge on {model_config.descriptor_dim} descriptors: gamma "
            f"{kernel_info['gamma']}, ridge {kernel_info['ridge']}, leave-one-out RMSE "
            f"{kernel_info['loo_rmse']:.4g} (standardised), {kernel_info['seconds']:.1f}s")
    for k in range(run.ensemble_size):
        torch.manual_seed(run.train.seed + k)
        model = MoleculeModel(model_config)
        if kernel is not None:
            model.kernel.load_state_dict(kernel.state_dict())
        train_config = TrainConfig(**{**asdict(run.train), "seed": run.train.seed + k})

        def on_epoch(rows: list[dict], done: list[dict] = all_rows) -> None:
            if main:
                _write_log([*done, *rows], out / "log.csv")
            if callback is not None:
                callback(rows)

        result = fit(model, train, val, train_config, out / f"model_{k}", names=names,
                     meta={"smiles_column": run.smiles_column, "member": k},
                     resume=resume, member=k, callback=on_epoch, log=log,
                     checkpoint_seconds=checkpoint_seconds)
        results.append(result)
        all_rows += result.rows
        if main:
            _write_log(all_rows, out / "log.csv")

    if main:
        from setattn.viz import plot_training_curve

        plot_training_curve(all_rows, out / "curve.png", metric=f"val_{results[0].monitor}")
    models = [r.model for r in results]
    components = {}
    if kernel is not None:
        components = {"blend": float(models[0].blend), "kernel": kernel_info,
                      **{part: _component_metrics(models, rows, run.task, names)
                         for part, rows in (("val", val), ("test", test))}}
    metrics = {
        "task": run.task,
        "targets": list(names),
        "test": evaluate(_targets(test), _ensemble_predict(models, test), run.task, names),
        "val": evaluate(_targets(val), _ensemble_predict(models, val), run.task, names),
        "models": [{"best_epoch": r.best_epoch, "epochs_run": len(r.rows),
                    "test": evaluate(_targets(test), predict_all(r.model, test), run.task,
                                     names)}
                   for r in results],
        "split": {"type": run.split, "seed": run.seed, "sizes": list(run.split_sizes),
                  "train": len(train), "val": len(val), "test": len(test)},
        "molecules": len(data),
        "skipped_rows": _skipped(molecules.failures),
        **({"components": components} if components else {}),
        # every fit (epochs, checkpoints and all), plus the kernel ridge's fit
        "train_seconds": sum(r.seconds for r in results)
        + (kernel_info["seconds"] if kernel_info else 0.0),
        "wall_time_s": time.perf_counter() - start,
    }
    if run.split == "kfold":
        metrics["split"].update(fold=run.fold, folds=splits.num_folds(run.split_sizes))
    if main:
        _write_json(metrics, out / "metrics.json")
    return metrics
