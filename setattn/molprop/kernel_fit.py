"""The kernel ridges of a molecule run, fitted once before its networks train.

``fit_kernel`` fits the descriptor kernel ridge (``setattn.molprop.kernel``) and, where
the model config asks for it, the fingerprint kernel ridge
(``setattn.molprop.fingerprint_kernel``) on the same searched molecules, and stacks the
two by their leave-one-out residuals. ``Kernels.load_into`` copies the result into each
ensemble member.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor
from torch_geometric.data import Data

from setattn.molprop import distributed
from setattn.molprop.batching import stacked_targets
from setattn.molprop.fingerprint_kernel import FingerprintRidge, stack_weights
from setattn.molprop.kernel import KernelRidge
from setattn.molprop.model import MoleculeModel, MoleculeModelConfig, target_scaling

__all__ = ["Kernels", "fit_kernel"]


@dataclass
class Kernels:
    """The kernel ridges of a run's models, fitted once and copied into every member:
    the descriptor one and, with ``fingerprint_kernel``, the fingerprint one and the
    (T,) weight of the descriptor one in their stack."""

    descriptor: KernelRidge
    fingerprint: FingerprintRidge | None = None
    mix: Tensor | None = None

    def load_into(self, model: MoleculeModel) -> None:
        """Copy the fitted kernel ridges into ``model`` (built with the run's config)."""
        model.kernel.load_state_dict(self.descriptor.state_dict())
        if self.fingerprint is not None:
            model.fingerprint_kernel.load_state_dict(self.fingerprint.state_dict())
            model.kernel_mix.copy_(self.mix)


def fit_kernel(train: Sequence[Data], config: MoleculeModelConfig,
               names: Sequence[str], **search: object) -> tuple[Kernels, dict]:
    """The kernel ridges of a model, fitted to its standardised training targets
    (regression) or to the 0/1 labels (classification); ``search`` goes to
    ``KernelRidge.fit`` (``grid``, ``ridges``: the library's defaults without it).
    With ``config.fingerprint_kernel`` the fingerprint kernel ridge is fitted on the
    same searched rows, and the two are stacked by leave-one-out (``stack_weights``).

    Raises:
        ValueError: naming a target column without any training label.

    Returns:
        The fitted ``Kernels`` and ``{"kernel", "gamma", "ridge", "loo_rmse",
        "seconds"}``, with a fingerprint kernel also ``"fingerprint"``: its
        ``{"ridge", "loo_rmse"}`` and ``"descriptor_weight"`` per task.
    """
    start = time.perf_counter()
    y = stacked_targets(train)  # (M, T)
    if config.task == "regression":
        mean, std = target_scaling(y)
        y = (y - mean) / std  # (M, T)
    kernel = KernelRidge(len(train), config.descriptor_dim, config.num_tasks)
    info = kernel.fit(torch.cat([d.descriptors for d in train]), y, names,
                      progress=distributed.world().is_main, **search)
    kernels = Kernels(kernel)
    if config.fingerprint_kernel:
        if any("fingerprint" not in d for d in train):
            raise ValueError("the fingerprint kernel ridge needs Morgan count fingerprints "
                             "(featurise the molecules with descriptors)")
        kernels.fingerprint = FingerprintRidge(len(train), config.num_tasks)
        fp_info, residuals = kernels.fingerprint.fit(
            torch.cat([d.fingerprint for d in train]), y, kernel.searched)
        weights = stack_weights(kernel.loo_residuals, residuals)
        kernels.mix = torch.tensor(weights, device=kernel.alpha.device)  # (T,)
        info = {**info, "fingerprint": fp_info, "descriptor_weight": weights}
    return kernels, {**info, "seconds": time.perf_counter() - start}
