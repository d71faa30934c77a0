"""Attention pooling: one (or k) query nodes per graph attend to the graph's nodes."""

from __future__ import annotations

import copy

import torch
from torch import Tensor, nn
from torch_geometric.nn import MLP

from setattn.engine import attend
from setattn.nn.attention import set_ptr
from setattn.nn.blocks import MAB
from setattn.scores import Dot
from setattn.topology import bipartite


def _run(module: nn.Module, x: Tensor, batch: Tensor | None, num_graphs: int) -> Tensor:
    """Apply a node-wise network; PyG's ``MLP`` also takes the batch (for graph norms)."""
    if isinstance(module, MLP):
        return module(x, batch=batch, batch_size=num_graphs)
    return module(x)


class GlobalAttentionPool(nn.Module):
    """Global attention pooling: graph g's query attends to its nodes, (N, D) -> (G, F).

    ``r_g = sum_{j in g} p_gj nn(x_j)`` with ``p_g = softmax_j(s_gj)`` per head. The
    logit ``s_gj`` comes from one of:

    * a gate network, ``s_gj = gate_nn(x_j)``: PyG's ``AttentionalAggregation``
      (Li et al. 2016, "Gated Graph Sequence Neural Networks"); gate_nn maps (N, D) to
      (N, H), one logit per head; H = 1 (node gating) or H = F (feature gating) as in PyG;
    * a learned query vector u (H, Dk): ``s_gj = score(u, W_K x_j)`` (Yang et al. 2016,
      "Hierarchical Attention Networks");
    * a context vector c_g per graph, given to ``forward``: ``s_gj = score(W_Q c_g,
      W_K x_j)`` (Bahdanau et al. 2015 style attention with a query from outside).

    Args:
        dim: D, node feature width.
        heads: H for the query modes; with a gate, H is the gate's output width.
        gate_nn: the gate network, or None for a query.
        nn: node-wise value network (N, D) -> (N, F), F divisible by H; identity if None.
        context_dim: width of the per-graph context; None for a learned query.
        key_dim: Dk per head for the query modes (D / H by default).
        score: score on (.., H, Dk) for the query modes; scaled dot when None.
    """

    def __init__(self, dim: int, heads: int = 1, *, gate_nn: nn.Module | None = None,
                 nn: nn.Module | None = None, context_dim: int | None = None,
                 key_dim: int | None = None, score: nn.Module | None = None):
        super().__init__()
        self.gate_nn, self.nn, self.score, self.heads = gate_nn, nn, score, heads
        self.key_dim = key_dim or max(dim // heads, 1)
        self.lin_k = self.lin_q = self.query = None
        if gate_nn is None:
            hk = heads * self.key_dim
            self.lin_k = torch.nn.Linear(dim, hk)
            if context_dim is not None:
                self.lin_q = torch.nn.Linear(context_dim, hk)
            else:
                self.query = torch.nn.Parameter(torch.empty(heads, self.key_dim))  # (H, Dk)
                torch.nn.init.xavier_uniform_(self.query)

    def forward(self, x: Tensor, batch: Tensor | None = None, ptr: Tensor | None = None, *,
                num_graphs: int | None = None, context: Tensor | None = None) -> Tensor:
        """Args:
            x: (N, D) nodes of G graphs, graph by graph.
            batch: (N,) PyG's sorted graph index; or give ``ptr`` (G + 1,) offsets.
            num_graphs: G when ``batch`` ends with empty graphs.
            context: (G, context_dim) per-graph queries (when built with ``context_dim``).

        Returns:
            (G, F); an empty graph gives zeros.
        """
        ptr = set_ptr(x, batch, ptr, num_graphs)
        g, n = ptr.numel() - 1, x.shape[0]
        top = bipartite(torch.arange(g + 1, device=x.device), ptr)  # query g <- nodes of g
        values = x if self.nn is None else _run(self.nn, x, batch, g)  # (N, F)
        if self.gate_nn is not None:
            k = _run(self.gate_nn, x, batch, g)[:, :, None]  # (N, H, 1) gate logits
            q = k.new_ones(g, k.shape[1], 1)  # (G, H, 1): Dot gives s_gj = gate_j
            score = Dot()
        else:
            k = self.lin_k(x).view(n, self.heads, self.key_dim)  # (N, H, Dk)
            if self.lin_q is not None:
                if context is None:
                    raise ValueError("this pool was built with context_dim: pass context")
                q = self.lin_q(context).view(g, self.heads, self.key_dim)  # (G, H, Dk)
            else:
                q = self.query.expand(g, -1, -1)  # (G, H, Dk)
            score = self.score
        h = k.shape[1]
        v = values.view(n, h, values.shape[1] // h)  # (N, H, F / H)
        return attend(q, k, v, top, score).flatten(1)  # (G, F)

    @classmethod
    def from_pyg(cls, aggr: nn.Module) -> GlobalAttentionPool:
        """A copy of PyG's ``AttentionalAggregation`` (its gate and value networks)."""
        gate = aggr.gate_mlp if aggr.gate_mlp is not None else aggr.gate_nn
        value = aggr.mlp if aggr.mlp is not None else aggr.nn
        # with a gate the layer builds no projection, so ``dim`` is not used
        return cls(0, gate_nn=copy.deepcopy(gate), nn=copy.deepcopy(value))


class PMA(nn.Module):
    """Pooling by Multihead Attention (Lee et al. 2019, "Set Transformer"):
    ``PMA_k(Z) = MAB(S, rFF(Z))`` with k learned seed vectors S, (N, D) -> (G, k, D).

    Args:
        dim: D.
        heads: H.
        num_seeds: k.
        ff_dim, score, dropout, layer_norm: as :class:`setattn.nn.MAB`.
    """

    def __init__(self, dim: int, heads: int = 1, num_seeds: int = 1, ff_dim: int | None = None,
                 score: nn.Module | None = None, dropout: float = 0.0, layer_norm: bool = True):
        super().__init__()
        self.seeds = torch.nn.Parameter(torch.empty(num_seeds, dim))  # (k, D)
        torch.nn.init.xavier_uniform_(self.seeds)
        self.rff = torch.nn.Sequential(torch.nn.Linear(dim, dim), torch.nn.ReLU())
        self.mab = MAB(dim, heads, ff_dim=ff_dim, score=score, dropout=dropout,
                       layer_norm=layer_norm)

    def forward(self, x: Tensor, batch: Tensor | None = None, ptr: Tensor | None = None, *,
                num_graphs: int | None = None) -> Tensor:
        """(N, D) items of G sets (``batch`` (N,) or ``ptr`` (G + 1,)) -> (G, k, D); an
        empty set pools to ``MAB`` of its seeds over nothing (finite, no NaN)."""
        ptr = set_ptr(x, batch, ptr, num_graphs)
        k, g = self.seeds.shape[0], ptr.numel() - 1
        ptr_s = torch.arange(g + 1, device=x.device) * k  # (G + 1,)
        s = self.seeds.repeat(g, 1)  # (G * k, D)
        out = self.mab(s, bipartite(ptr_s, ptr), self.rff(x))  # (G * k, D)
        return out.view(g, k, self.seeds.shape[1])
