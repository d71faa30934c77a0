"""FUSED_GAT: GAT attention over an edge list as one autograd node.

A score opts in through ``score.fused_gat()`` (``setattn.scores.GAT``), which gives the
LeakyReLU slope of the form computed here, s_e = LeakyReLU(pq_dst + pk_src [+ e]) with
pq, pk the per-node terms (N, H, 1) the score prepares. Only (E, H) tensors are made for
the scores and the softmax; the sum gathers the (E, H, D) value rows once.
:func:`setattn.engine.plan.fused_gat_applies` says when a call qualifies.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from setattn.engine.scoring import prepare
from setattn.engine.softmax import segment_softmax
from setattn.topology import Edges


def attend_fused_gat(q: Tensor, k: Tensor, v: Tensor, top: Edges, score: nn.Module,
                     edge_attr: Tensor | None) -> tuple[Tensor, Tensor]:
    """GAT attention along the edges of ``top`` through :class:`GATEdges`.

    Args:
        q: (Nq, H, Dk); k: (Nk, H, Dk); v: (Nk, H, Dv); edge_attr: (E, H) or None.
        score: a score whose ``fused_gat()`` is not None.

    Returns:
        (Nq, H, Dv) output and the (E, H) weights.
    """
    pq, pk = prepare(score, q, k)  # (Nq, H, 1), (Nk, H, 1)
    return GATEdges.apply(pq.squeeze(-1), pk.squeeze(-1), v, edge_attr, top.index[0],
                          top.index[1], top.num_q, score.fused_gat())


def gat_edges(pq, pk, v, edge_attr, src, dst, num_q: int, slope: float):
    """GAT attention over edges in plain ops (autograd can differentiate them).

    Args:
        pq: (Nq, H) target terms; pk: (Nk, H) source terms; v: (Nk, H, Dv).
        edge_attr: (E, H) or None; src, dst: (E,).

    Returns:
        (Nq, H, Dv) output, (E, H) weights, the (E, H) activated scores and the
        gathered values (E, H, Dv).
    """
    z = pq.index_select(0, dst).add_(pk.index_select(0, src))  # (E, H)
    if edge_attr is not None:
        z.add_(edge_attr)
    s = F.leaky_relu_(z, slope)  # (E, H), in place: z is not needed again
    w = segment_softmax(s, dst, num_q)  # (E, H)
    v_e = v.index_select(0, src)  # (E, H, Dv)
    out = v_e.new_zeros(num_q, *v_e.shape[1:]).index_add_(0, dst, v_e * w[..., None])
    return out, w, s, v_e


class GATEdges(torch.autograd.Function):
    """``gat_edges`` as one autograd node with a hand-written backward.

    A batch of small graphs (molecules) spends most of its time in per-operation
    overhead; this records one node instead of a dozen, builds no sparse layout (which
    a new batch every step would pay for), and keeps the (E, H) weights and scores and
    the gathered values (E, H, Dv) for the backward pass. Under ``create_graph`` the
    backward lets autograd differentiate ``gat_edges`` instead, so second derivatives
    stay right. Needs a LeakyReLU slope >= 0 (the sign of the activation then tells
    which side of 0 its input was).
    """

    @staticmethod
    def forward(ctx, pq, pk, v, edge_attr, src, dst, num_q, slope):
        out, w, s, v_e = gat_edges(pq, pk, v, edge_attr, src, dst, num_q, slope)
        ctx.save_for_backward(s, w, v_e, pq, pk, v, edge_attr, src, dst)
        ctx.num_q, ctx.slope = num_q, slope
        return out, w  # (Nq, H, Dv), (E, H)

    @staticmethod
    def backward(ctx, grad_out, grad_w):
        s, w, v_e, pq, pk, v, edge_attr, src, dst = ctx.saved_tensors
        if torch.is_grad_enabled():  # create_graph: let autograd differentiate the ops
            return GATEdges._plain_backward(ctx, grad_out, grad_w)
        need = ctx.needs_input_grad
        go_e = grad_out.index_select(0, dst)  # (E, H, Dv)
        gw = (go_e * v_e).sum(-1)  # (E, H) through the sum
        if grad_w is not None:
            gw = gw + grad_w
        # softmax: d s_e = w_e (gw_e - sum of w gw over the edges into e's target)
        wg = w * gw  # (E, H)
        total = wg.new_zeros(ctx.num_q, wg.shape[1]).index_add_(0, dst, wg)  # (Nq, H)
        gs = wg.sub_(w * total.index_select(0, dst))  # (E, H)
        gz = torch.ops.aten.leaky_relu_backward(gs, s, ctx.slope, True)  # (E, H)
        g_pq = gz.new_zeros(pq.shape).index_add_(0, dst, gz) if need[0] else None  # (Nq, H)
        g_pk = gz.new_zeros(pk.shape).index_add_(0, src, gz) if need[1] else None  # (Nk, H)
        g_v = None
        if need[2]:
            msg = go_e.mul_(w[..., None])  # (E, H, Dv)
            g_v = msg.new_zeros(v.shape).index_add_(0, src, msg)  # (Nk, H, Dv)
        g_e = gz if need[3] else None  # (E, H)
        return g_pq, g_pk, g_v, g_e, None, None, None, None

    @staticmethod
    def _plain_backward(ctx, grad_out, grad_w):
        _, _, _, pq, pk, v, edge_attr, src, dst = ctx.saved_tensors
        inputs = (pq, pk, v, edge_attr)
        wanted = [t for t, need in zip(inputs, ctx.needs_input_grad) if need]
        outs = gat_edges(pq, pk, v, edge_attr, src, dst, ctx.num_q, ctx.slope)[:2]
        pairs = [(o, g) for o, g in zip(outs, (grad_out, grad_w)) if g is not None]
        grads = iter(torch.autograd.grad([o for o, _ in pairs], wanted, [g for _, g in pairs],
                                         create_graph=True, allow_unused=True))
        picked = [next(grads) if need else None for need in ctx.needs_input_grad[:4]]
        return (*picked, None, None, None, None)
