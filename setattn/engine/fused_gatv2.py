"""FUSED_GATV2: GATv2 attention over an edge list as one autograd node.

A score opts in through ``score.fused_edges()`` (``setattn.scores.GATv2``), which gives
the parameters of the form computed here, s_e = att . LeakyReLU(pq_dst + pk_src [+ e]);
:func:`setattn.engine.plan.fused_gatv2_applies` says when a call qualifies. On eager CPU
tensors the node runs the compiled loops of :mod:`setattn.engine.cpu_kernels` (one pass
over each target's edges: no (E, H, A) activation or (E, H, Dv) message is stored);
elsewhere the torch ops of :func:`gatv2_edges`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
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
from setattn.engine.scoring import prepare
from setattn.engine.softmax import segment_softmax
from setattn.topology import Edges


def attend_fused(q: Tensor, k: Tensor, v: Tensor, top: Edges, score: nn.Module,
                 edge_attr: Tensor | None) -> tuple[Tensor, Tensor]:
    """GATv2 attention along the edges of ``top`` through :class:`GATv2Edges`.

    Args:
        q: (Nq, H, Dk); k: (Nk, H, Dk); v: (Nk, H, Dv); edge_attr: (E, H, A) or None.
        score: a score whose ``fused_edges()`` is not None.

    Returns:
        (Nq, H, Dv) output and the (E, H) weights.
    """
    pq, pk = prepare(score, q, k)
    att, slope = score.fused_edges()
    # values that are the prepared keys (an unprojected score with v is k) are passed as
    # None: the node then reuses the key rows it gathered
    layout = target_layout(top) if cpu_kernels_serve(v) else None
    return GATv2Edges.apply(pq, pk, None if v is pk else v, edge_attr, att, top.index[0],
                            top.index[1], top.num_q, slope, layout)


def gatv2_edges(pq, pk, v, edge_attr, att, src, dst, num_q: int, slope: float):
    """GATv2 attention over edges, in ops autograd can differentiate too: the in-place
    steps write only fresh tensors, and a LeakyReLU slope >= 0 lets ``leaky_relu_``
    keep what its backward needs.

    Args:
        pq: (Nq, H, A) prepared queries; pk: (Nk, H, A) prepared keys.
        v: (Nk, H, Dv) values, or None when the values are ``pk`` itself.
        edge_attr: (E, H, A) or None; att: (H, A); src, dst: (E,).

    Returns:
        (Nq, H, Dv) output, (E, H) weights, and for a hand-written backward the
        activated scores g (E, H, A) and the gathered values (E, H, Dv).
    """
    k_e = pk.index_select(0, src)  # (E, H, A)
    z = pq.index_select(0, dst).add_(k_e)  # (E, H, A)
    if edge_attr is not None:
        z.add_(edge_attr)
    g = F.leaky_relu_(z, slope)  # (E, H, A), in place: z is not needed again
    w = segment_softmax((g * att).sum(-1), dst, num_q)  # (E, H)
    v_e = k_e if v is None else v.index_select(0, src)  # (E, H, Dv)
    out = v_e.new_zeros(num_q, *v_e.shape[1:]).index_add_(0, dst, v_e * w[..., None])
    return out, w, g, v_e


class GATv2Edges(torch.autograd.Function):
    """``gatv2_edges`` as one autograd node with a hand-written backward.

    Small graphs (a batch of molecules: a few hundred atoms) spend most of their time
    in per-operation overhead: this runs the scores, softmax and sum in about half the
    operations autograd would record, and keeps only the activated scores (E, H, A),
    the gathered values (E, H, Dv) and the weights (E, H) for the backward pass. Under
    ``create_graph`` the backward lets autograd differentiate ``gatv2_edges`` instead,
    so second derivatives stay right. Needs a LeakyReLU slope >= 0 (the sign of the activation
    then tells which side of 0 its input was).
    """

    @staticmethod
    def forward(ctx, pq, pk, v, edge_attr, att, src, dst, num_q, slope, layout=None):
        ctx.num_q, ctx.slope, ctx.layout = num_q, slope, layout
        if layout is not None:
            out, w = _cpu_forward(pq, pk, v, edge_attr, att, slope, layout)
            ctx.save_for_backward(w, pq, pk, v, edge_attr, att, src, dst)
            return out, w  # (Nq, H, Dv), (E, H)
        out, w, g, v_e = gatv2_edges(pq, pk, v, edge_attr, att, src, dst, num_q, slope)
        ctx.save_for_backward(g, w, v_e, pq, pk, v, edge_attr, att, src, dst)
        return out, w  # (Nq, H, Dv), (E, H)

    @staticmethod
    def backward(ctx, grad_out, grad_w):
        if torch.is_grad_enabled():  # create_graph: let autograd differentiate the ops
            return GATv2Edges._plain_backward(ctx, grad_out, grad_w)
        if ctx.layout is not None:
            return _cpu_backward(ctx, grad_out, grad_w)
        g, w, v_e, pq, pk, v, edge_attr, att, src, dst = ctx.saved_tensors
        need = ctx.needs_input_grad
        go_e = grad_out.index_select(0, dst)  # (E, H, Dv)
        gw = (go_e * v_e).sum(-1)  # (E, H) gradient of the weights through the sum
        if grad_w is not None:
            gw = gw + grad_w
        # softmax: d logit_e = w_e (gw_e - sum of w gw over the edges into e's target)
        wg = w * gw  # (E, H)
        total = wg.new_zeros(ctx.num_q, wg.shape[1]).index_add_(0, dst, wg)  # (Nq, H)
        gs = wg.sub_(w * total.index_select(0, dst))  # (E, H)
        g_att = (gs[..., None] * g).sum(0) if need[4] else None  # (H, A)
        # through the LeakyReLU, read off its output g: (E, H, A)
        gz = torch.ops.aten.leaky_relu_backward(gs[..., None] * att, g, ctx.slope, True)
        g_pq = gz.new_zeros(pq.shape).index_add_(0, dst, gz) if need[0] else None  # (Nq, H, A)
        g_e = gz if need[3] else None  # (E, H, A)
        msg = go_e.mul_(w[..., None])  # (E, H, Dv) gradient of the gathered values
        g_v = None
        if v is None:  # the values are the keys: both gradients reach pk
            gz = gz + msg
        elif need[2]:
            g_v = msg.new_zeros(v.shape).index_add_(0, src, msg)  # (Nk, H, Dv)
        g_pk = gz.new_zeros(pk.shape).index_add_(0, src, gz) if need[1] else None  # (Nk, H, A)
        return g_pq, g_pk, g_v, g_e, g_att, None, None, None, None, None

    @staticmethod
    def _plain_backward(ctx, grad_out, grad_w):
        pq, pk, v, edge_attr, att, src, dst = ctx.saved_tensors[-7:]

        def outputs(pq, pk, v, edge_attr, att):
            return gatv2_edges(pq, pk, v, edge_attr, att, src, dst, ctx.num_q,
                               ctx.slope)[:2]

        grads = grads_again(ctx, outputs, (pq, pk, v, edge_attr, att), grad_out, grad_w)
        return (*grads, None, None, None, None, None)


def _cpu_forward(pq: Tensor, pk: Tensor, v: Tensor | None, edge_attr: Tensor | None,
                 att: Tensor, slope: float, layout: tuple) -> tuple[Tensor, Tensor]:
    """``gatv2_edges``' output (Nq, H, Dv) and weights (E, H) from the CPU kernels."""
    from setattn.engine import cpu_kernels

    _, _, src, dst = layout
    pq_, pk_, v_, ea, att_ = as_arrays(pq, pk, v, edge_attr, att)
    w = cpu_kernels.gatv2_logits(src, dst, pq_, pk_, or_unread(ea, pq_), ea is not None,
                                 att_, pq_.dtype.type(slope))  # (E, H)
    out = softmax_sum(layout, w, or_unread(v_, pk_))  # w: logits -> weights
    return torch.from_numpy(out), torch.from_numpy(w)


def _cpu_backward(ctx, grad_out: Tensor, grad_w: Tensor | None) -> tuple:
    """``GATv2Edges.backward`` from the CPU kernels; values that are the keys (v None)
    get their gradient added to the keys'."""
    from setattn.engine import cpu_kernels

    w, pq, pk, v, edge_attr, att = ctx.saved_tensors[:6]
    _, _, src, dst = ctx.layout
    need = ctx.needs_input_grad
    pq_, pk_, v_, ea, att_, w_, go, gw = as_arrays(pq, pk, v, edge_attr, att, w, grad_out,
                                                   grad_w)
    gs, g_v = softmax_sum_grads(ctx.layout, w_, or_unread(v_, pk_), go, gw)
    g_pq, g_pk, g_e, g_att = cpu_kernels.gatv2_logit_grads(
        src, dst, pq_, pk_, or_unread(ea, pq_), ea is not None, att_, gs,
        pq_.dtype.type(ctx.slope), bool(need[3]))
    if v_ is None:
        g_pk += g_v
    grads = (g_pq, g_pk, g_v, g_e, g_att)
    return (*(torch.from_numpy(g) if wanted else None for g, wanted in zip(grads, need[:5])),
            None, None, None, None, None)
