"""Read a topology's host facts once, before a training loop, and move it to a device.

``attend`` needs some facts of a topology as Python numbers or host-built layouts: node
and edge counts, whether every set has one query, a dense topology's size buckets. They
are read from the index tensors the first time a call needs them and cached on the
topology. :func:`precompute` reads them all at once, where the data enter (a loader, a
collate function), and returns the topology on ``device`` with its caches moved along,
so that ``attend`` over it never reads a tensor back to the host: a CUDA stream never
waits on it, and ``meta`` tensors work.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import Tensor

from setattn.engine.dense import bucket_plan
from setattn.engine.plan import edge_view, one_query_per_set
from setattn.topology import Bipartite, Topology, Window


def precompute(topology: Topology, device: torch.device | str | None = None) -> Topology:
    """``topology`` with every fact ``attend`` reads cached, on ``device``.

    Args:
        topology: from :mod:`setattn.topology`, its index tensors on a device whose
            values can be read (CPU or an accelerator, not ``meta``).
        device: where the result's index tensors live (``"meta"`` included); the
            topology's own device when None.

    Returns:
        the same topology when ``device`` is its own, else a copy on ``device``; either
        way with node counts, edge count and layouts cached.
    """
    _read_facts(topology)
    if device is None or torch.device(device) == _device(topology):
        return topology
    return _moved(topology, torch.device(device))


def _read_facts(top: Topology) -> None:
    """Fill the topology's caches (the host reads happen here)."""
    _ = top.num_q, top.num_kv, top.num_edges
    if isinstance(top, Window):
        top.neighbours()
        edge_view(top)
    elif isinstance(top, Bipartite):
        if one_query_per_set(top):
            edge_view(top)
        else:
            bucket_plan(top)


def _device(top: Topology) -> torch.device:
    if isinstance(top, Bipartite):
        return top.ptr_q.device
    return top.ptr.device if isinstance(top, Window) else top.index.device


def _moved(obj: object, device: torch.device) -> object:
    """``obj`` with every tensor inside it (dataclass fields, lists, tuples, dicts) on
    ``device``; CSR layouts, which not every device holds, are left to be rebuilt."""
    if isinstance(obj, Tensor):
        return obj.to(device)
    if isinstance(obj, list | tuple):
        return type(obj)(_moved(o, device) for o in obj)
    if isinstance(obj, dict):
        return {k: _moved(v, device) for k, v in obj.items()
                if not (isinstance(k, tuple) and k and k[0] == "csr")}
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return type(obj)(**{f.name: _moved(getattr(obj, f.name), device)
                            for f in dataclasses.fields(obj)})
    return obj
