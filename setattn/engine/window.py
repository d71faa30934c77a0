"""WINDOW_BLOCKS: every query's 2r + 1 window slots gathered into (N, W) blocks.

Eager CPU runs give windows to the sparse paths instead (see :mod:`setattn.engine.plan`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from setattn.engine.plan import dot_logits
from setattn.engine.scoring import combine, dot_scale, prepare
from setattn.engine.softmax import hard_dense, masked_softmax
from setattn.topology import Window


def scatter_to_slots(t: Tensor | None, valid: Tensor) -> Tensor | None:
    """Per-edge (E, ...) values in target-major order -> (*valid.shape, ...) slots."""
    if t is None:
        return None
    out = t.new_zeros(*valid.shape, *t.shape[1:])  # (N, W, ...)
    out[valid] = t
    return out


def attend_window(q: Tensor, k: Tensor, v: Tensor, top: Window, score: nn.Module,
                  bias: Tensor | None, mask: Tensor | None, edge_attr: Tensor | None,
                  p: float, top_k: int | None,
                  need_weights: bool = True) -> tuple[Tensor, Tensor | None]:
    """Windowed attention over gathered (N, W) key blocks, W = 2r + 1.

    Args:
        q, k: (N, H, Dk); v: (N, H, Dv).
        bias: (E, H|1) or None; mask: (E, H|1) bool or None; edge_attr: (E, H[, A]) or None,
            all in the window's canonical edge order.
        p: dropout probability; top_k: hard attention's k, or None.
        need_weights: return the weights (picking the valid slots reads their count).

    Returns:
        (N, H, Dv) output and the (E, H) weights (without dropout), or None.
    """
    index, valid = top.neighbours()  # (N, W), (N, W)
    pq, pk = prepare(score, q, k)
    kg = pk[index]  # (N, W, H, A)
    scale = dot_scale(score, pq.shape[-1])
    if dot_logits(scale, edge_attr):
        logits = torch.einsum("nha,nwha->nwh", pq, kg) * scale  # (N, W, H)
    else:
        logits = combine(score, pq[:, None], kg, scatter_to_slots(edge_attr, valid))  # (N, W, H)
    if bias is not None:
        logits = logits + scatter_to_slots(bias, valid)
    ok = valid[..., None]  # (N, W, 1)
    if mask is not None:
        ok = ok & scatter_to_slots(mask, valid)  # (N, W, H|1)
    w = masked_softmax(logits, ok, dim=1)  # (N, W, H)
    if top_k is not None:
        w = hard_dense(w.transpose(1, 2), ok.transpose(1, 2), top_k).transpose(1, 2)
    wd = F.dropout(w, p) if p > 0 else w
    out = torch.einsum("nwh,nwhd->nhd", wd, v[index])  # (N, H, Dv)
    return out, (w[valid] if need_weights else None)
