"""What ``metrics.json`` records of a trained ensemble: the metrics of the members' mean
on the validation and test parts, each member's test metrics, the calibrated intervals
(regression) and, with a kernel part, the metrics of the networks alone and of the
kernel part alone.
"""

from __future__ import annotations

from collections.abc import Sequence

from torch_geometric.data import Data

from setattn.molprop import conformal
from setattn.molprop.batching import stacked_targets
from setattn.molprop.ensemble import Ensemble
from setattn.molprop.metrics import evaluate

__all__ = ["component_metrics", "ensemble_scores"]


def component_metrics(ensemble: Ensemble, data: Sequence[Data], task: str,
                      names: Sequence[str], part: str) -> dict:
    """Metrics of the networks alone (the mean of their predictions in target units or
    probabilities, as the ensemble averages them) and of the kernel part alone on
    ``data``."""
    y = stacked_targets(data, len(names))  # (M, T)
    return {"attention": evaluate(y, ensemble.network_predictions(data), task, names, part),
            "kernel_ridge": evaluate(y, ensemble.kernel_predictions(data), task, names, part)}


def _scaled_by(kind: str, ensemble: Ensemble) -> str:
    if kind == conformal.KERNEL:
        return "scaled by the kernel ridge's posterior std"
    return "scaled by the ensemble's std" if len(ensemble) > 1 else "constant width"


def ensemble_scores(ensemble: Ensemble, val: Sequence[Data], test: Sequence[Data], task: str,
                    names: Sequence[str], kernel_info: dict | None = None) -> dict:
    """What ``metrics.json`` records of an ensemble's predictions on its validation and
    test parts.

    Args:
        ensemble: the K members; val, test: the parts' molecules (``Data`` with ``y``).
        kernel_info: the kernel part's fit (``KernelPart.fit``), when it has one.

    Returns:
        ``test`` and ``val``: the metrics of the members' mean; ``member_test``: K test
        metrics; for regression ``uncertainty`` (90 % intervals calibrated on ``val``,
        scaled as ``Ensemble.spread_kind`` says);
        with a kernel part ``components`` (the networks' weight, ``kernel_info``, and
        the metrics of the networks alone and of the kernel part alone).
    """
    test_y = stacked_targets(test, len(names))  # (M_test, T)
    val_y = stacked_targets(val, len(names))  # (M_val, T)
    test_each = ensemble.member_predictions(test)  # (K, M_test, T)
    test_mean, test_std = test_each.mean(0), test_each.std(0, correction=0)  # (M_test, T)
    val_mean, val_std = ensemble.spread(val)  # (M_val, T) each
    scores = {
        "test": evaluate(test_y, test_mean, task, names, "test part"),
        "val": evaluate(val_y, val_mean, task, names, "validation part"),
        "member_test": [evaluate(test_y, each, task, names, "test part") for each in test_each],
    }
    if task == "regression":
        kind = ensemble.spread_kind()
        val_u = ensemble.interval_spread(val, val_std, kind)  # (M_val, T)
        test_u = ensemble.interval_spread(test, test_std, kind)  # (M_test, T)
        cal = conformal.calibrate(val_y, val_mean, val_u, spread=kind)
        scores["uncertainty"] = {
            "method": "split conformal on the validation part, " + _scaled_by(kind, ensemble),
            "calibration": cal.to_dict(),
            "val": conformal.interval_report(val_y, val_mean, val_u, cal),
            "test": conformal.interval_report(test_y, test_mean, test_u, cal)}
    if kernel_info is not None:
        scores["components"] = {
            "blend": ensemble.weight.tolist(), "kernel": kernel_info,
            **{name: component_metrics(ensemble, part, task, names, f"{words} part")
               for name, part, words in (("val", val, "validation"), ("test", test, "test"))}}
    return scores
