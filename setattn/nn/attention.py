"""Multi-head attention over any topology: self, intra-set, cross, local or graph attention."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from setattn.engine import AttentionGraph, attend
from setattn.topology import Topology, ptr_from_batch


def set_ptr(
    x: Tensor,
    batch: Tensor | None = None,
    ptr: Tensor | None = None,
    num_graphs: int | None = None,
    *,
    validate: bool = True,
) -> Tensor:
    """The (G + 1,) set offsets of the rows of ``x``, from PyG's ``batch`` or ``ptr``.

    Args:
        x: (N, ...) items of all sets, set by set.
        batch: (N,) sorted set index of every item (PyG's ``batch``), or None.
        ptr: (G + 1,) set offsets; wins over ``batch`` when both are given.
        num_graphs: G, needed with ``batch`` when trailing sets are empty.
        validate: check ``batch`` (sorted, in range: a host read).

    With neither ``batch`` nor ``ptr``, all of ``x`` is one set.
    """
    if ptr is not None:
        return torch.as_tensor(ptr, dtype=torch.long, device=x.device)
    if batch is not None:
        return ptr_from_batch(batch, num_graphs, validate=validate)
    return torch.tensor([0, x.shape[0]], device=x.device)


class MultiHeadAttention(nn.Module):
    """Multi-head attention (Vaswani et al. 2017, "Attention Is All You Need") on a topology.

    ``out_i = W_O concat_h sum_j p_ij^h (W_V^h v_j)`` with ``p^h`` the softmax over the
    edges j -> i of ``topology`` of ``score(W_Q^h q_i, W_K^h k_j)``. The topology decides
    the kind: ``complete(ptr)`` is self attention within each set, ``bipartite`` is
    cross attention, ``window`` is local attention, ``edges`` is graph attention.

    Args:
        dim: D, width of queries and of the output.
        heads: H; D must be divisible by H (head width Dh = D / H).
        kdim: width of the keys (D by default).
        vdim: width of the values (D by default).
        score: a :mod:`setattn.scores` module acting on (.., H, Dh); scaled dot product
            when None.
        dropout: dropout probability on the attention weights.
        bias: whether the four projections have a bias (as in ``torch.nn``).
    """

    def __init__(
        self,
        dim: int,
        heads: int = 1,
        kdim: int | None = None,
        vdim: int | None = None,
        score: nn.Module | None = None,
        dropout: float = 0.0,
        bias: bool = True,
    ):
        super().__init__()
        if dim % heads:
            raise ValueError(f"dim={dim} must be divisible by heads={heads}")
        self.dim, self.heads, self.dropout = dim, heads, dropout
        self.q_proj = nn.Linear(dim, dim, bias=bias)
        self.k_proj = nn.Linear(kdim or dim, dim, bias=bias)
        self.v_proj = nn.Linear(vdim or dim, dim, bias=bias)
        self.out_proj = nn.Linear(dim, dim, bias=bias)
        self.score = score

    def forward(
        self,
        query: Tensor,
        topology: Topology,
        key: Tensor | None = None,
        value: Tensor | None = None,
        *,
        mask: Tensor | None = None,
        bias: Tensor | None = None,
        edge_attr: Tensor | None = None,
        return_weights: bool = False,
    ) -> Tensor | tuple[Tensor, AttentionGraph]:
        """Attend from ``query`` rows to ``key``/``value`` rows along ``topology``.

        Args:
            query: (Nq, D) target items.
            topology: a :mod:`setattn.topology` object over (Nk sources, Nq targets).
            key: (Nk, kdim) source items; ``query`` when None (self attention).
            value: (Nk, vdim) source values; ``key`` when None.
            mask: (E,) or (E, H) bool in the topology's canonical edge order; False drops.
            bias: (E,) or (E, H) added to the logits, same order.
            edge_attr: per-edge input of the score, (E, H) or (E, H, A).
            return_weights: also return the weights as an ``AttentionGraph``.

        Returns:
            (Nq, D), and the ``AttentionGraph`` when ``return_weights``.
        """
        key = query if key is None else key
        value = key if value is None else value
        h, dh = self.heads, self.dim // self.heads
        q = self.q_proj(query).view(query.shape[0], h, dh)  # (Nq, H, Dh)
        k = self.k_proj(key).view(key.shape[0], h, dh)  # (Nk, H, Dh)
        v = self.v_proj(value).view(value.shape[0], h, dh)  # (Nk, H, Dh)
        res = attend(q, k, v, topology, self.score, mask=mask, bias=bias, edge_attr=edge_attr,
                     dropout=self.dropout, training=self.training, return_weights=return_weights)
        z, graph = res if return_weights else (res, None)
        out = self.out_proj(z.reshape(z.shape[0], self.dim))  # (Nq, D)
        return (out, graph) if return_weights else out

    @classmethod
    def from_torch(cls, mha: nn.MultiheadAttention) -> MultiHeadAttention:
        """A copy of ``torch.nn.MultiheadAttention``'s weights (scaled dot product score).

        ``add_bias_kv`` and ``add_zero_attn`` (extra key/value rows) are not supported.
        ``batch_first`` does not matter: setattn layers take flat (N, D) items.
        """
        if mha.bias_k is not None or mha.add_zero_attn:
            raise NotImplementedError("add_bias_kv / add_zero_attn are not supported")
        has_bias = mha.in_proj_bias is not None
        layer = cls(mha.embed_dim, mha.num_heads, mha.kdim, mha.vdim, dropout=mha.dropout,
                    bias=has_bias)
        if mha._qkv_same_embed_dim:
            wq, wk, wv = mha.in_proj_weight.chunk(3)
        else:
            wq, wk, wv = mha.q_proj_weight, mha.k_proj_weight, mha.v_proj_weight
        with torch.no_grad():
            for proj, w in ((layer.q_proj, wq), (layer.k_proj, wk), (layer.v_proj, wv)):
                proj.weight.copy_(w)
            layer.out_proj.weight.copy_(mha.out_proj.weight)
            if has_bias:
                for proj, b in zip((layer.q_proj, layer.k_proj, layer.v_proj),
                                   mha.in_proj_bias.chunk(3)):
                    proj.bias.copy_(b)
                layer.out_proj.bias.copy_(mha.out_proj.bias)
        return layer.to(mha.out_proj.weight.device, mha.out_proj.weight.dtype)
