"""Attention pooling: one (or k) query nodes per graph attend to the graph's nodes.

Both pools are ``torch_geometric.nn.aggr.Aggregation`` modules: they take PyG's
aggregation call ``(x, index=None, ptr=None, dim_size=None, dim=-2)``, serve as the
``aggr`` of a PyG ``MessagePassing`` layer, and ``to_hetero`` treats them as global
pooling. setattn's older names still work: ``batch`` for ``index`` and ``num_graphs``
for ``dim_size``.
"""

from __future__ import annotations

import copy

import torch
from torch import Tensor, nn
from torch_geometric.nn import MLP
from torch_geometric.nn.aggr import Aggregation
from torch_geometric.nn.inits import reset

from setattn.engine import attend
from setattn.engine.scoring import DEFAULT_SCORE, dot_scale
from setattn.nn.blocks import MAB, set_topologies
from setattn.scores import Dot
from setattn.topology import pooling, ptr_from_batch


def _run(module: nn.Module, x: Tensor, index: Tensor, num_graphs: int) -> Tensor:
    """Apply a node-wise network; PyG's ``MLP`` also takes the batch (for graph norms)."""
    if isinstance(module, MLP):
        return module(x, batch=index, batch_size=num_graphs)
    return module(x)


def _check_dim(x: Tensor, dim: int) -> None:
    if x.dim() != 2 or dim not in (0, -2):
        raise ValueError(f"argument dim={dim}: setattn's pools aggregate the rows of (N, D) "
                         f"features (dim 0 or -2), got x of shape {tuple(x.shape)}")


class SetAggregation(Aggregation):
    """PyG's ``Aggregation`` call, also under setattn's older argument names."""

    def __call__(self, x: Tensor, index: Tensor | None = None, ptr: Tensor | None = None,
                 dim_size: int | None = None, dim: int = -2, *, batch: Tensor | None = None,
                 num_graphs: int | None = None, **kwargs) -> Tensor:
        """Args:
            x: (N, D) nodes of G graphs.
            index: (N,) graph of every node (PyG's ``batch``); ``batch`` is the same.
            ptr: (G + 1,) node offsets of the graphs (graph by graph).
            dim_size: G; ``num_graphs`` is the same. Inferred from ``ptr`` or ``index``.
            dim: the node dimension of x (0 or -2).

        With neither ``index`` nor ``ptr``, all of ``x`` is one graph.
        """
        if batch is not None and index is not None:
            raise ValueError("pass index or batch (the same argument), not both")
        if num_graphs is not None and dim_size is not None and num_graphs != dim_size:
            raise ValueError(f"num_graphs={num_graphs} and dim_size={dim_size} disagree")
        index = batch if index is None else index
        dim_size = num_graphs if dim_size is None else dim_size
        if ptr is not None:
            ptr = torch.as_tensor(ptr, dtype=torch.long, device=x.device)
        return super().__call__(x, index, ptr, dim_size, dim, **kwargs)

    def __prepare_scriptable__(self) -> nn.Module:
        raise NotImplementedError(
            f"torch.jit.script cannot compile setattn's {type(self).__name__}: it runs "
            f"setattn.attend, which TorchScript does not support (see GATConv); use "
            f"torch.compile or torch.export instead")


class GlobalAttentionPool(SetAggregation):
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

    def reset_parameters(self) -> None:
        """Fresh projections and query; the gate and value networks reset themselves."""
        for module in (self.gate_nn, self.nn, self.lin_k, self.lin_q):
            reset(module)
        if self.query is not None:
            torch.nn.init.xavier_uniform_(self.query)

    def forward(self, x: Tensor, index: Tensor | None = None, ptr: Tensor | None = None,
                dim_size: int | None = None, dim: int = -2, *,
                context: Tensor | None = None) -> Tensor:
        """Args:
            x: (N, D) nodes of G graphs, in any order when ``index`` is given.
            index: (N,) graph of every node; or give ``ptr`` (G + 1,) offsets.
            dim_size: G (``SetAggregation.__call__`` infers it when not given).
            dim: 0 or -2.
            context: (G, context_dim) per-graph queries (when built with ``context_dim``).

        Returns:
            (G, F); an empty graph gives zeros.
        """
        _check_dim(x, dim)
        g, n = dim_size, x.shape[0]
        if index is None:  # ptr (G + 1,) -> the graph of every node
            index = torch.searchsorted(ptr[1:], torch.arange(n, device=x.device), right=True)
        top = pooling(index, g, validate=False)  # query g <- nodes of g (PyG checks dim_size)
        values = x if self.nn is None else _run(self.nn, x, index, g)  # (N, F)
        if self.gate_nn is not None:
            k = _run(self.gate_nn, x, index, g)[:, :, None]  # (N, H, 1) gate logits
            q = k.new_ones(g, k.shape[1], 1)  # (G, H, 1): Dot gives s_gj = gate_j
            score = Dot()
        elif self.lin_q is None and (logits := self.query_logits(x)) is not None:
            k = logits[:, :, None]  # (N, H, 1): the query's logits, as a gate's
            q = k.new_ones(g, k.shape[1], 1)  # (G, H, 1)
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

    def query_logits(self, x: Tensor) -> Tensor | None:
        """The learned query's logits against every node, (N, D) -> (N, H), with the query
        folded into the key projection:
        ``s * u_h . (W_h x + b_h) = x . (s W_h^T u_h) + s u_h . b_h``, one (D, H) matrix
        in place of the (D, H Dk) projection, so the keys are never made (N D H products,
        not N D H Dk, and as few again backward). None when the score is not a (scaled)
        dot product: the keys are projected then. Equal to projecting the keys to float
        rounding."""
        scale = dot_scale(DEFAULT_SCORE if self.score is None else self.score, self.key_dim)
        if self.query is None or scale is None:
            return None
        weight = self.lin_k.weight.view(self.heads, self.key_dim, -1)  # (H, Dk, D)
        folded = torch.einsum("hkd,hk->hd", weight, self.query) * scale  # (H, D)
        bias = None if self.lin_k.bias is None else (
            (self.lin_k.bias.view(self.heads, self.key_dim) * self.query).sum(-1) * scale)  # (H,)
        return torch.nn.functional.linear(x, folded, bias)  # (N, H)

    def __repr__(self) -> str:
        kind = "gate" if self.gate_nn is not None else (
            "context" if self.lin_q is not None else "query")
        return f"{type(self).__name__}({kind}, heads={self.heads})"

    @classmethod
    def from_pyg(cls, aggr: nn.Module) -> GlobalAttentionPool:
        """A copy of PyG's ``AttentionalAggregation`` (its gate and value networks)."""
        gate = aggr.gate_mlp if aggr.gate_mlp is not None else aggr.gate_nn
        value = aggr.mlp if aggr.mlp is not None else aggr.nn
        # with a gate the layer builds no projection, so ``dim`` is not used
        return cls(0, gate_nn=copy.deepcopy(gate), nn=copy.deepcopy(value))


class PMA(SetAggregation):
    """Pooling by Multihead Attention (Lee et al. 2019, "Set Transformer"):
    ``PMA_k(Z) = MAB(S, rFF(Z))`` with k learned seed vectors S, (N, D) -> (G, k, D).

    Args:
        dim: D.
        heads: H.
        num_seeds: k.
        ff_dim, score, dropout, layer_norm: as :class:`setattn.nn.MAB`.
        concat: return PyG's (G, k * D) (as ``SetTransformerAggregation(concat=True)``)
            instead of (G, k, D).
    """

    def __init__(self, dim: int, heads: int = 1, num_seeds: int = 1, ff_dim: int | None = None,
                 score: nn.Module | None = None, dropout: float = 0.0, layer_norm: bool = True,
                 concat: bool = False):
        super().__init__()
        self.concat = concat
        self.seeds = torch.nn.Parameter(torch.empty(num_seeds, dim))  # (k, D)
        torch.nn.init.xavier_uniform_(self.seeds)
        self.rff = torch.nn.Sequential(torch.nn.Linear(dim, dim), torch.nn.ReLU())
        self.mab = MAB(dim, heads, ff_dim=ff_dim, score=score, dropout=dropout,
                       layer_norm=layer_norm)

    def reset_parameters(self) -> None:
        """Fresh seeds, feed-forward and attention block."""
        torch.nn.init.xavier_uniform_(self.seeds)
        reset(self.rff)
        reset(self.mab)

    def forward(self, x: Tensor, index: Tensor | None = None, ptr: Tensor | None = None,
                dim_size: int | None = None, dim: int = -2,
                max_num_elements: int | None = None) -> Tensor:
        """(N, D) items of G sets, set by set (``index`` (N,) sorted, or ``ptr``
        (G + 1,)) -> (G, k, D), or (G, k * D) with ``concat``; an empty set pools to
        ``MAB`` of its seeds over nothing (finite, no NaN).

        ``max_num_elements`` (PyG's argument): a bound on every set's size; given, with
        ``dim_size``, nothing is read back from ``index`` or ``ptr`` (no check either)."""
        _check_dim(x, dim)
        if ptr is None:
            ptr = ptr_from_batch(index, dim_size,
                                 validate=max_num_elements is None)  # (G + 1,)
        k, g = self.seeds.shape[0], ptr.numel() - 1
        into, _ = set_topologies(ptr, k, x.shape[0], max_num_elements)
        s = self.seeds.repeat(g, 1)  # (G * k, D)
        out = self.mab(s, into, self.rff(x))  # (G * k, D)
        out = out.view(g, k, self.seeds.shape[1])  # (G, k, D)
        return out.flatten(1) if self.concat else out  # (G, k * D) or (G, k, D)

    def __repr__(self) -> str:
        k, d = self.seeds.shape
        return f"{type(self).__name__}({d}, num_seeds={k}, concat={self.concat})"
