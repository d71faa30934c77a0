"""What a run records of its ensemble's predictions: metrics of the ensemble and of each
member, the 90 % intervals, and the parts of the blend (the network alone, the kernel
ridge alone). ``setattn train`` writes them to ``metrics.json``; a saved run's models
are scored again by the same function. The models run through
``setattn.molprop.inference``."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch_geometric.data import Data

from setattn.molprop import conformal
from setattn.molprop.batching import batches, stacked_targets
from setattn.molprop.inference import (
    ensemble_spread,
    forward_batches,
    interval_spread,
    member_predictions,
    spread,
    spread_kind,
)
from setattn.molprop.metrics import evaluate
from setattn.molprop.model import MoleculeModel

__all__ = ["component_metrics", "ensemble_scores"]


def component_metrics(models: Sequence[MoleculeModel], data: Sequence[Data], task: str,
                       names: Sequence[str], part: str) -> dict:
    """Metrics of the attention network alone (the mean of the members' predictions in
    target units or probabilities, as the ensemble averages them) and of the kernel
    ridge alone on ``data``."""
    y = stacked_targets(data, len(names))  # (M, T)
    batched = batches(data)
    net = torch.stack([m.to_units(forward_batches(m, batched, "network"))
                       for m in models]).mean(0)  # (M, T)
    kernel_out = forward_batches(models[0], batched, "kernel")  # (M, T)
    return {"attention": evaluate(y, net, task, names, part),
            "kernel_ridge": evaluate(y, models[0].to_units(models[0].kernel_as_outputs(
                kernel_out)), task, names, part)}


def _scaled_by(kind: str, models: Sequence[MoleculeModel]) -> str:
    if kind == conformal.KERNEL:
        return "scaled by the kernel ridge's posterior std"
    return "scaled by the ensemble's std" if len(models) > 1 else "constant width"


def ensemble_scores(models: Sequence[MoleculeModel], val: Sequence[Data],
                    test: Sequence[Data], task: str, names: Sequence[str],
                    kernel_info: dict | None = None) -> dict:
    """What ``metrics.json`` records of an ensemble's predictions on its validation and
    test parts.

    Args:
        models: the K members; val, test: the parts' molecules (``Data`` with ``y``).
        kernel_info: the kernel ridge's fit (``fit_kernel``), when the members blend one.

    Returns:
        ``test`` and ``val``: the metrics of the members' mean; ``member_test``: K test
        metrics; for regression ``uncertainty`` (90 % intervals calibrated on ``val``,
        scaled as ``inference.spread_kind`` says);
        with a kernel ridge ``components`` (the blend weight, ``kernel_info``, and the
        parts of the network alone and of the kernel ridge alone).
    """
    test_y = stacked_targets(test, len(names))  # (M_test, T)
    val_y = stacked_targets(val, len(names))  # (M_val, T)
    test_each = member_predictions(models, test)  # (K, M_test, T)
    test_mean, test_std = spread(test_each)  # (M_test, T) each
    val_mean, val_std = ensemble_spread(models, val)  # (M_val, T) each
    scores = {
        "test": evaluate(test_y, test_mean, task, names, "test part"),
        "val": evaluate(val_y, val_mean, task, names, "validation part"),
        "member_test": [evaluate(test_y, each, task, names, "test part") for each in test_each],
    }
    if task == "regression":
        kind = spread_kind(models)
        val_u = interval_spread(models, val, val_std, kind)  # (M_val, T)
        test_u = interval_spread(models, test, test_std, kind)  # (M_test, T)
        cal = conformal.calibrate(val_y, val_mean, val_u, spread=kind)
        scores["uncertainty"] = {
            "method": "split conformal on the validation part, " + _scaled_by(kind, models),
            "calibration": cal.to_dict(),
            "val": conformal.interval_report(val_y, val_mean, val_u, cal),
            "test": conformal.interval_report(test_y, test_mean, test_u, cal)}
    if kernel_info is not None:
        scores["components"] = {
            "blend": models[0].blend.tolist(), "kernel": kernel_info,
            **{name: component_metrics(models, part, task, names, f"{words} part")
               for name, part, words in (("val", val, "validation"), ("test", test, "test"))}}
    return scores
