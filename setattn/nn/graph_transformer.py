"""Global attention over all nodes of each graph, biased by how many edges apart they are.

Every node attends to every node of its own graph (``complete(ptr)``); head h adds a
learned bias ``b_h(d_ij)`` to the logit of each pair, where d_ij is the pair's hop
(shortest-path) distance, bucketed: 0, 1, ..., K - 1 exactly, "K or more", and "no path"
(graphs of several fragments). This is the spatial encoding of Graphormer (Ying et al.
2021, "Do Transformers Really Perform Bad for Graph Representation?") and the adjacency /
distance term of the Molecule Attention Transformer (Maziarka et al. 2020); put after a
local graph layer it is a GPS layer (Rampasek et al. 2022, "Recipe for a General,
Powerful, Scalable Graph Transformer").
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from setattn.engine.csr import csr_side, csr_tensor
from setattn.nn.attention import MultiHeadAttention
from setattn.topology import Complete

__all__ = ["DistanceBiasedBlock", "hop_buckets"]


def _adjacency(edge_index: Tensor, num_nodes: int) -> Tensor:
    """(N, N) sparse CSR float matrix with a 1 at [i, j] for every edge j -> i (the
    engine's one-head CSR layout)."""
    side = csr_side(edge_index[1], edge_index[0], num_nodes, num_nodes, heads=1)
    return csr_tensor(side, torch.ones(side.col.numel(), device=edge_index.device))


def _components(edge_index: Tensor, num_nodes: int) -> Tensor:
    """(N,) the smallest node number of each node's connected component: min-label
    propagation along the (symmetric) edges with pointer jumping."""
    label = torch.arange(num_nodes, device=edge_index.device)  # (N,)
    src, dst = edge_index[0], edge_index[1]
    while True:
        low = label.scatter_reduce(0, dst, label[src], "amin")  # (N,) smallest neighbour label
        low = low[low]  # (N,) jump to the label's own label
        if bool((low == label).all()):
            return label
        label = low


@torch.no_grad()
def hop_buckets(edge_index: Tensor, ptr: Tensor, max_hops: int) -> Tensor:
    """Bucketed hop distance of every (source, target) pair of ``complete(ptr)``.

    Edge directions are ignored (bonds count both ways). K - 1 steps of a breadth-first
    search from every node at once give the distances below K (O(E * n_max) each, n_max
    the largest graph); connected components tell "K or more" from "no path".

    Args:
        edge_index: (2, E) edges within the graphs of ``ptr``.
        ptr: (G + 1,) node offsets of the graphs.
        max_hops: K >= 1.

    Returns:
        (sum_g n_g^2,) long in ``complete(ptr)``'s canonical edge order (graph by graph,
        target by target, sources ascending): the hops between source and target when
        fewer than K, K for K or more, K + 1 when no path joins them.
    """
    if max_hops < 1:
        raise ValueError(f"max_hops must be >= 1, got {max_hops}")
    device = ptr.device
    sizes = ptr[1:] - ptr[:-1]  # (G,)
    n = int(ptr[-1])
    n_max = int(sizes.max()) if sizes.numel() else 0
    graph = torch.repeat_interleave(torch.arange(sizes.numel(), device=device), sizes)  # (N,)
    first = ptr[:-1][graph]  # (N,) first node of each node's graph
    nodes = torch.arange(n, device=device)  # (N,)
    edge_index = torch.cat([edge_index, edge_index.flip(0)], 1)  # (2, 2E) both directions
    reach = torch.zeros(n, n_max, device=device)  # (N, n_max): [i, j] 1 if j is reached
    reach[nodes, nodes - first] = 1.0
    adjacency = _adjacency(edge_index, n)  # (N, N) sparse
    within = reach.clone()  # (N, n_max) steps 0..K-1 at which j was within reach
    for _ in range(1, max_hops):
        reach = (reach + adjacency @ reach).clamp_(max=1.0)  # (N, n_max) one hop further
        within += reach
    # j first reached at step d < K is within reach K - d times; never: 0 times, K hops
    hops = max_hops - within  # (N, n_max)
    label = _components(edge_index, n)  # (N,)
    column = (first[:, None] + torch.arange(n_max, device=device)).clamp_(max=max(n - 1, 0))
    hops.masked_fill_(label[column] != label[:, None], max_hops + 1)  # no path from j to i
    valid = torch.arange(n_max, device=device)[None, :] < sizes[graph][:, None]  # (N, n_max)
    return hops[valid].long()  # (E,), row-major: target-major, sources ascending


class DistanceBiasedBlock(nn.Module):
    """A post-norm transformer layer over all nodes of each graph with a learned per-head
    bias for each hop-distance bucket (see the module docstring).

    ``x = LN(x + Attn(x, bias = table[bucket_ij])); x = LN(x + FF(x))``: post-norm, as in
    GPS and the original Transformer, so the node states leave the block normalised
    whatever the local layers before it added (the pre-norm form lets them grow).

    Args:
        dim: D.
        heads: H (D divisible by H).
        max_hops: K; the bias table has K + 2 rows (0..K-1 hops, K or more, no path).
        ff_dim: hidden width of the feed-forward network (2 D by default).
        dropout: on the attention weights and both residual branches.
    """

    def __init__(self, dim: int, heads: int, max_hops: int, ff_dim: int | None = None,
                 dropout: float = 0.0):
        super().__init__()
        self.attn = MultiHeadAttention(dim, heads, dropout=dropout)
        self.norm1 = nn.LayerNorm(dim)
        self.ff = nn.Sequential(nn.Linear(dim, ff_dim or 2 * dim), nn.GELU(),
                                nn.Linear(ff_dim or 2 * dim, dim))
        self.norm2 = nn.LayerNorm(dim)
        self.drop = nn.Dropout(dropout)
        # (K + 2, H), zero: the block starts as plain global attention
        self.distance_bias = nn.Parameter(torch.zeros(max_hops + 2, heads))

    def forward(self, x: Tensor, topology: Complete, buckets: Tensor) -> Tensor:
        """Args:
            x: (N, D) nodes of G graphs.
            topology: ``complete(ptr)`` over them.
            buckets: (E,) ``hop_buckets(edge_index, ptr, K)``, same canonical order.

        Returns:
            (N, D).
        """
        table = self.distance_bias
        # a one-hot product rather than a lookup: its backward is one small matmul, not
        # a scatter over E rows
        bias = F.one_hot(buckets, table.shape[0]).to(table.dtype) @ table  # (E, H)
        x = self.norm1(x + self.drop(self.attn(x, topology, bias=bias)))  # (N, D)
        return self.norm2(x + self.drop(self.ff(x)))  # (N, D)
