"""The network's weight in a model's blend, fitted per task on the validation part.

A model with a kernel part predicts ``w * network + (1 - w) * kernel`` in target units
(or probabilities, for classification, where w stays 0.5). By default
(``network_weight="stacked"``) a regression model's weight w of each task is fitted once
the ensemble has trained: the least-squares weight
of the two parts' residuals on the validation part, with its step away from 0.5 shrunk
by its own standard error (``shrunk_weight``). A weight fitted on a few dozen molecules
stays near 0.5; one that the data clearly support is kept. The rule and the runs that
chose it are in ``docs/guide/defaults.rst``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor
from torch_geometric.data import Data

from setattn.molprop.batching import batches, stacked_targets
from setattn.molprop.inference import forward_batches
from setattn.molprop.model import KERNEL_BLEND, MoleculeModel

__all__ = ["fit_network_weights", "shrunk_weight", "task_weights", "validation_parts"]


def shrunk_weight(r_network: Tensor, r_kernel: Tensor, centre: float = KERNEL_BLEND) -> float:
    """The network's weight from the residuals (L,) of the two parts on labelled molecules.

    Starts from the unclipped least-squares weight ``w = argmin mean((w r_n + (1 - w)
    r_k)^2)``. Its step ``d = w - centre`` becomes ``d^3 / (d^2 + se^2)``, where
    ``se^2 = mean(e^2) / sum(g^2)`` (``g = r_n - r_k``, ``e = r_k + w g``) estimates the
    variance of w as a regression coefficient, and the result is clipped to [0, 1]. Parts
    that agree on every molecule give ``centre``.
    """
    r_network, r_kernel = r_network.double(), r_kernel.double()
    gap = r_network - r_kernel  # (L,)
    denominator = float(gap.square().sum())
    if denominator == 0.0:
        return centre
    w = -float((r_kernel * gap).sum()) / denominator
    se2 = float((r_kernel + w * gap).square().mean()) / denominator
    d = w - centre
    shrink = d * d / (d * d + se2) if d * d + se2 > 0 else 0.0
    return min(max(centre + shrink * d, 0.0), 1.0)


@torch.no_grad()
def validation_parts(models: Sequence[MoleculeModel], val: Sequence[Data]
                     ) -> tuple[Tensor, Tensor, Tensor]:
    """(M, T) targets, the network's predictions (the members' mean) and the kernel
    part's, in target units or probabilities, as ``predict`` averages them."""
    first = models[0]
    batched = batches(val)
    network = torch.stack([m.to_units(forward_batches(m, batched, "network"))
                           for m in models]).mean(0)  # (M, T)
    kernel = first.to_units(first.kernel_as_outputs(forward_batches(first, batched, "kernel")))
    return stacked_targets(val, first.config.num_tasks), network, kernel


def task_weights(y: Tensor, network: Tensor, kernel: Tensor,
                 weigh: Callable[[Tensor, Tensor], float] = shrunk_weight) -> Tensor:
    """(T,) float64 network weight of each task from targets y and the two parts'
    predictions (M, T): ``weigh`` of the residuals on the labelled molecules; a task
    without labels keeps ``KERNEL_BLEND``."""
    weights = []
    for t in range(y.shape[1]):
        known = ~torch.isnan(y[:, t])  # (M,)
        if not bool(known.any()):
            weights.append(KERNEL_BLEND)
            continue
        weights.append(weigh((y[:, t] - network[:, t])[known],
                             (y[:, t] - kernel[:, t])[known]))
    return torch.tensor(weights, dtype=torch.float64, device="cpu")


def fit_network_weights(models: Sequence[MoleculeModel], val: Sequence[Data]) -> Tensor:
    """(T,) float32 network weight of each task (``shrunk_weight``), fitted on the labelled
    molecules of ``val``; a task without labels keeps ``KERNEL_BLEND``."""
    return task_weights(*validation_parts(models, val)).float()
