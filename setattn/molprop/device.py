"""Where molecule models run: ``--device auto|cpu|cuda[:N]`` and ``--precision fp32|bf16``.

Molecules are featurised and batched on the CPU; each batch moves to the model's device
just before its forward pass (``to_device``), and what comes back for metrics and files
moves back to the CPU. Checkpoints always hold CPU tensors (``setattn.molprop.checkpoint``)
and are loaded straight onto the device asked for, so a run trained on one device
predicts on any other.

Under ``torchrun`` a bare ``cuda`` (or ``auto`` with GPUs present) means this process's
own GPU, ``cuda:$LOCAL_RANK``.
"""

from __future__ import annotations

import contextlib
import os
import re
from contextlib import AbstractContextManager

import torch
from torch import nn
from torch_geometric.data import Batch

from setattn.molprop.options import SettingError

__all__ = ["DEVICE_HELP", "PRECISIONS", "autocast", "check_device", "model_device",
           "resolve_device", "to_device"]

DEVICE_HELP = ("where the model runs: auto (CUDA when available, else the CPU), cpu, cuda "
               "or cuda:N")

PRECISIONS = ("fp32", "bf16")
"""fp32, or bfloat16 autocast of the training forward passes (weights, optimiser and
evaluation stay float32)."""

_DEVICE = re.compile(r"auto|cpu|cuda(:\d+)?")


def check_device(spec: str) -> None:
    """Raises SettingError naming ``device`` unless ``spec`` is auto, cpu, cuda or cuda:N."""
    if not isinstance(spec, str) or not _DEVICE.fullmatch(spec):
        raise SettingError("device", f"must be auto, cpu, cuda or cuda:N, got {spec!r}")


def _no_cuda_reason() -> str:
    if torch.version.cuda is None:
        return f"this PyTorch ({torch.__version__}) is built without CUDA"
    return "no CUDA device is visible"


def resolve_device(spec: str) -> torch.device:
    """The ``torch.device`` of a ``--device`` value.

    Args:
        spec: "auto" (CUDA when available, else the CPU), "cpu", "cuda" (under
            torchrun ``cuda:$LOCAL_RANK``, else ``cuda:0``) or "cuda:N".

    Raises:
        SettingError: naming ``device`` for another value, for CUDA asked for where
            there is none, or for a GPU index out of range.
    """
    check_device(spec)
    if spec == "cpu" or (spec == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise SettingError("device", f"{spec} asked for, but {_no_cuda_reason()}; use cpu "
                           f"(or auto)", colon=True)
    index = int(spec.split(":")[1]) if ":" in spec else int(os.environ.get("LOCAL_RANK", 0))
    if index >= torch.cuda.device_count():
        raise SettingError("device", f"{spec}: there are only "
                           f"{torch.cuda.device_count()} CUDA device(s)", colon=True)
    return torch.device("cuda", index)


def model_device(model: nn.Module) -> torch.device:
    """The device of a model's weights."""
    return next(model.parameters()).device


def to_device(batch: Batch, device: torch.device) -> Batch:
    """``batch`` on ``device`` (itself, unchanged, when it is there already; PyG's
    ``Batch.to`` moves the tensors in place, so a batch reused every epoch moves once)."""
    return batch if batch.x.device == device else batch.to(device)


def autocast(device: torch.device, precision: str) -> AbstractContextManager:
    """The context of a training forward pass: nothing for fp32, bfloat16 autocast on
    ``device``'s type for bf16."""
    if precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=torch.bfloat16)
