"""Who attends to whom.

A topology says, for every query node i, which key/value nodes j it may attend to
(an edge j -> i). Four kinds cover the library:

* :func:`complete` - every item of a set attends to every item of the same set
  (intra / self attention over a batch of sets).
* :func:`bipartite` - the queries of set g attend to the items of set g of another
  batch (cross attention, pooling with seed vectors).
* :func:`window` - sequence positions within ``radius`` of each other (local attention).
* :func:`edges` - an explicit edge list in PyG order: ``edge_index[0]`` is the source j
  (the key), ``edge_index[1]`` the target i (the query). :func:`pooling` is the edge
  list of attention pooling (node j -> its graph ``index[j]``), built from PyG's
  ``index`` without reading it (no host synchronisation, nothing for torch.compile to
  break on).

The first three are *dense*: the engine computes them over padded blocks and never
builds the all-pairs edge list unless weights are requested. Every topology has a
canonical edge order, used for per-edge ``bias``/``mask`` tensors and for returned
weights: for dense kinds it is target-major (set by set, query by query), sources
ascending. ``edge_index()`` materialises that order.

Host reads. The constructors check their inputs where data enter (``validate=True``:
offsets start at 0 and never decrease, edge indices lie in range), which reads index
values back to the host. The facts the engine needs as Python numbers (node counts, a
dense topology's size buckets) are read once per topology and cached on it;
``setattn.engine.prepare`` reads them all up front and moves the topology to a device,
so that ``attend`` over it reads nothing back (a CUDA stream never waits; ``meta``
tensors work). ``validate=False`` with ``num_nodes`` / ``max_size`` given builds a
topology without reading anything: what a layer's forward pass does.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor


def _long(t: Tensor | list[int]) -> Tensor:
    """A long tensor: a tensor keeps its device, a Python list goes to the CPU."""
    return t.long() if isinstance(t, Tensor) else torch.as_tensor(t, dtype=torch.long)


def ptr_from_sizes(sizes: Tensor | list[int]) -> Tensor:
    """Offsets of consecutive sets: sizes (G,) -> ptr (G + 1,) with ptr[0] = 0."""
    sizes = _long(sizes)
    return torch.cat([sizes.new_zeros(1), sizes.cumsum(0)])


def ptr_from_batch(batch: Tensor, num_graphs: int | None = None, *,
                   validate: bool = True) -> Tensor:
    """PyG's sorted ``batch`` vector (N,) -> ptr (G + 1,).

    Args:
        batch: (N,) graph index of every node, sorted ascending (as PyG builds it).
        num_graphs: G; inferred as ``batch.max() + 1`` when omitted (empty graphs at
            the end of a batch need it given).
        validate: check that ``batch`` is sorted and within [0, G) (reads it back to the
            host); with ``num_graphs`` given and ``validate=False`` nothing is read.
    """
    if num_graphs is None:
        num_graphs = int(batch.max()) + 1 if batch.numel() else 0
    if validate:
        _check_batch(batch, num_graphs)
    sizes = batch.new_zeros(num_graphs).index_add_(0, batch, torch.ones_like(batch))  # (G,)
    return ptr_from_sizes(sizes)


def _check_batch(batch: Tensor, num_graphs: int) -> None:
    """Sorted, and every graph index in [0, num_graphs)."""
    if batch.numel() > 1 and bool((batch[1:] < batch[:-1]).any()):
        raise ValueError("batch must be sorted ascending (PyG's convention)")
    if batch.numel() and (int(batch[0]) < 0 or int(batch[-1]) >= num_graphs):
        raise ValueError(f"batch holds graphs outside [0, {num_graphs}) (num_graphs too small?)")


def _check_ptr(ptr: Tensor, name: str, validate: bool = True) -> Tensor:
    """``ptr`` as a long tensor; its values checked when ``validate`` (a host read)."""
    ptr = _long(ptr)
    if ptr.dim() != 1 or ptr.numel() < 1:
        raise ValueError(f"{name} must be 1-D offsets starting at 0, got shape "
                         f"{tuple(ptr.shape)}")
    if not validate:
        return ptr
    if int(ptr[0]) != 0:
        raise ValueError(f"{name} must be 1-D offsets starting at 0, got {ptr.tolist()[:8]}")
    if bool((ptr[1:] < ptr[:-1]).any()):
        raise ValueError(f"{name} must be non-decreasing")
    return ptr


@dataclass(frozen=True, eq=False)
class Bipartite:
    """Queries of set g attend to every key of set g.

    Attributes:
        ptr_q: (G + 1,) query offsets.
        ptr_kv: (G + 1,) key/value offsets.
        max_sizes: (Lq, Lk), bounds on every set's query and key count given by the
            caller, or None. Given, the dense paths pad every set to them in one bucket
            (no size is read back from ``ptr``); a set larger than its bound is an error
            the engine cannot see, so the bounds must hold.
    """

    ptr_q: Tensor
    ptr_kv: Tensor
    _cache: dict = field(default_factory=dict, repr=False)
    max_sizes: tuple[int, int] | None = None

    @property
    def num_q(self) -> int:
        """Nq, read from ``ptr_q`` once (or given as ``num_nodes``)."""
        if "num_q" not in self._cache:
            self._cache["num_q"] = int(self.ptr_q[-1])
        return self._cache["num_q"]

    @property
    def num_kv(self) -> int:
        """Nk, read from ``ptr_kv`` once (or given as ``num_nodes``)."""
        if "num_kv" not in self._cache:
            self._cache["num_kv"] = int(self.ptr_kv[-1])
        return self._cache["num_kv"]

    @property
    def sizes_q(self) -> Tensor:
        return self.ptr_q[1:] - self.ptr_q[:-1]  # (G,)

    @property
    def sizes_kv(self) -> Tensor:
        return self.ptr_kv[1:] - self.ptr_kv[:-1]  # (G,)

    @property
    def num_edges(self) -> int:
        """E, read once."""
        if "num_edges" not in self._cache:
            self._cache["num_edges"] = int((self.sizes_q * self.sizes_kv).sum())
        return self._cache["num_edges"]

    def edge_offsets(self) -> Tensor:
        """(G + 1,) offset of each set's first edge in the canonical order."""
        return ptr_from_sizes(self.sizes_q * self.sizes_kv)

    def edge_index(self) -> Tensor:
        """All pairs, target-major: (2, E) with row 0 = source j, row 1 = target i."""
        if "edge_index" in self._cache:
            return self._cache["edge_index"]
        device = self.ptr_q.device
        if bool((self.sizes_q == 1).all()):
            # one query per set (pooling): key j -> the query of its set, keys ascending
            graph = torch.repeat_interleave(torch.arange(self.sizes_kv.numel(), device=device),
                                            self.sizes_kv)  # (E,) = (Nk,)
            keys = torch.arange(graph.numel(), device=device)  # (E,)
            self._cache["edge_index"] = torch.stack([keys, graph])
        else:
            nq, nk = self.sizes_q, self.sizes_kv
            per_set = nq * nk  # (G,)
            graph = torch.repeat_interleave(torch.arange(nq.numel(), device=device),
                                            per_set)  # (E,)
            pair = torch.arange(int(per_set.sum()), device=device)  # (E,)
            local = pair - self.edge_offsets()[:-1][graph]  # (E,)
            tgt = self.ptr_q[graph] + torch.div(local, nk[graph], rounding_mode="floor")
            src = self.ptr_kv[graph] + local % nk[graph].clamp_min(1)
            self._cache["edge_index"] = torch.stack([src, tgt])
        return self._cache["edge_index"]


@dataclass(frozen=True, eq=False)
class Complete(Bipartite):
    """Every item of a set attends to every item of the same set (self loops included)."""


@dataclass(frozen=True, eq=False)
class Window:
    """Items of a sequence attend to items at most ``radius`` positions away in the same set.

    Attributes:
        ptr: (G + 1,) set offsets.
        radius: r >= 0; each query sees up to 2r + 1 keys (itself included).
    """

    ptr: Tensor
    radius: int
    _cache: dict = field(default_factory=dict, repr=False)

    @property
    def num_q(self) -> int:
        """N, read from ``ptr`` once (or given as ``num_nodes``)."""
        if "num_q" not in self._cache:
            self._cache["num_q"] = int(self.ptr[-1])
        return self._cache["num_q"]

    num_kv = num_q

    def neighbours(self) -> tuple[Tensor, Tensor]:
        """Key index and validity for every query and window slot.

        Returns:
            index: (N, 2r + 1) key node of slot w of query i (clamped into range).
            valid: (N, 2r + 1) whether that key is inside the query's set.
        """
        if "neighbours" not in self._cache:
            n, device = self.num_q, self.ptr.device
            sizes = self.ptr[1:] - self.ptr[:-1]  # (G,)
            graph = torch.repeat_interleave(torch.arange(sizes.numel(), device=device),
                                            sizes, output_size=n)  # (N,)
            start, stop = self.ptr[:-1][graph], self.ptr[1:][graph]  # (N,), (N,)
            offsets = torch.arange(-self.radius, self.radius + 1, device=device)  # (W,)
            index = torch.arange(n, device=device)[:, None] + offsets[None, :]  # (N, W)
            valid = (index >= start[:, None]) & (index < stop[:, None])  # (N, W)
            index = index.clamp(0, max(n - 1, 0))
            self._cache["neighbours"] = (index, valid)
        return self._cache["neighbours"]

    @property
    def num_edges(self) -> int:
        """E, read once."""
        if "num_edges" not in self._cache:
            self._cache["num_edges"] = int(self.neighbours()[1].sum())
        return self._cache["num_edges"]

    def edge_index(self) -> Tensor:
        """Window pairs, target-major, sources ascending: (2, E)."""
        index, valid = self.neighbours()
        tgt = torch.arange(self.num_q, device=index.device)[:, None].expand_as(index)  # (N, W)
        return torch.stack([index[valid], tgt[valid]])


@dataclass(frozen=True, eq=False)
class Edges:
    """An explicit edge list, PyG order: edge j -> i means query i attends to key j.

    Attributes:
        index: (2, E) long; row 0 = source j (key/value), row 1 = target i (query).
        num_q: number of query (target) nodes.
        num_kv: number of key/value (source) nodes.
        bipartite: sources and targets are different node sets even when their counts
            agree (:func:`pooling`: graph g is not node g); otherwise they are the same
            set exactly when ``num_q == num_kv``.
    """

    index: Tensor
    num_q: int
    num_kv: int
    bipartite: bool = False
    _cache: dict = field(default_factory=dict, repr=False)

    @property
    def num_edges(self) -> int:
        return int(self.index.shape[1])

    def edge_index(self) -> Tensor:
        """The edge list itself, (2, E), in the caller's order."""
        return self.index


Topology = Bipartite | Window | Edges


def _given_counts(top: Bipartite | Window, num_q: int | None, num_kv: int | None):
    """Record node counts the caller knows, so that they are never read from ``ptr``."""
    if num_q is not None:
        top._cache["num_q"] = int(num_q)
    if num_kv is not None and not isinstance(top, Window):
        top._cache["num_kv"] = int(num_kv)
    return top


def complete(ptr: Tensor | list[int], num_nodes: int | None = None, *,
             max_size: int | None = None, validate: bool = True) -> Complete:
    """Every item attends to every item of its own set.

    Args:
        ptr: (G + 1,) offsets of the sets in the node dimension; use
            :func:`ptr_from_batch` to get it from PyG's ``batch`` vector.
        num_nodes: N (``ptr[-1]``), when the caller knows it (``x.shape[0]``).
        max_size: a bound on every set's size (PyG's ``max_num_elements``): the dense
            paths pad all sets to it instead of reading the sizes.
        validate: check ``ptr``'s values (a host read).
    """
    ptr = _check_ptr(ptr, "ptr", validate)
    sizes = None if max_size is None else (int(max_size), int(max_size))
    return _given_counts(Complete(ptr, ptr, max_sizes=sizes), num_nodes, num_nodes)


def bipartite(ptr_q: Tensor | list[int], ptr_kv: Tensor | list[int],
              num_nodes: tuple[int, int] | None = None, *,
              max_sizes: tuple[int, int] | None = None, validate: bool = True) -> Bipartite:
    """Queries of set g attend to all key/value items of set g (cross attention).

    Args:
        ptr_q: (G + 1,) offsets of the query sets.
        ptr_kv: (G + 1,) offsets of the key/value sets; same G.
        num_nodes: (Nq, Nk), when the caller knows them.
        max_sizes: (Lq, Lk) bounds on every set's query and key counts (see
            :class:`Bipartite`).
        validate: check the offsets' values (a host read).
    """
    ptr_q = _check_ptr(ptr_q, "ptr_q", validate)
    ptr_kv = _check_ptr(ptr_kv, "ptr_kv", validate)
    if ptr_q.numel() != ptr_kv.numel():
        raise ValueError(
            f"ptr_q and ptr_kv must describe the same number of sets, got "
            f"{ptr_q.numel() - 1} and {ptr_kv.numel() - 1}"
        )
    sizes = None if max_sizes is None else (int(max_sizes[0]), int(max_sizes[1]))
    nq, nk = (None, None) if num_nodes is None else num_nodes
    return _given_counts(Bipartite(ptr_q, ptr_kv, max_sizes=sizes), nq, nk)


def window(ptr: Tensor | list[int], radius: int, num_nodes: int | None = None, *,
           validate: bool = True) -> Window:
    """Positions within ``radius`` of each other in the same sequence attend to each other.

    Args:
        ptr: (G + 1,) offsets of the sequences.
        radius: window half-width r >= 0.
        num_nodes: N (``ptr[-1]``), when the caller knows it.
        validate: check ``ptr``'s values (a host read).
    """
    if radius < 0:
        raise ValueError(f"radius must be >= 0, got {radius}")
    return _given_counts(Window(_check_ptr(ptr, "ptr", validate), int(radius)), num_nodes,
                         None)


# One-slot memo: the layers of a model usually receive the same edge_index tensor, and
# reusing its Edges object reuses the CSR layouts the engine caches on it. Keyed by the
# tensor's identity and in-place version, so a changed or different tensor never matches.
_last_edges: list[tuple[Tensor, int, object, Edges]] = []


def edges(edge_index: Tensor, num_nodes: int | tuple[int, int] | None = None, *,
          validate: bool = True) -> Edges:
    """An explicit sparse graph.

    Args:
        edge_index: (2, E) long, PyG order (row 0 source j, row 1 target i).
        num_nodes: N for a graph over one node set, or ``(num_src, num_dst)`` for a
            bipartite graph; inferred from the largest index when omitted (a host read).
        validate: check the node indices against ``num_nodes`` (a host read). The layers
            pass False, as PyG's do: an index out of range then fails inside the gather
            and scatter kernels. Under ``torch.compile`` nothing is checked either.
    """
    if not isinstance(edge_index, Tensor):
        edge_index = torch.as_tensor(edge_index)  # a Python list: on the CPU
    if torch.compiler.is_compiling():  # no memo: cached Python objects would become guards
        return _make_edges(edge_index, num_nodes, False)
    key = (tuple(num_nodes) if isinstance(num_nodes, (tuple, list)) else num_nodes, validate)
    if _last_edges:
        t, version, last_key, top = _last_edges[0]
        if t is edge_index and version == edge_index._version and last_key == key:
            return top
    top = _make_edges(edge_index, num_nodes, validate)
    _last_edges[:] = [(edge_index, edge_index._version, key, top)]
    return top


def _make_edges(edge_index: Tensor, num_nodes: int | tuple[int, int] | None,
                validate: bool) -> Edges:
    """Validate an edge list and wrap it (see :func:`edges`)."""
    if edge_index.dim() != 2 or edge_index.shape[0] != 2:
        raise ValueError(f"edge_index must have shape (2, E), got {tuple(edge_index.shape)}")
    if edge_index.dtype != torch.long:
        edge_index = edge_index.long()
    if num_nodes is None:
        n = int(edge_index.max()) + 1 if edge_index.numel() else 0
        num_src = num_dst = n
    elif isinstance(num_nodes, int):
        num_src = num_dst = num_nodes
    else:
        num_src, num_dst = (int(n) for n in num_nodes)
    if validate and edge_index.numel():
        if int(edge_index.min()) < 0:
            raise ValueError("edge_index has negative node indices")
        if int(edge_index[0].max()) >= num_src or int(edge_index[1].max()) >= num_dst:
            raise ValueError(
                f"edge_index refers to nodes beyond num_nodes=({num_src}, {num_dst})"
            )
    return Edges(edge_index, num_q=num_dst, num_kv=num_src)


def pooling(index: Tensor, num_graphs: int, *, validate: bool = True) -> Edges:
    """Attention pooling: the query of graph g attends to every node j with ``index[j] == g``.

    The same edges, in the same order, as ``bipartite(arange(G + 1), ptr)`` when ``index``
    is sorted (PyG's ``batch``), but ``index`` may come in any order (PyG's aggregations
    get unsorted edge targets) and nothing is read from it: the edge list is
    ``(arange(N), index)``.

    Args:
        index: (N,) graph of every node, values in [0, num_graphs).
        num_graphs: G, the number of queries (PyG's ``dim_size``).
        validate: check that every value lies in [0, G) (a host read; the pools pass
            False, as PyG's aggregations do).
    """
    if index.dim() != 1:
        raise ValueError(f"index must have shape (N,), got {tuple(index.shape)}")
    index = index.long()
    if validate and index.numel() and not torch.compiler.is_compiling():
        if int(index.min()) < 0 or int(index.max()) >= num_graphs:
            raise ValueError(f"index holds graphs outside [0, {num_graphs}) (num_graphs="
                             f"{num_graphs}, or dim_size, too small?)")
    nodes = torch.arange(index.numel(), device=index.device)  # (N,)
    return Edges(torch.stack([nodes, index]), num_q=num_graphs, num_kv=index.numel(),
                 bipartite=True)
