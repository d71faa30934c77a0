"""Softmax over the valid entries of a block or over the edges into each target, and the
hard (top-k) attention built on them."""

from __future__ import annotations

import torch
from torch import Tensor


def straight_through(hard_w: Tensor, soft_w: Tensor) -> Tensor:
    """Forward value ``hard_w``, gradient of ``soft_w`` (both the same shape)."""
    return hard_w + (soft_w - soft_w.detach())


def masked_softmax(logits: Tensor, valid: Tensor | None, dim: int = -1) -> Tensor:
    """Softmax along ``dim`` over the valid entries only; rows with none valid give 0.

    Args:
        logits: (..., K) scores.
        valid: bool, broadcastable to ``logits``; None means all valid.
        dim: the dimension to normalise over.

    Returns:
        weights of the shape of ``logits``.
    """
    if valid is not None:
        logits = logits.masked_fill(~valid, float("-inf"))
    top = logits.amax(dim, keepdim=True).detach()
    top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
    ex = torch.exp(logits - top)  # masked entries: exp(-inf) = 0
    den = ex.sum(dim, keepdim=True)
    return ex / torch.where(den > 0, den, torch.ones_like(den))


def hard_dense(w: Tensor, valid: Tensor | None, k: int) -> Tensor:
    """Keep the k largest valid weights along the last dim, renormalised (straight-through).

    Args:
        w: (..., K) soft weights; valid: bool broadcastable to ``w``, or None.
        k: how many weights each row keeps.
    """
    k = min(k, w.shape[-1])
    ranked = w if valid is None else w.masked_fill(~valid, -1.0)
    keep = torch.zeros_like(w, dtype=torch.bool).scatter_(-1, ranked.topk(k, dim=-1).indices, True)
    if valid is not None:
        keep &= valid
    hw = w.detach() * keep
    hw = hw / hw.sum(-1, keepdim=True).clamp_min(torch.finfo(w.dtype).tiny)
    return straight_through(hw, w)


def segment_softmax(logits: Tensor, index: Tensor, num_segments: int,
                    valid: Tensor | None = None) -> Tensor:
    """Softmax of edge logits over the edges that share a target.

    Args:
        logits: (E, H) scores.
        index: (E,) target node of every edge.
        num_segments: number of targets N.
        valid: (E, H) or (E, 1) bool, or None.

    Returns:
        (E, H) weights; per target and head they sum to 1, or are all 0 when the
        target has no valid edge.
    """
    if valid is not None:
        logits = logits.masked_fill(~valid, float("-inf"))
    h = logits.shape[1]
    idx = index[:, None].expand(-1, h)  # (E, H)
    top = logits.new_full((num_segments, h), float("-inf"))
    top = top.scatter_reduce_(0, idx, logits.detach(), "amax", include_self=True)  # (N, H)
    top = top.nan_to_num_(nan=0.0, posinf=0.0, neginf=0.0)  # no finite logit: shift by 0
    # index_select, not advanced indexing: its backward is a fast index_add
    ex = torch.exp(logits - top.index_select(0, index))  # (E, H)
    den = logits.new_zeros(num_segments, h).index_add_(0, index, ex)  # (N, H)
    den = torch.where(den > 0, den, 1.0)  # (N, H)
    return ex / den.index_select(0, index)


def hard_edges(w: Tensor, index: Tensor, num_segments: int, k: int,
               valid: Tensor | None) -> Tensor:
    """Top-k weights per target and head over edges, renormalised (straight-through).

    Args:
        w: (E, H) soft weights; index: (E,) target of every edge.
        num_segments: number of targets N; k: how many edges each target keeps.
        valid: (E, H) or (E, 1) bool, or None.
    """
    e, h = w.shape
    wd = w.detach().double()
    if valid is not None:
        wd = wd.masked_fill(~valid, -1.0)
    # sort by target ascending, then weight descending
    key = index[:, None].double() + 0.25 * (1.0 - wd)  # (E, H), in [t, t + 0.5]
    order = key.argsort(dim=0, stable=True)  # (E, H)
    counts = index.new_zeros(num_segments).index_add_(0, index, torch.ones_like(index))  # (N,)
    starts = torch.cumsum(counts, 0) - counts  # (N,)
    sorted_index = index.sort(stable=True).values  # (E,) same for every head
    rank_sorted = torch.arange(e, device=w.device) - starts[sorted_index]  # (E,)
    rank = torch.empty_like(order).scatter_(0, order, rank_sorted[:, None].expand(-1, h))
    keep = rank < k  # (E, H)
    if valid is not None:
        keep &= valid
    hw = w.detach() * keep
    den = w.new_zeros(num_segments, h).index_add_(0, index, hw)  # (N, H)
    hw = hw / den[index].clamp_min(torch.finfo(w.dtype).tiny)  # (E, H)
    return straight_through(hw, w)
