"""The molecule model: K attention networks, one kernel part, one stacking weight.

::

    Ensemble(networks=[MoleculeNetwork, ...],      K networks trained on the same split
             kernel=KernelPart | None,             descriptor + fingerprint kernel ridges
             weight=(T,) | ())                     the networks' weight against the kernel

Member k's prediction, in target units (regression) or as a probability
(classification), is the stack of its network and the kernel part::

    regression:      units(w net_k + (1 - w) kernel)              (standardised inside)
    classification:  w sigmoid(net_k) + (1 - w) sigmoid(logit(clamp(kernel)))

and the ensemble predicts the members' mean, with their standard deviation as a spread.
The kernel part is evaluated once per batch, whatever K. Without a kernel part the
weight is 1: the networks alone. A regression run fits w per task on the validation part
(``fit_network_weight``: ``setattn.molprop.stacking.stack_weight``, shrunk toward
``NETWORK_WEIGHT``); classification keeps ``NETWORK_WEIGHT``.

Parts are passed in, not built from flags: another network or another kernel part plugs
in by giving it here. Every result of the prediction methods is on the CPU, whatever
device the parts are on.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.data import Batch, Data

from setattn.molprop import distributed
from setattn.molprop.batching import batches, stacked_targets
from setattn.molprop.conformal import ENSEMBLE, KERNEL, SPREADS
from setattn.molprop.distributed import model_device, to_device
from setattn.molprop.kernels import KernelPart
from setattn.molprop.network import MoleculeNetwork
from setattn.molprop.stacking import stack_weight

__all__ = ["NETWORK_WEIGHT", "Ensemble", "fit_network_weight", "forward_batches", "task_weights"]

NETWORK_WEIGHT = 0.5
"""The networks' weight against the kernel part where it is not fitted (classification,
``--network-weight fixed``), and the centre a fitted weight is shrunk toward."""


@torch.no_grad()
def forward_batches(call, batched: Iterable[Batch], device: torch.device,
                    num_tasks: int) -> Tensor:
    """``call(batch)`` for each batch of ``batched`` (moved to ``device`` in place),
    concatenated along the molecules: (M, ...) on the CPU ((0, num_tasks) for none)."""
    outs = [call(to_device(batch, device)) for batch in batched]
    return torch.cat(outs).cpu() if outs else torch.zeros(0, num_tasks, device="cpu")


class Ensemble(nn.Module):
    """K attention networks, an optional kernel part, and the networks' weight.

    Args:
        networks: the K trained networks (one task, target count and descriptor width).
        kernel: the fitted kernel part, or None.
        weight: the networks' weight, () or (T,); default ``NETWORK_WEIGHT`` with a
            kernel part, else 1.

    Raises:
        ValueError: for no network, or networks of different kinds.
    """

    def __init__(self, networks: Sequence[MoleculeNetwork], kernel: KernelPart | None = None,
                 weight: Tensor | None = None):
        super().__init__()
        networks = list(networks)
        if not networks:
            raise ValueError("an ensemble needs at least one network")
        first = networks[0].config
        for k, net in enumerate(networks[1:], 1):
            c = net.config
            if (c.task, c.num_tasks, c.descriptor_dim) != (first.task, first.num_tasks,
                                                           first.descriptor_dim):
                raise ValueError(f"network {k} is not of network 0's kind (task, tasks and "
                                 f"descriptors differ)")
        if kernel is not None:
            k = kernel.config
            if (k.task, k.num_tasks, k.descriptor_dim) != (first.task, first.num_tasks,
                                                           first.descriptor_dim):
                raise ValueError(f"the kernel part ({k.task}, {k.num_tasks} task(s), "
                                 f"{k.descriptor_dim} descriptors) does not fit the networks "
                                 f"({first.task}, {first.num_tasks} task(s), "
                                 f"{first.descriptor_dim} descriptors)")
        self.networks = nn.ModuleList(networks)
        self.kernel = kernel
        if weight is None:
            weight = torch.tensor(NETWORK_WEIGHT if kernel is not None else 1.0, device="cpu")
        self.register_buffer("weight", weight.float().clone())  # () or (T,)

    def __len__(self) -> int:
        return len(self.networks)

    def member(self, k: int) -> Ensemble:
        """Member k alone: its network with the same kernel part and weight (shared, not
        copied), as an ensemble of one."""
        return Ensemble([self.networks[k]], self.kernel, self.weight)

    @property
    def task(self) -> str:
        return self.networks[0].config.task

    @property
    def num_tasks(self) -> int:
        return self.networks[0].config.num_tasks

    @property
    def descriptor_dim(self) -> int:
        return self.networks[0].config.descriptor_dim

    def uses_fingerprints(self) -> bool:
        """Whether predictions read Morgan count fingerprints (the kernel part's)."""
        return self.kernel is not None and self.kernel.uses_fingerprints()

    def _stacked(self, out: Tensor, kernel: Tensor | None) -> Tensor:
        """(G, T) one network's outputs (standardised, or logits) stacked with the kernel
        part's (``KernelPart.as_outputs``), in the same units."""
        if kernel is None:
            return out
        w = self.weight
        if self.task == "regression":
            return w * out + (1 - w) * kernel  # (G, T)
        p = w * torch.sigmoid(out) + (1 - w) * torch.sigmoid(kernel)
        return torch.logit(p)  # (G, T); p lies in (0, 1): the kernel's part is clamped

    def member_outputs(self, batch: Batch) -> Tensor:
        """(K, G, T) each member's stacked prediction in the networks' units
        (standardised regression values, or logits), differentiable; the kernel part
        evaluated once."""
        kernel = None
        if self.kernel is not None:
            kernel = self.kernel.as_outputs(self.kernel(batch))  # (G, T)
        return torch.stack([self._stacked(net(batch), kernel) for net in self.networks])

    def forward(self, batch: Batch) -> Tensor:
        """(G, T) the ensemble's prediction, differentiable (what ``explain`` attributes):
        the members' mean in target units (regression), or the logit of their mean
        probability (classification)."""
        outs = self.member_outputs(batch)  # (K, G, T)
        if self.task == "regression":
            return torch.stack([net.to_units(o) for net, o in zip(self.networks, outs)]).mean(0)
        if len(outs) == 1:
            return outs[0]
        # log(mean p) - log(mean (1 - p)) in log space: logit(mean(sigmoid)) in float32
        # loses the logit of a probability near 0 or 1 (IG then no longer sums)
        return (torch.logsumexp(F.logsigmoid(outs), 0)
                - torch.logsumexp(F.logsigmoid(-outs), 0))  # (G, T)

    @torch.no_grad()
    def member_units(self, batch: Batch) -> Tensor:
        """(K, G, T) each member's prediction in target units or probabilities."""
        outs = self.member_outputs(batch)  # (K, G, T)
        return torch.stack([net.to_units(o) for net, o in zip(self.networks, outs)])

    def _over(self, call, data: Sequence[Data], batch_size: int) -> Tensor:
        device = model_device(self)
        self.eval()
        return forward_batches(call, batches(data, batch_size), device, self.num_tasks)

    def member_predictions(self, data: Sequence[Data], batch_size: int = 256) -> Tensor:
        """(K, M, T) each member's predictions for M molecules, in order, computed by all
        ``torchrun`` ranks together (each predicts a shard; all get the whole)."""
        def members(items: Sequence[Data]) -> Tensor:  # (M_r, K, T)
            if not items:
                return torch.zeros(0, len(self), self.num_tasks, device="cpu")
            return self._over(lambda b: self.member_units(b).transpose(0, 1), items,
                              batch_size)
        return distributed.gather_predictions(members, data).transpose(0, 1).contiguous()

    def spread(self, data: Sequence[Data]) -> tuple[Tensor, Tensor]:
        """Mean (M, T) and standard deviation (M, T, zeros for one member) of the members'
        predictions."""
        stacked = self.member_predictions(data)  # (K, M, T)
        return stacked.mean(0), stacked.std(0, correction=0)

    @property
    def vector_width(self) -> int:
        """2 D, the width of one member's molecule vector (``MoleculeNetwork.encode``)."""
        return 2 * self.networks[0].config.hidden

    @torch.no_grad()
    def member_vectors(self, data: Sequence[Data], batch_size: int = 256) -> Tensor:
        """(M, K, 2 D) each member's molecule vectors (``MoleculeNetwork.encode``) for M
        molecules, in order ((0, K, 2 D) for none)."""
        if not data:
            return torch.zeros(0, len(self), self.vector_width, device="cpu")
        return self._over(lambda b: torch.stack([net.encode(b) for net in self.networks], 1),
                          data, batch_size)

    @torch.no_grad()
    def network_predictions(self, data: Sequence[Data]) -> Tensor:
        """(M, T) the networks alone: the mean of their predictions in target units or
        probabilities."""
        def each(batch: Batch) -> Tensor:  # (G, T)
            return torch.stack([net.to_units(net(batch)) for net in self.networks]).mean(0)
        return self._over(each, data, 256)

    @torch.no_grad()
    def kernel_predictions(self, data: Sequence[Data]) -> Tensor:
        """(M, T) the kernel part alone, in target units or probabilities.

        Raises:
            ValueError: for an ensemble without a kernel part.
        """
        if self.kernel is None:
            raise ValueError("this ensemble has no kernel part")
        first = self.networks[0]
        return self._over(lambda b: first.to_units(self.kernel.as_outputs(self.kernel(b))),
                          data, 256)

    def spread_kind(self) -> str:
        """What the prediction intervals are scaled by: ``KERNEL`` (the kernel part's
        posterior std) for regression with a kernel part, else ``ENSEMBLE`` (the
        members' spread)."""
        return KERNEL if self.task == "regression" and self.kernel is not None else ENSEMBLE

    def interval_spread(self, data: Sequence[Data], std: Tensor, kind: str) -> Tensor:
        """(M, T) the ``u`` of a calibration of ``kind`` (``setattn.molprop.conformal``):
        the members' ``std`` (M, T) itself, or the kernel part's posterior std at the
        descriptors of ``data``, on the CPU.

        Raises:
            ValueError: if ``kind`` is not ``ENSEMBLE`` or ``KERNEL``, or is ``KERNEL``
                without a kernel part.
        """
        if kind not in SPREADS:
            raise ValueError(f"interval spread must be one of {SPREADS}, got {kind!r}")
        if kind == ENSEMBLE:
            return std
        if self.kernel is None:
            raise ValueError("intervals scaled by the kernel ridge's posterior std need a "
                             "model with a kernel ridge")
        if not data:
            return torch.zeros(0, std.shape[1], device="cpu")
        descriptors = torch.cat([d.descriptors for d in data])  # (M, F)
        u = self.kernel.descriptor.posterior_std(descriptors).cpu()  # (M,)
        return u[:, None].expand(-1, std.shape[1]).contiguous()  # (M, T)


def task_weights(y: Tensor, a: Tensor, b: Tensor, centre: float, shrink: bool) -> Tensor:
    """(T,) float64 weight of part a against part b for each task: ``stack_weight`` of
    their residuals on the labelled molecules of (M, T) targets ``y`` and predictions
    ``a``, ``b``; a task without labels gets ``centre``."""
    weights = []
    for t in range(y.shape[1]):
        known = ~torch.isnan(y[:, t])  # (M,)
        if not bool(known.any()):
            weights.append(centre)
            continue
        weights.append(stack_weight((y[:, t] - a[:, t])[known], (y[:, t] - b[:, t])[known],
                                    centre, shrink))
    return torch.tensor(weights, dtype=torch.float64, device="cpu")


def fit_network_weight(ensemble: Ensemble, val: Sequence[Data]) -> Tensor:
    """(T,) float32 networks' weight of each task, fitted on the labelled molecules of
    ``val``: ``task_weights`` of the networks (their mean) against the kernel part,
    shrunk toward ``NETWORK_WEIGHT``; a task without labels keeps it.

    Raises:
        ValueError: for an ensemble without a kernel part.
    """
    y = stacked_targets(val, ensemble.num_tasks)  # (M, T)
    return task_weights(y, ensemble.network_predictions(val), ensemble.kernel_predictions(val),
                        NETWORK_WEIGHT, shrink=True).float()
