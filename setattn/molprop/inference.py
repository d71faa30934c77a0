"""Trained molecule models run forward over batches of molecules, without gradients.

One batch loop, ``forward_batches``, serves every reader of a model's outputs: training's
validation pass (``loop``: the attention network's outputs), the records of a finished
run (``reports``: the blend, the network alone, the kernel ridge alone) and predictions
(``predict``: the blend, for CSVs and lists of SMILES). On top of it:

- ``model_predictions``: one model's (M, T) predictions for a list of molecules;
- ``member_predictions``: an ensemble's (K, M, T), shared out over ``torchrun`` ranks;
- ``spread`` / ``ensemble_spread``: the members' mean and standard deviation;
- ``spread_kind`` / ``interval_spread``: what an ensemble's prediction intervals are
  scaled by (``setattn.molprop.conformal``), and that scale for given molecules.

Every result is on the CPU, whatever device the model is on.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from functools import partial

import torch
from torch import Tensor
from torch_geometric.data import Batch, Data

from setattn.molprop import distributed
from setattn.molprop.batching import batches
from setattn.molprop.conformal import ENSEMBLE, KERNEL, SPREADS
from setattn.molprop.device import model_device, to_device
from setattn.molprop.model import MoleculeModel

__all__ = ["HEADS", "ensemble_spread", "forward_batches", "interval_spread",
           "member_predictions", "model_predictions", "spread", "spread_kind"]

HEADS = ("prediction", "network", "kernel")
"""What ``forward_batches`` returns of a model: ``prediction`` (``MoleculeModel.predict``:
the network blended with its kernel ridge, in target units or probabilities),
``network`` (the attention network's forward pass: standardised regression values or
logits, what training optimises) or ``kernel`` (the kernel ridge alone, standardised)."""


def _head(model: MoleculeModel, head: str) -> Callable[[Batch], Tensor]:
    """The callable of ``model`` that ``head`` names (``HEADS``)."""
    if head == "prediction":
        return model.predict
    if head == "network":
        return model  # through __call__: forward hooks (``setattn.capture``) see it
    if head == "kernel":
        return model.kernel_outputs
    raise ValueError(f"head must be one of {HEADS}, got {head!r}")


@torch.no_grad()
def forward_batches(model: MoleculeModel, batched: Iterable[Batch],
                    head: str = "prediction") -> Tensor:
    """One model's outputs for the molecules of ``batched``, in order.

    Args:
        model: the model, on any device; it is put in eval mode.
        batched: batches of molecules (``batching.batches``), moved to the model's
            device in place.
        head: which output (``HEADS``).

    Returns:
        (M, T) on the CPU, M the molecules of all batches ((0, T) for none).

    Raises:
        ValueError: for an unknown ``head``.
    """
    call = _head(model, head)
    model.eval()
    device = model_device(model)
    outs = [call(to_device(batch, device)) for batch in batched]  # (G_b, T) each
    return torch.cat(outs).cpu() if outs else torch.zeros(0, model.config.num_tasks, device="cpu")


def model_predictions(model: MoleculeModel, data: Sequence[Data],
                      batch_size: int = 256) -> Tensor:
    """(M, T) predictions (target units or probabilities) of one model for M molecules,
    in order, on the CPU."""
    return forward_batches(model, batches(data, batch_size), "prediction")


def member_predictions(models: Sequence[MoleculeModel], data: Sequence[Data]) -> Tensor:
    """(K, M, T) each of the K models' predictions, computed by all ranks together (each
    predicts a shard; all get the whole)."""
    return torch.stack([distributed.gather_predictions(partial(model_predictions, m), data)
                        for m in models])


def spread(stacked: Tensor) -> tuple[Tensor, Tensor]:
    """Mean (M, T) and standard deviation (M, T, zeros for one model) over the K models of
    ``stacked`` (K, M, T)."""
    return stacked.mean(0), stacked.std(0, correction=0)


def ensemble_spread(models: Sequence[MoleculeModel], data: Sequence[Data]
                    ) -> tuple[Tensor, Tensor]:
    """Mean (M, T) and standard deviation (M, T) of the models' predictions (all ranks
    together)."""
    return spread(member_predictions(models, data))


def spread_kind(models: Sequence[MoleculeModel]) -> str:
    """What an ensemble's prediction intervals are scaled by: ``KERNEL`` (the kernel
    ridge's posterior std) for regression models that blend a kernel ridge, else
    ``ENSEMBLE`` (the spread of the members)."""
    first = models[0]
    return KERNEL if first.config.task == "regression" and first.kernel is not None else ENSEMBLE


def interval_spread(models: Sequence[MoleculeModel], data: Sequence[Data], std: Tensor,
                    kind: str) -> Tensor:
    """(M, T) the ``u`` of a calibration of ``kind`` (``setattn.molprop.conformal``): the
    ensemble's ``std`` (M, T) itself, or the first model's kernel ridge's posterior std
    at the descriptors of ``data`` (the members share one kernel ridge), on the CPU.

    Raises:
        ValueError: if ``kind`` is not ``ENSEMBLE`` or ``KERNEL``, or is ``KERNEL`` for
            models without a kernel ridge.
    """
    if kind not in SPREADS:
        raise ValueError(f"interval spread must be one of {SPREADS}, got {kind!r}")
    if kind == ENSEMBLE:
        return std
    if models[0].kernel is None:
        raise ValueError("intervals scaled by the kernel ridge's posterior std need a model "
                         "with a kernel ridge")
    if not data:
        return torch.zeros(0, std.shape[1], device="cpu")
    descriptors = torch.cat([d.descriptors for d in data])  # (M, F)
    u = models[0].kernel.posterior_std(descriptors).cpu()  # (M,)
    return u[:, None].expand(-1, std.shape[1]).contiguous()  # (M, T)
