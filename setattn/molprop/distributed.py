"""Where a model runs: data-parallel training under ``torchrun`` (the little glue
``setattn train`` needs), and the device helpers (``model_device``, ``to_device``,
``autocast``).

    torchrun --standalone --nproc_per_node 2 -m setattn.cli train --data ... --output-dir DIR

``torchrun`` starts N copies of the command with ``RANK``, ``WORLD_SIZE`` and
``LOCAL_RANK`` in their environment. ``session(device)`` joins them into one process group
(NCCL when the device is a GPU, each process on ``cuda:$LOCAL_RANK``; gloo on the CPU);
without those variables it does nothing and the command runs as one ordinary process.
Several machines work as with any torchrun job (``--nnodes``, ``--rdzv-endpoint``); only
rank 0 needs the output directory, except that ``--resume`` reads its ``config.json`` on
every rank.

How the trainer divides the work (see ``setattn.molprop.loop.fit``):

- every rank reads and featurises the whole data set and draws the same shuffle
  (same seed); each global batch of ``batch_size`` molecules is dealt out round
  robin, rank r taking molecules r, r + N, r + 2N ... (``ShardBatchSampler``);
- the model is wrapped in ``DistributedDataParallel``, which averages gradients; each
  rank's loss is its share of the global batch's mean, so the update equals the one a
  single process takes on the whole global batch (up to float summation order);
- validation and test predictions are computed on a shard per rank and gathered
  (``gather_predictions``), so every rank sees the same metrics; rank 0's early-stopping
  decision is broadcast all the same;
- only rank 0 writes files (checkpoints, log, curve, metrics) and prints progress;
  on ``--resume`` rank 0 reads ``last.pt`` and broadcasts it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import torch
import torch.distributed as dist
from torch import Tensor, nn
from torch.utils.data import Sampler
from torch_geometric.data import Batch

from setattn.molprop.batching import MoleculeBatch

__all__ = ["ShardBatchSampler", "World", "all_reduce_sum", "autocast", "barrier", "broadcast",
           "gather_predictions", "model_device", "session", "shard", "to_device", "world"]

T = TypeVar("T")


@dataclass(frozen=True)
class World:
    """This process's place in the process group.

    Attributes:
        rank: 0 .. size - 1 (0 without a process group).
        size: number of processes (1 without a process group).
    """

    rank: int = 0
    size: int = 1

    @property
    def is_main(self) -> bool:
        """True on rank 0, the process that writes files and prints."""
        return self.rank == 0


def world() -> World:
    """The current process group's rank and size, ``World(0, 1)`` if there is none."""
    if dist.is_available() and dist.is_initialized():
        return World(dist.get_rank(), dist.get_world_size())
    return World()


def _launched_by_torchrun() -> bool:
    return int(os.environ.get("WORLD_SIZE", "1")) > 1 and "RANK" in os.environ


@contextmanager
def session(device: torch.device | None = None) -> Iterator[World]:
    """Join the process group ``torchrun`` describes in the environment, leave it at the
    end: NCCL on a CUDA ``device`` (made this process's current GPU), else gloo.

    Without ``RANK`` / ``WORLD_SIZE`` > 1 (a plain run), or inside a group that is
    already initialised, nothing is set up or torn down.

    Args:
        device: where this process trains (None: the CPU).

    Yields:
        This process's ``World``.
    """
    if not _launched_by_torchrun() or dist.is_initialized():
        yield world()
        return
    if device is not None and device.type == "cuda":
        torch.cuda.set_device(device)  # NCCL's collectives run on the current GPU
        dist.init_process_group(backend="nccl")
    else:
        dist.init_process_group(backend="gloo")
    try:
        yield world()
    finally:
        dist.destroy_process_group()


def barrier() -> None:
    """Wait for every rank (no-op in a single process)."""
    if world().size > 1:
        dist.barrier()


def broadcast(obj: T, src: int = 0) -> T:
    """Rank ``src``'s ``obj`` on every rank (``obj`` itself in a single process).

    The object travels pickled inside the process group; it never comes from a file.
    """
    if world().size == 1:
        return obj
    holder = [obj]
    dist.broadcast_object_list(holder, src=src)
    return holder[0]


def all_reduce_sum(value: float) -> float:
    """The sum of ``value`` over all ranks (``value`` in a single process)."""
    if world().size == 1:
        return value
    device = (torch.device("cuda", torch.cuda.current_device())
              if dist.get_backend() == "nccl" else torch.device("cpu"))  # NCCL: GPU tensors
    t = torch.tensor([value], dtype=torch.float64, device=device)  # (1,)
    dist.all_reduce(t)
    return float(t.item())


def shard(n: int, rank: int, size: int) -> range:
    """Rank ``rank``'s contiguous part of ``n`` items: sizes differ by at most one."""
    return range(rank * n // size, (rank + 1) * n // size)


def gather_predictions(fn: Callable[[Sequence[Any]], Tensor], items: Sequence[Any]) -> Tensor:
    """``fn(items)``, computed on one contiguous shard per rank and gathered in order.

    Args:
        fn: maps a list of M items to an (M, T) tensor, row m for item m.
        items: the M items (the same list on every rank).

    Returns:
        (M, T) the same on every rank.
    """
    w = world()
    if w.size == 1:
        return fn(items)
    part = shard(len(items), w.rank, w.size)
    local = fn([items[i] for i in part])  # (M_r, T)
    pieces: list[Tensor | None] = [None] * w.size
    dist.all_gather_object(pieces, local)
    return torch.cat(pieces)  # (M, T)


class ShardBatchSampler(Sampler[list[int]]):
    """This rank's share of each global batch of a ``BatchSampler``.

    Global batch ``b`` (indices i_0, i_1, ...) gives rank r the indices i_r, i_{r+N},
    ...; with N = 1 it is the global batch itself, so a single process sees exactly
    the batches of ``batch_sampler``. A rank whose share would be empty (a last
    global batch smaller than N) gets ``[i_0]`` as padding, which ``fit`` weights
    by zero: every rank must run a forward and backward pass per step.

    After each yielded share, ``current`` holds the whole global batch (read it in
    the training loop; it is valid with ``num_workers=0``, where the loader asks for
    the next indices only when the loop asks for the next batch).

    Args:
        batch_sampler: yields the global batches (lists of dataset indices).
        rank: this process's rank.
        size: number of ranks N.
    """

    def __init__(self, batch_sampler: Sampler[list[int]], rank: int, size: int):
        self.batch_sampler = batch_sampler
        self.rank, self.size = rank, size
        self.current: list[int] = []

    def __len__(self) -> int:
        return len(self.batch_sampler)  # type: ignore[arg-type]

    def __iter__(self) -> Iterator[list[int]]:
        for batch in self.batch_sampler:
            self.current = list(batch)
            yield self.current[self.rank::self.size] or self.current[:1]

    @property
    def padding(self) -> bool:
        """True when this rank's share of ``current`` is only padding."""
        return self.rank >= len(self.current)


def model_device(model: nn.Module) -> torch.device:
    """The device of a model's weights."""
    return next(model.parameters()).device


def to_device(batch: Batch | MoleculeBatch, device: torch.device) -> Batch | MoleculeBatch:
    """``batch`` (a PyG ``Batch`` or a training ``MoleculeBatch``) on ``device`` (itself,
    unchanged, when it is there already; PyG's ``Batch.to`` moves the tensors in place,
    so a batch reused every epoch moves once)."""
    return batch if batch.x.device == device else batch.to(device)


def autocast(device: torch.device, precision: str) -> AbstractContextManager:
    """The context of a training forward pass: nothing for fp32, bfloat16 autocast on
    ``device``'s type for bf16."""
    if precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=torch.bfloat16)
