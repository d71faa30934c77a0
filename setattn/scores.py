"""Attention scores: s_ij = f(q_i, k_j, e_ij), one number per edge and head.

Every score is a small module split in two steps so that the engine can do the
per-node work once and the per-edge work as little as possible:

* ``prepare_q(q)`` / ``prepare_k(k)``: per-node projections, (N, H, Dk) -> (N, H, A).
* ``combine(pq, pk, edge_attr=None)``: broadcastable (..., H, A) pair -> (..., H).
* ``prepare_both(x)``: both per-node terms of rows that are queries and keys at once
  (self-attention, ``q is k``); a score may compute them together.

``forward(q, k)`` is ``combine(prepare_q(q), prepare_k(k))`` on broadcastable inputs.
A user's own score is any module whose ``forward(q, k)`` (optionally
``forward(q, k, edge_attr)``) maps broadcastable (..., H, Dk) tensors to (..., H);
the engine treats it as having identity ``prepare`` steps.

Scores whose ``combine`` is a (scaled) dot product report ``dot_scale``; the engine
then runs them with matrix products / ``scaled_dot_product_attention``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class Score(nn.Module):
    """Base class: identity preparation; subclasses define ``combine``."""

    def prepare_q(self, q: Tensor) -> Tensor:
        """(N, H, Dk) -> (N, H, A) per-node query term."""
        return q

    def prepare_k(self, k: Tensor) -> Tensor:
        """(N, H, Dk) -> (N, H, A) per-node key term."""
        return k

    def prepare_both(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Both terms of rows that are queries and keys at once (self-attention):
        (N, H, Dk) -> ((N, H, A), (N, H, A)); a score may compute them together."""
        return self.prepare_q(x), self.prepare_k(x)

    def combine(self, pq: Tensor, pk: Tensor, edge_attr: Tensor | None = None) -> Tensor:
        """Broadcastable (..., H, A) prepared pair -> (..., H) logits."""
        raise NotImplementedError

    def dot_scale(self, dim: int) -> float | None:
        """The scale s if ``combine`` is ``s * <pq, pk>`` for prepared width ``dim``, else None."""
        return None

    def forward(self, q: Tensor, k: Tensor, edge_attr: Tensor | None = None) -> Tensor:
        """Broadcastable q, k (..., H, Dk) -> (..., H)."""
        return self.combine(self.prepare_q(q), self.prepare_k(k), edge_attr)


def _no_edge_attr(name: str, edge_attr: Tensor | None) -> None:
    if edge_attr is not None:
        raise ValueError(f"{name} score takes no edge_attr; pass an additive `bias` instead")


class Dot(Score):
    """s_ij = q_i . k_j (Luong "dot")."""

    def combine(self, pq: Tensor, pk: Tensor, edge_attr: Tensor | None = None) -> Tensor:
        _no_edge_attr("Dot", edge_attr)
        return (pq * pk).sum(-1)  # (..., H)

    def dot_scale(self, dim: int) -> float:
        return 1.0


class ScaledDot(Score):
    """s_ij = q_i . k_j / sqrt(Dk) (Vaswani et al. 2017); the engine's default.

    Args:
        scale: overrides 1 / sqrt(Dk) when given.
    """

    def __init__(self, scale: float | None = None):
        super().__init__()
        self.scale = scale

    def combine(self, pq: Tensor, pk: Tensor, edge_attr: Tensor | None = None) -> Tensor:
        _no_edge_attr("ScaledDot", edge_attr)
        return (pq * pk).sum(-1) * self.dot_scale(pq.shape[-1])  # (..., H)

    def dot_scale(self, dim: int) -> float:
        return self.scale if self.scale is not None else 1.0 / math.sqrt(dim)


class Bilinear(Score):
    """s_ij = q_i^T W_h k_j (Luong "general"), one W per head.

    Args:
        heads: H.
        dim_q: query width Dq.
        dim_k: key width Dk.
    """

    def __init__(self, heads: int, dim_q: int, dim_k: int | None = None):
        super().__init__()
        dim_k = dim_q if dim_k is None else dim_k
        self.weight = nn.Parameter(torch.empty(heads, dim_q, dim_k))  # (H, Dq, Dk)
        bound = 1.0 / math.sqrt(dim_q)
        nn.init.uniform_(self.weight, -bound, bound)

    def prepare_q(self, q: Tensor) -> Tensor:
        return torch.einsum("...hd,hde->...he", q, self.weight)  # (..., H, Dk)

    def combine(self, pq: Tensor, pk: Tensor, edge_attr: Tensor | None = None) -> Tensor:
        _no_edge_attr("Bilinear", edge_attr)
        return (pq * pk).sum(-1)  # (..., H)

    def dot_scale(self, dim: int) -> float:
        return 1.0


class Additive(Score):
    """s_ij = v_h^T tanh(W_h q_i + U_h k_j [+ e_ij]) (Bahdanau et al. 2015).

    Args:
        heads: H.
        dim_q: query width Dq.
        dim_k: key width Dk.
        hidden: width A of the tanh layer.

    ``edge_attr``, when given, is (E, H, A) and enters inside the tanh.
    """

    def __init__(self, heads: int, dim_q: int, dim_k: int | None = None, hidden: int = 32):
        super().__init__()
        dim_k = dim_q if dim_k is None else dim_k
        self.w_q = nn.Parameter(torch.empty(heads, dim_q, hidden))  # (H, Dq, A)
        self.w_k = nn.Parameter(torch.empty(heads, dim_k, hidden))  # (H, Dk, A)
        self.v = nn.Parameter(torch.empty(heads, hidden))  # (H, A)
        nn.init.uniform_(self.w_q, -1 / math.sqrt(dim_q), 1 / math.sqrt(dim_q))
        nn.init.uniform_(self.w_k, -1 / math.sqrt(dim_k), 1 / math.sqrt(dim_k))
        nn.init.uniform_(self.v, -1 / math.sqrt(hidden), 1 / math.sqrt(hidden))

    def prepare_q(self, q: Tensor) -> Tensor:
        return torch.einsum("...hd,hda->...ha", q, self.w_q)  # (..., H, A)

    def prepare_k(self, k: Tensor) -> Tensor:
        return torch.einsum("...hd,hda->...ha", k, self.w_k)  # (..., H, A)

    def combine(self, pq: Tensor, pk: Tensor, edge_attr: Tensor | None = None) -> Tensor:
        h = pq + pk if edge_attr is None else pq + pk + edge_attr  # (..., H, A)
        return (torch.tanh(h) * self.v).sum(-1)  # (..., H)


class ConcatAdditive(Score):
    """s_ij = v_h^T tanh(W_h [q_i; k_j] + b_h) (Luong "concat").

    W acting on the concatenation splits into a query block and a key block, so the
    engine still projects each node once.

    Args:
        heads: H.
        dim_q: query width Dq.
        dim_k: key width Dk.
        hidden: width A of the tanh layer.
    """

    def __init__(self, heads: int, dim_q: int, dim_k: int | None = None, hidden: int = 32):
        super().__init__()
        dim_k = dim_q if dim_k is None else dim_k
        self.dim_q = dim_q
        self.weight = nn.Parameter(torch.empty(heads, dim_q + dim_k, hidden))  # (H, Dq+Dk, A)
        self.bias = nn.Parameter(torch.zeros(heads, hidden))  # (H, A)
        self.v = nn.Parameter(torch.empty(heads, hidden))  # (H, A)
        bound = 1 / math.sqrt(dim_q + dim_k)
        nn.init.uniform_(self.weight, -bound, bound)
        nn.init.uniform_(self.v, -1 / math.sqrt(hidden), 1 / math.sqrt(hidden))

    def prepare_q(self, q: Tensor) -> Tensor:
        w = self.weight[:, : self.dim_q]  # (H, Dq, A)
        return torch.einsum("...hd,hda->...ha", q, w) + self.bias  # (..., H, A)

    def prepare_k(self, k: Tensor) -> Tensor:
        w = self.weight[:, self.dim_q :]  # (H, Dk, A)
        return torch.einsum("...hd,hda->...ha", k, w)  # (..., H, A)

    def combine(self, pq: Tensor, pk: Tensor, edge_attr: Tensor | None = None) -> Tensor:
        h = pq + pk if edge_attr is None else pq + pk + edge_attr  # (..., H, A)
        return (torch.tanh(h) * self.v).sum(-1)  # (..., H)


def head_dot(x: Tensor, att: Tensor) -> Tensor:
    """Per-head dot products: x (..., H, D), att (H, D) -> (..., H, 1).

    An elementwise product and a sum, not a matrix product: as an (H * D, H)
    block-diagonal GEMM it would have H output columns, a shape for which MKL's
    single-threaded kernels on AMD cores run about five times slower than this. On
    eager CPU tensors the engine's FUSED_GAT path computes it with a compiled kernel
    instead (``GAT.head_vectors``).
    """
    return (x * att).sum(-1, keepdim=True)


class GAT(Score):
    """s_ij = LeakyReLU(a_dst,h . q_i + a_src,h . k_j [+ e_ij]) (Velickovic et al. 2018).

    Args:
        heads: H.
        dim: width D of the (already projected) node features.
        negative_slope: LeakyReLU slope (0.2 in the paper and in PyG).

    ``edge_attr``, when given, is (E, H): the per-head edge term added before the
    LeakyReLU, as PyG's ``GATConv`` does with ``edge_dim``.
    """

    def __init__(self, heads: int, dim: int, negative_slope: float = 0.2):
        super().__init__()
        self.negative_slope = negative_slope
        self.att_src = nn.Parameter(torch.empty(heads, dim))  # (H, D)
        self.att_dst = nn.Parameter(torch.empty(heads, dim))  # (H, D)
        nn.init.xavier_uniform_(self.att_src)
        nn.init.xavier_uniform_(self.att_dst)

    def prepare_q(self, q: Tensor) -> Tensor:
        return head_dot(q, self.att_dst)  # (..., H, 1)

    def prepare_k(self, k: Tensor) -> Tensor:
        return head_dot(k, self.att_src)  # (..., H, 1)

    def combine(self, pq: Tensor, pk: Tensor, edge_attr: Tensor | None = None) -> Tensor:
        s = (pq + pk).squeeze(-1)  # (..., H)
        if edge_attr is not None:
            s = s + edge_attr
        return F.leaky_relu(s, self.negative_slope)

    def head_vectors(self) -> tuple[Tensor, Tensor] | None:
        """``(att_dst, att_src)``, (H, D) each: ``prepare_q`` / ``prepare_k`` are
        ``head_dot`` with them, which the engine's compiled CPU path computes in one
        node. A subclass whose preparation differs returns None."""
        return self.att_dst, self.att_src

    def fused_gat(self) -> float | None:
        """Opts into the engine's fused GAT edge kernel (``EnginePath.FUSED_GAT``).

        Returns:
            the LeakyReLU slope: ``combine`` is LeakyReLU(pq + pk [+ e]) of the terms
            ``prepare_q`` / ``prepare_k`` give, the form that kernel computes. A subclass
            whose ``combine`` or preparation differs returns None.
        """
        return self.negative_slope


class GATv2(Score):
    """s_ij = a_h^T LeakyReLU(W_h [q_i; k_j] [+ e_ij]) (Brody et al. 2022).

    Args:
        heads: H.
        dim: width D of q and k.
        hidden: width A of W's output; defaults to D.
        project: when False, W is the identity ([q; k] -> q + k), which is how PyG's
            ``GATv2Conv`` scores its already projected ``x_i``/``x_j``.
        negative_slope: LeakyReLU slope.

    ``edge_attr``, when given, is (E, H, A) and enters inside the LeakyReLU.
    """

    def __init__(
        self,
        heads: int,
        dim: int,
        hidden: int | None = None,
        project: bool = True,
        negative_slope: float = 0.2,
    ):
        super().__init__()
        hidden = dim if (hidden is None or not project) else hidden
        self.negative_slope = negative_slope
        self.w_q = self.w_k = None
        if project:
            self.w_q = nn.Parameter(torch.empty(heads, dim, hidden))  # (H, D, A)
            self.w_k = nn.Parameter(torch.empty(heads, dim, hidden))  # (H, D, A)
            nn.init.uniform_(self.w_q, -1 / math.sqrt(2 * dim), 1 / math.sqrt(2 * dim))
            nn.init.uniform_(self.w_k, -1 / math.sqrt(2 * dim), 1 / math.sqrt(2 * dim))
        self.att = nn.Parameter(torch.empty(heads, hidden))  # (H, A)
        nn.init.xavier_uniform_(self.att)

    def prepare_q(self, q: Tensor) -> Tensor:
        if self.w_q is None:
            return q
        return torch.einsum("...hd,hda->...ha", q, self.w_q)  # (..., H, A)

    def prepare_k(self, k: Tensor) -> Tensor:
        if self.w_k is None:
            return k
        return torch.einsum("...hd,hda->...ha", k, self.w_k)  # (..., H, A)

    def combine(self, pq: Tensor, pk: Tensor, edge_attr: Tensor | None = None) -> Tensor:
        h = pq + pk if edge_attr is None else pq + pk + edge_attr  # (..., H, A)
        return (F.leaky_relu(h, self.negative_slope) * self.att).sum(-1)  # (..., H)

    def fused_edges(self) -> tuple[Tensor, float] | None:
        """Opts into the engine's fused GATv2 edge kernel (``EnginePath.FUSED_GATV2``).

        Returns:
            ``(att (H, A), negative_slope)``: ``combine`` is att . LeakyReLU(pq + pk [+ e]),
            the form that kernel computes. A subclass whose ``combine`` differs returns None.
        """
        return self.att, self.negative_slope
