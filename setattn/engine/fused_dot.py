"""FUSED_DOT: dot-product attention over an edge list as one autograd node, on the CPU.

For a score whose logits are ``scale * <pq_dst, pk_src>`` (``Dot``, ``ScaledDot``,
``Bilinear``: the score's ``dot_scale``) with nothing else in them, the node runs the
compiled loops of :mod:`setattn.engine.cpu_kernels`: the logits in one pass over the
edges, the softmax and weighted sum of :func:`setattn.engine.fused_gat.softmax_sum`, and
their gradients. No (E, H, A) gathered query or key and no (E, H, Dv) message is made.
Attention pooling (one query per set, one edge per item) is its main user: there the
gathered rows are as many as the items, and a dozen recorded operations cost more than
the arithmetic. :func:`setattn.engine.plan.fused_dot_applies` says when a call
qualifies; outside eager CPU tensors the node runs the torch ops of :func:`dot_edges`.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from setattn.engine.fused_gat import (
    as_arrays,
    grads_again,
    or_unread,
    softmax_sum,
    softmax_sum_grads,
    target_layout,
)
from setattn.engine.plan import cpu_kernels_serve
from setattn.engine.scoring import dot_scale, prepare
from setattn.engine.softmax import segment_softmax
from setattn.topology import Edges


def attend_fused_dot(q: Tensor, k: Tensor, v: Tensor, top: Edges,
                     score: nn.Module) -> tuple[Tensor, Tensor]:
    """Dot-product attention along the edges of ``top`` through :class:`DotEdges`.

    Args:
        q: (Nq, H, Dk); k: (Nk, H, Dk); v: (Nk, H, Dv).
        score: a score whose ``dot_scale`` at the prepared width is not None.

    Returns:
        (Nq, H, Dv) output and the (E, H) weights.
    """
    pq, pk = prepare(score, q, k)  # (Nq, H, A), (Nk, H, A)
    scale = dot_scale(score, pq.shape[-1])
    layout = target_layout(top) if cpu_kernels_serve(v) and pq.dtype == pk.dtype else None
    # values that are the prepared keys are passed as None: the kernels read the key rows
    return DotEdges.apply(pq, pk, None if v is pk else v, top.index[0], top.index[1],
                          top.num_q, scale, layout)


def dot_edges(pq: Tensor, pk: Tensor, v: Tensor | None, src: Tensor, dst: Tensor, num_q: int,
              scale: float) -> tuple[Tensor, Tensor]:
    """Dot-product attention over edges in torch ops (autograd can differentiate them).

    Args:
        pq: (Nq, H, A); pk: (Nk, H, A); v: (Nk, H, Dv), or None when the values are pk.
        src, dst: (E,); scale: the logits' scale.

    Returns:
        (Nq, H, Dv) output and (E, H) weights.
    """
    k_e = pk.index_select(0, src)  # (E, H, A)
    logits = (pq.index_select(0, dst) * k_e).sum(-1) * scale  # (E, H)
    w = segment_softmax(logits, dst, num_q)  # (E, H)
    v_e = k_e if v is None else v.index_select(0, src)  # (E, H, Dv)
    out = v_e.new_zeros(num_q, *v_e.shape[1:]).index_add_(0, dst, v_e * w[..., None])
    return out, w


class DotEdges(torch.autograd.Function):
    """Dot-product attention over edges as one node: the compiled CPU kernels when a
    layout is given (eager CPU tensors), else :func:`dot_edges`, whose ops autograd
    differentiates. Under ``create_graph`` the backward differentiates :func:`dot_edges`,
    so second derivatives stay right."""

    @staticmethod
    def forward(ctx, pq, pk, v, src, dst, num_q, scale, layout):
        ctx.num_q, ctx.scale, ctx.layout = num_q, scale, layout
        if layout is None:
            out, w = dot_edges(pq, pk, v, src, dst, num_q, scale)
        else:
            out, w = _cpu_forward(pq, pk, v, scale, layout)
        ctx.save_for_backward(w, pq, pk, v, src, dst)
        return out, w  # (Nq, H, Dv), (E, H)

    @staticmethod
    def backward(ctx, grad_out, grad_w):
        if ctx.layout is None or torch.is_grad_enabled():
            return DotEdges._plain_backward(ctx, grad_out, grad_w)
        return _cpu_backward(ctx, grad_out, grad_w)

    @staticmethod
    def _plain_backward(ctx, grad_out, grad_w):
        """Differentiates :func:`dot_edges` again (:func:`grads_again`)."""
        _, pq, pk, v, src, dst = ctx.saved_tensors

        def outputs(pq, pk, v):
            return dot_edges(pq, pk, v, src, dst, ctx.num_q, ctx.scale)

        grads = grads_again(ctx, outputs, (pq, pk, v), grad_out, grad_w)
        return (*grads, None, None, None, None, None)


def _cpu_forward(pq: Tensor, pk: Tensor, v: Tensor | None, scale: float,
                 layout: tuple) -> tuple[Tensor, Tensor]:
    """``dot_edges``' output (Nq, H, Dv) and weights (E, H) from the CPU kernels."""
    from setattn.engine import cpu_kernels

    _, _, src, dst = layout
    pq_, pk_, v_ = as_arrays(pq, pk, v)
    w = cpu_kernels.dot_logits(src, dst, pq_, pk_, pq_.dtype.type(scale))  # (E, H)
    out = softmax_sum(layout, w, or_unread(v_, pk_))  # w: logits -> weights
    return torch.from_numpy(out), torch.from_numpy(w)


def _cpu_backward(ctx, grad_out: Tensor, grad_w: Tensor | None) -> tuple:
    """``DotEdges.backward`` from the CPU kernels; values that are the keys (v None) get
    their gradient added to the keys'."""
    from setattn.engine import cpu_kernels

    w, pq, pk, v = ctx.saved_tensors[:4]
    _, _, src, dst = ctx.layout
    pq_, pk_, v_, w_, go, gw = as_arrays(pq, pk, v, w, grad_out, grad_w)
    gs, g_v = softmax_sum_grads(ctx.layout, w_, or_unread(v_, pk_), go, gw)
    g_q, g_k = cpu_kernels.dot_logit_grads(src, dst, pq_, pk_, gs, pq_.dtype.type(ctx.scale))
    if v_ is None:
        g_k += g_v
    grads = (g_q, g_k, g_v)
    return (*(torch.from_numpy(g) if need else None
              for g, need in zip(grads, ctx.needs_input_grad[:3])),
            None, None, None, None, None)
