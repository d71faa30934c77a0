"""Losses and metrics of molecule models: masked (a missing label counts nowhere).

Losses: masked MSE on standardised targets (regression), masked BCE with logits
(classification). Metrics: RMSE, MAE and R^2 per target (regression); ROC-AUC and
average precision per task (classification: scikit-learn's ``roc_auc_score`` and
``average_precision_score``); each averaged over the targets.

RMSE, MAE and R^2 stay three tensor formulas: scikit-learn's would add conversions to
NumPy and gives R^2 of a constant target as 1 or 0 (or -inf), where this gives NaN.

A metric that a part of the data cannot define (ROC-AUC with a single class, R^2 of
equal labels, anything without labels) is NaN (``null`` in JSON) with the reason beside
it under ``<metric>_undefined``, per task and, when no task defines it, for the average.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["average_precision", "classification_metrics", "evaluate", "improved", "masked_loss",
           "monitor_metric", "one_class_tasks", "regression_metrics", "roc_auc", "shard_loss"]


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


def member_losses(out: Tensor, y: Tensor, task: str) -> Tensor:
    """Each ensemble member's ``masked_loss`` at once.

    Args:
        out: (G, K, T) outputs of K members on one batch.
        y: (G, T) targets, NaN where missing.
        task: "regression" or "classification".

    Returns:
        (K,) member k's mean loss over the labelled entries.
    """
    losses, mask = _masked_losses(out, y[:, None].expand_as(out), task)  # (G, K, T) each
    return losses.sum((0, 2)) / mask.sum((0, 2)).clamp_min(1)  # (K,)


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


def _both_classes(y: np.ndarray) -> bool:
    positives = int(np.count_nonzero(y))
    return 0 < positives < y.size


# The two functions below import scikit-learn when called: ``import sklearn.metrics``
# took 1.2 s of ``python -X importtime -c "import setattn.cli"`` (loaded 2-core
# machine), which every ``setattn predict`` and ``explain`` would pay for nothing.
def roc_auc(y: np.ndarray, s: np.ndarray) -> float:
    """Area under the ROC curve (ties count one half): scikit-learn's ``roc_auc_score``,
    NaN unless both classes occur (instead of its warning).

    Args:
        y: (M,) labels 0 or 1.
        s: (M,) scores, higher meaning class 1.
    """
    from sklearn.metrics import roc_auc_score  # imported here: see above

    y, s = np.asarray(y, dtype=np.float64), np.asarray(s, dtype=np.float64)
    return float(roc_auc_score(y, s)) if _both_classes(y) else math.nan


def average_precision(y: np.ndarray, s: np.ndarray) -> float:
    """Area under the precision-recall curve as average precision (step-wise, no
    interpolation): scikit-learn's ``average_precision_score``, NaN without positives
    (instead of its warning and 0).

    Args:
        y: (M,) labels 0 or 1.
        s: (M,) scores, higher meaning class 1.
    """
    from sklearn.metrics import average_precision_score  # imported here: see above

    y, s = np.asarray(y, dtype=np.float64), np.asarray(s, dtype=np.float64)
    if not np.count_nonzero(y):
        return math.nan
    return float(average_precision_score(y, s))


def _nanmean(values: Sequence[float]) -> float:
    finite = [v for v in values if not math.isnan(v)]
    return float(np.mean(finite)) if finite else math.nan


def _averages(per_task: dict, keys: Sequence[str]) -> dict:
    """Each metric averaged over the tasks that define it; where none does, the reasons
    of the tasks under ``<metric>_undefined``."""
    result = {}
    for key in keys:
        result[key] = _nanmean([m[key] for m in per_task.values()])
        if math.isnan(result[key]):
            result[f"{key}_undefined"] = "; ".join(
                m.get(f"{key}_undefined", f"task {name!r}: undefined")
                for name, m in per_task.items())
    return result


def _regression_task(yt: Tensor, pt: Tensor, name: str, part: str) -> dict:
    """RMSE, MAE and R^2 of one target's labelled entries (M_t,), with reasons for the
    undefined ones."""
    if yt.numel() == 0:
        reason = f"target {name!r}: no label in the {part}"
        return {"rmse": math.nan, "mae": math.nan, "r2": math.nan, "rmse_undefined": reason,
                "mae_undefined": reason, "r2_undefined": reason}
    err = pt - yt
    total = (yt - yt.mean()).square().sum().item()
    out = {"rmse": err.square().mean().sqrt().item(), "mae": err.abs().mean().item(),
           "r2": 1.0 - err.square().sum().item() / total if total > 0 else math.nan}
    if total <= 0:
        out["r2_undefined"] = (f"target {name!r}: the {yt.numel()} label(s) in the {part} are "
                               f"all equal ({yt[0].item():g}); R2 needs them to vary")
    return out


def regression_metrics(y: Tensor, p: Tensor, names: Sequence[str],
                       part: str = "data") -> dict:
    """RMSE, MAE and R^2 per target and averaged over targets, labelled entries only.

    Args:
        y: (M, T) targets, NaN where missing.
        p: (M, T) predictions in target units.
        names: the T target names.
        part: what the rows are ("test part"), for the reasons of undefined metrics.

    Returns:
        ``{"rmse", "mae", "r2"}`` averaged over targets (with ``<metric>_undefined``
        reasons where NaN), plus ``"per_task"`` when T > 1.
    """
    per_task = {}
    for t, name in enumerate(names):
        mask = ~torch.isnan(y[:, t])  # (M,)
        per_task[name] = _regression_task(y[mask, t].double(), p[mask, t].double(), name, part)
    result = _averages(per_task, ("rmse", "mae", "r2"))
    if len(names) > 1:
        result["per_task"] = per_task
    return result


def _one_class(yt: np.ndarray, name: str, part: str) -> str:
    """Why a task's ROC-AUC is undefined: no label, or a single class."""
    if yt.size == 0:
        return f"task {name!r}: no label in the {part}"
    return f"task {name!r}: only class {int(yt[0])} in the {part} ({yt.size} label(s))"


def one_class_tasks(y: Tensor, names: Sequence[str], part: str = "data") -> list[str]:
    """Why each task of ``y`` (M, T) whose labels are one class, or none, cannot have a
    ROC-AUC on this part: the reasons :func:`classification_metrics` would give, known
    before any model is trained."""
    reasons = []
    for t, name in enumerate(names):
        yt = y[~torch.isnan(y[:, t]), t].numpy()  # (labelled,)
        if not _both_classes(yt):
            reasons.append(_one_class(yt, name, part))
    return reasons


def classification_metrics(y: Tensor, p: Tensor, names: Sequence[str],
                           part: str = "data") -> dict:
    """ROC-AUC and PR-AUC (average precision) per task and averaged over tasks.

    A task whose labelled entries hold a single class has NaN metrics, with the reason
    under ``roc_auc_undefined`` and ``pr_auc_undefined``, and is left out of the
    averages (undefined, with the tasks' reasons, when no task defines them).

    Args:
        y: (M, T) labels 0 / 1, NaN where missing.
        p: (M, T) probabilities (or any scores).
        names: the T task names.
        part: what the rows are ("test part"), for the reasons.

    Returns:
        ``{"roc_auc", "pr_auc", "per_task": {name: {"roc_auc", "pr_auc"}}}``.
    """
    per_task = {}
    for t, name in enumerate(names):
        mask = ~torch.isnan(y[:, t])  # (M,)
        yt, pt = y[mask, t].numpy(), p[mask, t].double().numpy()
        if 0 < yt.sum() < yt.size:
            per_task[name] = {"roc_auc": roc_auc(yt, pt), "pr_auc": average_precision(yt, pt)}
        else:
            reason = _one_class(yt, name, part)
            per_task[name] = {"roc_auc": math.nan, "pr_auc": math.nan,
                              "roc_auc_undefined": reason, "pr_auc_undefined": reason}
    return {**_averages(per_task, ("roc_auc", "pr_auc")), "per_task": per_task}


def evaluate(y: Tensor, p: Tensor, task: str, names: Sequence[str],
             part: str = "data") -> dict:
    """``regression_metrics`` or ``classification_metrics`` by ``task``; ``part``
    ("test part") words the reasons of undefined metrics."""
    if task == "regression":
        return regression_metrics(y, p, names, part)
    return classification_metrics(y, p, names, part)


def monitor_metric(task: str, val_y: Tensor) -> str:
    """The validation metric for early stopping: rmse, roc_auc, or the validation loss
    when no validation task holds both classes (ROC-AUC undefined)."""
    if task == "regression":
        return "rmse"
    for t in range(val_y.shape[1]):
        labels = val_y[:, t][~torch.isnan(val_y[:, t])]
        if labels.numel() and 0 < labels.sum() < labels.numel():
            return "roc_auc"
    return "loss"


def improved(value: float, best: float | None, monitor: str) -> bool:
    """Whether ``value`` of the ``monitor`` metric beats ``best`` (None: nothing yet)."""
    if math.isnan(value):
        return False
    if best is None:
        return True
    return value > best if monitor == "roc_auc" else value < best
