"""Transformer and Set Transformer blocks over flat (N, D) items of a batch of sets."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from setattn.nn.attention import MultiHeadAttention, set_ptr
from setattn.topology import Topology, bipartite, complete


def _feed_forward(dim: int, hidden: int, act: nn.Module) -> nn.Sequential:
    return nn.Sequential(nn.Linear(dim, hidden), act, nn.Linear(hidden, dim))


class TransformerBlock(nn.Module):
    """Pre-norm transformer layer (Xiong et al. 2020, "On Layer Normalization in the
    Transformer Architecture"; Vaswani et al. 2017) over any topology.

    ``x = x + Attn(LN(x)); x = x + FF(LN(x))``; the topology says who attends to whom:
    ``complete(ptr)`` for sets, ``window`` for local attention, ``edges(edge_index)``
    for graph neighbourhoods (a graph transformer layer).

    Args:
        dim: D.
        heads: H (D divisible by H).
        ff_dim: hidden width of the feed-forward network (4 D by default).
        score: a :mod:`setattn.scores` module on (.., H, D / H); scaled dot when None.
        dropout: on the attention weights and on both residual branches.
    """

    def __init__(self, dim: int, heads: int = 1, ff_dim: int | None = None,
                 score: nn.Module | None = None, dropout: float = 0.0):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = MultiHeadAttention(dim, heads, score=score, dropout=dropout)
        self.norm2 = nn.LayerNorm(dim)
        self.ff = _feed_forward(dim, ff_dim or 4 * dim, nn.GELU())
        self.drop = nn.Dropout(dropout)

    def forward(self, x: Tensor, topology: Topology, *, mask: Tensor | None = None,
                bias: Tensor | None = None, edge_attr: Tensor | None = None) -> Tensor:
        """(N, D) items, a topology over them (N -> N), optional per-edge mask / bias /
        edge_attr in its canonical edge order -> (N, D)."""
        x = x + self.drop(self.attn(self.norm1(x), topology, mask=mask, bias=bias,
                                    edge_attr=edge_attr))
        return x + self.drop(self.ff(self.norm2(x)))


class MAB(nn.Module):
    """Multihead Attention Block (Lee et al. 2019, "Set Transformer"), post-norm as in
    the paper: ``H = LN(X + Multihead(X, Y, Y))``, ``MAB(X, Y) = LN(H + rFF(H))``.

    Args:
        dim: D, width of X and of the output.
        heads: H.
        kdim: width of Y (D by default).
        ff_dim: hidden width of the row-wise feed-forward rFF (D by default).
        score: attention score on (.., H, D / H); scaled dot when None.
        dropout: on the attention weights.
        layer_norm: False drops both LayerNorms (the paper's ablation).
    """

    def __init__(self, dim: int, heads: int = 1, kdim: int | None = None,
                 ff_dim: int | None = None, score: nn.Module | None = None,
                 dropout: float = 0.0, layer_norm: bool = True):
        super().__init__()
        self.attn = MultiHeadAttention(dim, heads, kdim, kdim, score=score, dropout=dropout)
        self.norm1 = nn.LayerNorm(dim) if layer_norm else nn.Identity()
        self.ff = _feed_forward(dim, ff_dim or dim, nn.ReLU())
        self.norm2 = nn.LayerNorm(dim) if layer_norm else nn.Identity()

    def forward(self, x: Tensor, topology: Topology, y: Tensor | None = None) -> Tensor:
        """(Nq, D) queries X, topology over (Ny sources, Nq targets), (Ny, kdim) Y (X when
        None) -> (Nq, D)."""
        h = self.norm1(x + self.attn(x, topology, y))
        return self.norm2(h + self.ff(h))


class SAB(nn.Module):
    """Set Attention Block (Lee et al. 2019): ``SAB(X) = MAB(X, X)`` within each set.

    Args: as :class:`MAB` (dim, heads, ff_dim, score, dropout, layer_norm).
    """

    def __init__(self, dim: int, heads: int = 1, ff_dim: int | None = None,
                 score: nn.Module | None = None, dropout: float = 0.0, layer_norm: bool = True):
        super().__init__()
        self.mab = MAB(dim, heads, ff_dim=ff_dim, score=score, dropout=dropout,
                       layer_norm=layer_norm)

    def forward(self, x: Tensor, batch: Tensor | None = None, ptr: Tensor | None = None,
                *, num_graphs: int | None = None) -> Tensor:
        """(N, D) items of G sets given by PyG's ``batch`` (N,) or ``ptr`` (G + 1,)
        (one set when both are None) -> (N, D)."""
        return self.mab(x, complete(set_ptr(x, batch, ptr, num_graphs)))


class ISAB(nn.Module):
    """Induced Set Attention Block (Lee et al. 2019): with m learned inducing points I,
    ``ISAB(X) = MAB(X, H)``, ``H = MAB(I, X)``: O(N m) instead of O(N^2) per set.

    Args:
        dim: D.
        heads: H.
        num_inducing: m.
        others: as :class:`MAB`.
    """

    def __init__(self, dim: int, heads: int = 1, num_inducing: int = 16,
                 ff_dim: int | None = None, score: nn.Module | None = None,
                 dropout: float = 0.0, layer_norm: bool = True):
        super().__init__()
        self.inducing = nn.Parameter(torch.empty(num_inducing, dim))  # (m, D)
        nn.init.xavier_uniform_(self.inducing)
        self.mab_in = MAB(dim, heads, ff_dim=ff_dim, score=score, dropout=dropout,
                          layer_norm=layer_norm)
        self.mab_out = MAB(dim, heads, ff_dim=ff_dim, score=score, dropout=dropout,
                           layer_norm=layer_norm)

    def forward(self, x: Tensor, batch: Tensor | None = None, ptr: Tensor | None = None,
                *, num_graphs: int | None = None) -> Tensor:
        """(N, D) items of G sets (``batch`` (N,) or ``ptr`` (G + 1,)) -> (N, D)."""
        ptr = set_ptr(x, batch, ptr, num_graphs)
        m, g = self.inducing.shape[0], ptr.numel() - 1
        ptr_i = torch.arange(g + 1, device=x.device) * m  # (G + 1,)
        i = self.inducing.repeat(g, 1)  # (G * m, D)
        h = self.mab_in(i, bipartite(ptr_i, ptr), x)  # (G * m, D)
        return self.mab_out(x, bipartite(ptr, ptr_i), h)  # (N, D)
