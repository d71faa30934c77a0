"""How every path calls a score: a :class:`setattn.scores.Score` in its two steps, any
other module as ``score(q, k[, edge_attr])`` with identity preparation."""

from __future__ import annotations

from torch import Tensor, nn

from setattn.scores import ScaledDot, Score

DEFAULT_SCORE = ScaledDot()


def prepare(score: nn.Module, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
    """Per-node terms: q (Nq, H, Dk), k (Nk, H, Dk) -> pq (Nq, H, A), pk (Nk, H, A).

    A module that is not a ``Score`` gets q and k back as they are (the same objects).
    When q is k (self-attention on the same rows) a ``Score`` prepares both at once.
    """
    if isinstance(score, Score):
        return score.prepare_both(q) if q is k else (score.prepare_q(q), score.prepare_k(k))
    return q, k


def combine(score: nn.Module, pq: Tensor, pk: Tensor, edge_attr: Tensor | None) -> Tensor:
    """Broadcastable prepared pairs (..., H, A) (+ edge features) -> (..., H) logits."""
    if isinstance(score, Score):
        return score.combine(pq, pk, edge_attr)
    return score(pq, pk) if edge_attr is None else score(pq, pk, edge_attr)


def dot_scale(score: nn.Module, dim: int) -> float | None:
    """The scale s when the score is ``s * <pq, pk>`` at prepared width ``dim``, else None."""
    return score.dot_scale(dim) if isinstance(score, Score) else None
