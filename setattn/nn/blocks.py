"""Transformer and Set Transformer blocks over flat (N, D) items of a batch of sets."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from setattn.nn.attention import MultiHeadAttention, set_ptr
from setattn.topology import Bipartite, Topology, bipartite, complete


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
                *, num_graphs: int | None = None,
                max_num_elements: int | None = None) -> Tensor:
        """(N, D) items of G sets given by PyG's ``batch`` (N,) or ``ptr`` (G + 1,)
        (one set when both are None) -> (N, D).

        With ``max_num_elements`` (a bound on every set's size) and, for ``batch``,
        ``num_graphs``, nothing is read back from the index tensors (see
        :func:`set_topologies`)."""
        known = max_num_elements is not None
        ptr = set_ptr(x, batch, ptr, num_graphs, validate=not known)
        return self.mab(x, complete(ptr, x.shape[0], max_size=max_num_elements,
                                    validate=not known))


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
                *, num_graphs: int | None = None,
                max_num_elements: int | None = None) -> Tensor:
        """(N, D) items of G sets (``batch`` (N,) or ``ptr`` (G + 1,)) -> (N, D);
        ``max_num_elements`` as for :class:`SAB`."""
        known = max_num_elements is not None
        ptr = set_ptr(x, batch, ptr, num_graphs, validate=not known)
        m, g = self.inducing.shape[0], ptr.numel() - 1
        into, back = set_topologies(ptr, m, x.shape[0], max_num_elements)
        i = self.inducing.repeat(g, 1)  # (G * m, D)
        h = self.mab_in(i, into, x)  # (G * m, D)
        return self.mab_out(x, back, h)  # (N, D)


def set_topologies(ptr: Tensor, k: int, num_items: int,
                   max_num_elements: int | None) -> tuple[Bipartite, Bipartite]:
    """k learned vectors per set (inducing points, seeds) and the set's items.

    Args:
        ptr: (G + 1,) item offsets.
        k: vectors per set.
        num_items: N (``ptr[-1]``, from ``x.shape[0]``).
        max_num_elements: a bound on every set's size, or None. Given, the topologies
            are built and run without reading ``ptr`` back to the host (dense blocks
            padded to the bound); otherwise ``ptr`` is checked and the sizes are read.

    Returns:
        (vectors <- items, items <- vectors) topologies.
    """
    g, known = ptr.numel() - 1, max_num_elements is not None
    ptr_k = torch.arange(g + 1, device=ptr.device) * k  # (G + 1,)
    into = bipartite(ptr_k, ptr, (g * k, num_items), validate=not known,
                     max_sizes=(k, max_num_elements) if known else None)
    back = bipartite(ptr, ptr_k, (num_items, g * k), validate=not known,
                     max_sizes=(max_num_elements, k) if known else None)
    return into, back
