"""ROC-AUC and average precision come from scikit-learn now: the numbers are those of the
hand-written implementation they replaced, ties and single-class tasks included."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from setattn.molprop import metrics


def _old_binary_curve(y, s):
    """The replaced implementation (setattn.molprop.metrics before scikit-learn)."""
    order = np.argsort(-s, kind="stable")
    s, y = s[order], y[order]
    last = np.r_[np.nonzero(np.diff(s))[0], y.size - 1]
    tps = np.cumsum(y)[last]
    return tps, last + 1 - tps


def _old_roc_auc(y, s):
    y, s = np.asarray(y, dtype=np.float64), np.asarray(s, dtype=np.float64)
    pos = y.sum()
    if pos == 0 or pos == y.size:
        return math.nan
    tps, fps = _old_binary_curve(y, s)
    tpr, fpr = np.r_[0.0, tps / pos], np.r_[0.0, fps / (y.size - pos)]
    return float(np.sum(np.diff(fpr) * (tpr[1:] + tpr[:-1]) / 2))


def _old_average_precision(y, s):
    y, s = np.asarray(y, dtype=np.float64), np.asarray(s, dtype=np.float64)
    pos = y.sum()
    if pos == 0:
        return math.nan
    tps, fps = _old_binary_curve(y, s)
    return float(np.sum(np.diff(np.r_[0.0, tps / pos]) * tps / (tps + fps)))


def _random_case(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 80))
    y = rng.integers(0, 2, n)
    # half the cases with many ties (scores on a coarse grid), half float32 probabilities
    s = (rng.integers(0, int(rng.integers(1, 8)), n) / 4.0 if seed % 2
         else rng.random(n).astype(np.float32).astype(np.float64))
    return y, s


@pytest.mark.parametrize("seed", range(300))
def test_same_numbers_as_the_replaced_implementation(seed):
    y, s = _random_case(seed)
    old_auc, new_auc = _old_roc_auc(y, s), metrics.roc_auc(y, s)
    old_ap, new_ap = _old_average_precision(y, s), metrics.average_precision(y, s)
    if math.isnan(old_auc):
        assert math.isnan(new_auc)
    else:
        assert abs(new_auc - old_auc) <= 1e-12
    if math.isnan(old_ap):
        assert math.isnan(new_ap)
    else:
        assert abs(new_ap - old_ap) <= 1e-12


def test_a_missing_class_gives_nan_without_a_warning(recwarn):
    assert math.isnan(metrics.roc_auc(np.array([1, 1, 1]), np.array([0.1, 0.5, 0.2])))
    assert math.isnan(metrics.roc_auc(np.array([0, 0]), np.array([0.1, 0.5])))
    assert math.isnan(metrics.average_precision(np.array([0, 0]), np.array([0.1, 0.5])))
    # positives only: average precision is defined (1), ROC-AUC is not
    assert metrics.average_precision(np.array([1, 1]), np.array([0.1, 0.5])) == 1.0
    assert not [w for w in recwarn if "sklearn" in str(w.filename)]


def test_classification_metrics_unchanged_on_tasks_with_missing_labels():
    rng = np.random.default_rng(7)
    y = torch.tensor(rng.integers(0, 2, (50, 3)), dtype=torch.float32)  # (M, T)
    y[rng.random((50, 3)) < 0.3] = float("nan")
    y[:, 2] = torch.where(torch.isnan(y[:, 2]), y[:, 2], torch.zeros(50))  # one class only
    p = torch.tensor(rng.integers(0, 5, (50, 3)) / 4.0, dtype=torch.float32)  # ties
    result = metrics.classification_metrics(y, p, ["a", "b", "c"])
    expected = []
    for t, name in enumerate("ab"):
        mask = ~torch.isnan(y[:, t])
        yt, pt = y[mask, t].numpy(), p[mask, t].double().numpy()
        assert result["per_task"][name]["roc_auc"] == pytest.approx(_old_roc_auc(yt, pt),
                                                                    abs=1e-12)
        assert result["per_task"][name]["pr_auc"] == pytest.approx(
            _old_average_precision(yt, pt), abs=1e-12)
        expected.append(_old_roc_auc(yt, pt))
    assert math.isnan(result["per_task"]["c"]["roc_auc"])
    assert result["roc_auc"] == pytest.approx(np.mean(expected), abs=1e-12)


def test_one_class_tasks_gives_the_reasons_classification_metrics_will_give():
    nan = math.nan
    y = torch.tensor([[0.0, 1.0, nan, 0.0], [1.0, 1.0, nan, 0.0], [0.0, nan, nan, 0.0]])
    names = ["mixed", "ones", "empty", "zeros"]
    reasons = metrics.one_class_tasks(y, names, "test part")
    assert reasons == ["task 'ones': only class 1 in the test part (2 label(s))",
                       "task 'empty': no label in the test part",
                       "task 'zeros': only class 0 in the test part (3 label(s))"]
    scored = metrics.classification_metrics(y, torch.rand(3, 4), names, "test part")
    assert [scored["per_task"][n]["roc_auc_undefined"] for n in names[1:]] == reasons
    assert metrics.one_class_tasks(y[:, :1], names[:1]) == []
