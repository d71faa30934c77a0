"""PyG's input conventions for the graph attention layers, turned into what the engine takes.

PyG's convolutions accept node features as one tensor or a ``(x_src, x_dst)`` pair
(``x_dst`` may be None), the graph as an edge list or as a *transposed* sparse adjacency
``adj_t`` (a ``torch.sparse`` tensor of shape (Nt, Ns) in COO, CSR or CSC layout, or
torch-sparse's ``SparseTensor`` where that package is installed), an optional ``size``
(Ns, Nt), and lazily sized projections (``in_channels=-1``). These helpers normalise all
of that to an edge list and node counts, and put attention weights back into the layout
the graph came in.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch_geometric.nn import Linear as LazyLinear
from torch_geometric.typing import SparseTensor
from torch_geometric.utils import (
    is_torch_sparse_tensor,
    to_edge_index,
    to_torch_coo_tensor,
    to_torch_csc_tensor,
    to_torch_csr_tensor,
)

Features = Tensor | tuple[Tensor, Tensor | None]


def linear(in_channels: int, out_channels: int, bias: bool) -> nn.Module:
    """``nn.Linear``, or PyG's lazily sized ``Linear`` when ``in_channels`` is -1 (its
    weight takes its shape, and Glorot values, on the first call)."""
    if in_channels > 0:
        return nn.Linear(in_channels, out_channels, bias=bias)
    return LazyLinear(-1, out_channels, bias=bias, weight_initializer="glorot")


def is_lazy(lin: nn.Module | None) -> bool:
    """Whether ``lin`` still waits for its first call to know its input width."""
    return lin is not None and isinstance(lin.weight, nn.parameter.UninitializedParameter)


def reset_linear(lin: nn.Module | None) -> None:
    """Fresh values: Glorot (Xavier uniform) weights, biases as ``nn.Linear`` draws them."""
    if lin is None:
        return
    lin.reset_parameters()  # a lazy PyG Linear waits for its first call
    if isinstance(lin, nn.Linear):
        nn.init.xavier_uniform_(lin.weight)


def split_features(x: Features) -> tuple[Tensor, Tensor | None]:
    """Node features -> (x_src (Ns, F_src), x_dst (Nt, F_dst) or None)."""
    x_src, x_dst = (x, x) if isinstance(x, Tensor) else x
    for name, t in (("x", x_src), ("x_dst", x_dst)):
        if t is not None and t.dim() != 2:
            raise ValueError(f"argument {name} must be (N, F) node features, got shape "
                             f"{tuple(t.shape)} (static graphs are not supported)")
    return x_src, x_dst


def is_sparse_adjacency(edge_index: object) -> bool:
    """A ``torch.sparse`` tensor or torch-sparse ``SparseTensor`` (PyG's ``adj_t``)."""
    return isinstance(edge_index, SparseTensor) or (
        isinstance(edge_index, Tensor) and is_torch_sparse_tensor(edge_index))


def node_counts(x_src: Tensor, x_dst: Tensor | None, edge_index: Tensor,
                size: tuple[int, int] | None) -> tuple[int, int]:
    """(Ns, Nt): source and target node counts, checked against ``size`` and ``adj_t``.

    Without target features Nt comes from ``size``, the adjacency, or Ns (PyG's rule).
    """
    ns = x_src.shape[0]
    given = [None, None] if size is None else [int(s) for s in size]
    if is_sparse_adjacency(edge_index):  # adj_t is (Nt, Ns)
        given = [edge_index.size(1), edge_index.size(0)]
        what = f"the sparse adjacency (adj_t of shape ({given[1]}, {given[0]}))"
    else:
        what = f"argument size={tuple(size) if size is not None else None}"
    nt = x_dst.shape[0] if x_dst is not None else (given[1] if given[1] is not None else ns)
    if (given[0] is not None and given[0] != ns) or (given[1] is not None and given[1] != nt):
        raise ValueError(f"{what} does not match the node features: {ns} source and {nt} "
                         f"target rows")
    return ns, nt


def edge_list(edge_index: Tensor) -> Tensor:
    """(2, E) edges, row 0 source j, row 1 target i, from an edge list or a sparse adj_t.

    A sparse adjacency gives its stored entries in its own order (``to_edge_index``).
    """
    if is_sparse_adjacency(edge_index):
        rows_cols, _ = to_edge_index(edge_index)  # (2, E): row = target i, col = source j
        return rows_cols.flip(0)
    if edge_index.dim() != 2 or edge_index.shape[0] != 2:
        raise ValueError(f"argument edge_index must have shape (2, E), got "
                         f"{tuple(edge_index.shape)}")
    return edge_index


def weights_like(adj_t: Tensor, edge_index: Tensor, alpha: Tensor,
                 num_nodes: tuple[int, int]) -> tuple[Tensor, Tensor]:
    """Attention weights in the layout of the sparse adjacency the layer was given.

    Args:
        adj_t: the (Nt, Ns) adjacency of the call (its layout is what counts).
        edge_index: (2, E) the edges the weights belong to (self loops included).
        alpha: (E, H) their weights.
        num_nodes: (Ns, Nt).

    Returns:
        the (Nt, Ns, H) sparse weights in ``adj_t``'s layout, and their (E, H) values in
        that layout's order (PyG's ``(adj, alpha)``).
    """
    ns, nt = num_nodes
    rows_cols = edge_index.flip(0)  # (2, E): target i, source j
    if isinstance(adj_t, SparseTensor):  # torch-sparse: sorted by row, as PyG returns it
        order = torch.argsort(rows_cols[0] * ns + rows_cols[1])  # (E,)
        row, col = rows_cols[:, order]
        return SparseTensor(row=row, col=col, value=alpha[order], sparse_sizes=(nt, ns)), \
            alpha[order]
    build = {torch.sparse_coo: to_torch_coo_tensor, torch.sparse_csr: to_torch_csr_tensor,
             torch.sparse_csc: to_torch_csc_tensor}[adj_t.layout]
    adj = build(rows_cols, alpha, size=(nt, ns))
    return adj, adj.values()
