"""SPARSE_GATHER and SPARSE_CSR: attention over an edge list.

Logits per edge, a max-shifted softmax per target node (segment softmax) and a sum of
the weighted values into each target. SPARSE_GATHER gathers (E, H, D) messages and
index_adds them; SPARSE_CSR runs the sum (and dot-product logits) as CSR products
(:mod:`setattn.engine.csr`), keeping only the (E, H) weights.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from setattn.engine.csr import EdgeDot, EdgeSum, csr_pair
from setattn.engine.plan import dot_logits, reuse_key_rows
from setattn.engine.scoring import combine, dot_scale, prepare
from setattn.engine.softmax import hard_edges, segment_softmax
from setattn.topology import Edges


def attend_edges(q: Tensor, k: Tensor, v: Tensor, top: Edges, score: nn.Module,
                 bias: Tensor | None, mask: Tensor | None, edge_attr: Tensor | None,
                 p: float, top_k: int | None, csr: bool) -> tuple[Tensor, Tensor]:
    """Attention along the edges of ``top``.

    Args:
        q: (Nq, H, Dk); k: (Nk, H, Dk); v: (Nk, H, Dv).
        bias: (E, H|1) or None; mask: (E, H|1) bool or None; edge_attr: (E, H[, A]) or None.
        p: dropout probability; top_k: hard attention's k, or None.
        csr: SPARSE_CSR (CSR products) rather than SPARSE_GATHER.

    Returns:
        (Nq, H, Dv) output and the (E, H) weights (without dropout).
    """
    src, dst = top.index[0], top.index[1]
    pq, pk = prepare(score, q, k)
    scale = dot_scale(score, pq.shape[-1])
    pk_e = None
    if csr and dot_logits(scale, edge_attr):
        fwd, bwd = csr_pair(top, q.shape[1])
        logits = EdgeDot.apply(pq.contiguous(), pk.contiguous(), fwd, bwd) * scale  # (E, H)
    else:
        pq_e, pk_e = pq.index_select(0, dst), pk.index_select(0, src)  # (E, H, A)
        logits = combine(score, pq_e, pk_e, edge_attr)  # (E, H)
    if bias is not None:
        logits = logits + bias
    w = segment_softmax(logits, dst, top.num_q, mask)  # (E, H)
    if top_k is not None:
        w = hard_edges(w, dst, top.num_q, top_k, mask)
    wd = F.dropout(w, p) if p > 0 else w
    reuse = reuse_key_rows(v, pk, pk_e)
    if csr and not reuse:
        fwd, bwd = csr_pair(top, q.shape[1])
        return EdgeSum.apply(wd, v, fwd, bwd), w
    v_e = pk_e if reuse else v.index_select(0, src)  # (E, H, Dv)
    msg = v_e * wd[..., None]  # (E, H, Dv)
    out = v.new_zeros(top.num_q, v.shape[1], v.shape[2]).index_add_(0, dst, msg)  # (Nq, H, Dv)
    return out, w
