"""FUSED_GAT: GAT attention over an edge list as one autograd node.

A score opts in through ``score.fused_gat()`` (``setattn.scores.GAT``), which gives the
LeakyReLU slope of the form computed here, s_e = LeakyReLU(pq_dst + pk_src [+ e]) with
pq, pk the per-node terms (N, H, 1) the score prepares. On eager CPU tensors the node runs
the compiled loops of :mod:`setattn.engine.cpu_kernels` (one pass over each target's
edges, nothing of size (E, H, D) stored); elsewhere (CUDA, torch.compile) it runs torch
ops that make only (E, H) tensors for the scores and the softmax and gather the (E, H, D)
value rows once. :func:`setattn.engine.plan.fused_gat_applies` says when a call
qualifies.
"""

from __future__ import annotations

import sys

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from setattn.engine.csr import csr_pair, sddmm, spmm
from setattn.engine.plan import cpu_kernels_serve, csr_sum_pays_off
from setattn.engine.scoring import prepare
from setattn.engine.softmax import segment_softmax
from setattn.topology import Edges


def attend_fused_gat(q: Tensor, k: Tensor, v: Tensor, top: Edges, score: nn.Module,
                     edge_attr: Tensor | None) -> tuple[Tensor, Tensor]:
    """GAT attention along the edges of ``top`` through :class:`GATEdges`, or on a
    large graph (``csr_sum_pays_off``) on the CPU through :class:`GATRows`.

    Args:
        q: (Nq, H, Dk); k: (Nk, H, Dk); v: (Nk, H, Dv); edge_attr: (E, H) or None.
        score: a score whose ``fused_gat()`` is not None.

    Returns:
        (Nq, H, Dv) output and the (E, H) weights.
    """
    compiled = cpu_kernels_serve(v)
    if compiled and csr_sum_pays_off(top):
        kernels = rows_compiled(top, v.shape[1])  # before row_layout caches the layout
        pq, pk = node_terms(score, q, k, kernels)  # (Nq, H), (Nk, H)
        return GATRows.apply(pq, pk, v, edge_attr, top.index[0], top.index[1], top.num_q,
                             score.fused_gat(), row_layout(top, v.shape[1]), kernels)
    pq, pk = node_terms(score, q, k, compiled)  # (Nq, H), (Nk, H)
    layout = target_layout(top) if compiled else None
    return GATEdges.apply(pq, pk, v, edge_attr, top.index[0], top.index[1], top.num_q,
                          score.fused_gat(), layout)


def node_terms(score: nn.Module, q: Tensor, k: Tensor, compiled: bool) -> tuple[Tensor, Tensor]:
    """GAT's per-node terms: q (Nq, H, Dk), k (Nk, H, Dk) -> pq (Nq, H), pk (Nk, H).

    When ``compiled`` and the score gives its attention vectors (``head_vectors()``),
    the terms are one :class:`HeadDots` node over the rows (both vectors at once when q
    is k); otherwise the score's own ``prepare`` steps.
    """
    vectors = score.head_vectors() if getattr(type(score), "head_vectors", None) else None
    if not compiled or vectors is None or q.dtype != k.dtype:
        pq, pk = prepare(score, q, k)  # (Nq, H, 1), (Nk, H, 1)
        return pq.squeeze(-1), pk.squeeze(-1)
    att_q, att_k = vectors  # (H, Dk) each
    if q is k:
        pq, pk = HeadDots.apply(q, torch.stack([att_q, att_k]))  # (2, N, H)
        return pq, pk
    return HeadDots.apply(q, att_q[None])[0], HeadDots.apply(k, att_k[None])[0]


class HeadDots(torch.autograd.Function):
    """``scores.head_dot`` of node rows with T attention vectors, on eager CPU tensors:
    x (N, H, D), att (T, H, D) -> (T, N, H), through ``cpu_kernels.head_dots``.

    One node and one pass over the rows each way, in place of a broadcast product and a
    sum per vector, whose backward broadcasts the (N, H) gradient over (N, H, D) twice
    per vector. Under ``create_graph`` the backward is made of differentiable ops.
    """

    @staticmethod
    def forward(ctx, x, att):
        from setattn.engine import cpu_kernels

        ctx.save_for_backward(x, att)
        return torch.from_numpy(cpu_kernels.head_dots(*as_arrays(x, att)))  # (T, N, H)

    @staticmethod
    def backward(ctx, grad):
        x, att = ctx.saved_tensors
        need = ctx.needs_input_grad
        if torch.is_grad_enabled():  # create_graph: differentiable ops
            g_x = (grad[..., None] * att[:, None]).sum(0) if need[0] else None  # (N, H, D)
            g_att = (grad[..., None] * x).sum(1) if need[1] else None  # (T, H, D)
            return g_x, g_att
        from setattn.engine import cpu_kernels

        g_x, g_att = cpu_kernels.head_dot_grads(*as_arrays(x, att, grad), bool(need[0]))
        return (torch.from_numpy(g_x) if need[0] else None,
                torch.from_numpy(g_att) if need[1] else None)


def target_layout(top: Edges) -> tuple:
    """What the CPU kernels need of the edges, cached on the topology: the CSR layout by
    target (``cpu_kernels.by_target``: row pointers and edge order) and the sources and
    targets as arrays."""
    if "by_target" not in top._cache:
        from setattn.engine import cpu_kernels  # Numba loads on the first CPU kernel call

        src, dst = top.index[0].numpy(), top.index[1].numpy()
        top._cache["by_target"] = (*cpu_kernels.by_target(dst, top.num_q), src, dst)
    return top._cache["by_target"]


def as_arrays(*tensors: Tensor | None) -> list:
    """NumPy views of contiguous copies of ``tensors`` (None stays None)."""
    return [None if t is None else t.detach().contiguous().numpy() for t in tensors]


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
    def forward(ctx, pq, pk, v, edge_attr, src, dst, num_q, slope, layout=None):
        ctx.num_q, ctx.slope, ctx.layout = num_q, slope, layout
        if layout is not None:
            out, w = _cpu_forward(pq, pk, v, edge_attr, slope, layout)
            ctx.save_for_backward(w, pq, pk, v, edge_attr, src, dst)
            return out, w  # (Nq, H, Dv), (E, H)
        out, w, s, v_e = gat_edges(pq, pk, v, edge_attr, src, dst, num_q, slope)
        ctx.save_for_backward(s, w, v_e, pq, pk, v, edge_attr, src, dst)
        return out, w  # (Nq, H, Dv), (E, H)

    @staticmethod
    def backward(ctx, grad_out, grad_w):
        if torch.is_grad_enabled():  # create_graph: let autograd differentiate the ops
            return GATEdges._plain_backward(ctx, grad_out, grad_w)
        if ctx.layout is not None:
            return _cpu_backward(ctx, grad_out, grad_w)
        s, w, v_e, pq, pk, v, edge_attr, src, dst = ctx.saved_tensors
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
        return g_pq, g_pk, g_v, g_e, None, None, None, None, None

    @staticmethod
    def _plain_backward(ctx, grad_out, grad_w):
        pq, pk, v, edge_attr, src, dst = ctx.saved_tensors[-6:]

        def outputs(pq, pk, v, edge_attr):
            return gat_edges(pq, pk, v, edge_attr, src, dst, ctx.num_q, ctx.slope)[:2]

        grads = grads_again(ctx, outputs, (pq, pk, v, edge_attr), grad_out, grad_w)
        return (*grads, None, None, None, None, None)


class GATRows(torch.autograd.Function):
    """``gat_edges`` on a large graph, one autograd node over the CSR layouts of
    :mod:`setattn.engine.csr`. The weights are computed along the target-major layout's
    rows (the edges sorted by target), where each target's edges are contiguous, and in
    that order they are the values of the CSR product that sums the value rows (the
    layouts, built once for a graph passed again and again, beat ``softmax_sum``'s
    random reads of value rows). Backward: the weights' gradient is a sampled product in
    row order, the values' the product over the source-major layout.

    The weights come from the compiled CPU kernels (``cpu_kernels.gat_shifted_logits``,
    a vectorised exp, ``normalise_rows``; backward ``gat_row_grads``) when ``compiled``,
    else from torch ops (segment reductions over the rows): the same numbers. attend
    passes ``compiled`` once the kernels pay for their loading (:func:`rows_compiled`).
    Only the (E, H) weights (and, for the torch ops, the activated scores) are kept.
    Under ``create_graph`` the backward lets autograd differentiate ``gat_edges``.
    """

    @staticmethod
    def forward(ctx, pq, pk, v, edge_attr, src, dst, num_q, slope, layout, compiled):
        fwd = layout[0]
        ea_rows = None if edge_attr is None else edge_attr.index_select(0, fwd.by_row)
        weigh = _compiled_rows if compiled else _torch_rows
        w_rows, s = weigh(pq, pk, ea_rows, slope, layout)  # (H, E) rows; (E, H) or None
        w = torch.empty_like(w_rows.t()).index_copy_(0, fwd.by_row, w_rows.t())  # (E, H)
        ctx.num_q, ctx.slope, ctx.layout, ctx.compiled = num_q, slope, layout, compiled
        ctx.ea_rows = ea_rows
        ctx.save_for_backward(w_rows, s, pq, pk, v, edge_attr, src, dst)
        return spmm(fwd, w_rows.view(-1), v), w  # (Nq, H, Dv), (E, H)

    @staticmethod
    def backward(ctx, grad_out, grad_w):
        w_rows, s, pq, pk, v, edge_attr, src, dst = ctx.saved_tensors
        if torch.is_grad_enabled():  # create_graph: let autograd differentiate the ops
            def outputs(pq, pk, v, edge_attr):
                return gat_edges(pq, pk, v, edge_attr, src, dst, ctx.num_q, ctx.slope)[:2]

            grads = grads_again(ctx, outputs, (pq, pk, v, edge_attr), grad_out, grad_w)
            return (*grads, None, None, None, None, None, None)
        fwd, bwd, *_, bwd_from_fwd = ctx.layout
        need = ctx.needs_input_grad
        go = grad_out.transpose(0, 1).contiguous().transpose(0, 1)  # (Nq, H, Dv) head-major
        gw_rows = sddmm(fwd, go, v)  # (H, E): <go[dst], v[src]> in row order
        if grad_w is not None:
            gw_rows = gw_rows + grad_w.t().index_select(1, fwd.by_row)  # (H, E)
        grads = (_compiled_row_grads if ctx.compiled else _torch_row_grads)(
            ctx, w_rows, s, pq, pk, gw_rows, bool(need[3]))  # g_pq, g_pk, g_e (edge order)
        g_v = None
        if need[2]:
            g_v = spmm(bwd, w_rows.index_select(1, bwd_from_fwd).view(-1), go)  # (Nk, H, Dv)
        return (*(g if n else None for g, n in zip((grads[0], grads[1], g_v, grads[2]),
                                                     need[:4])),
                None, None, None, None, None, None)


def _torch_rows(pq: Tensor, pk: Tensor, ea_rows: Tensor | None, slope: float,
                layout: tuple) -> tuple[Tensor, Tensor]:
    """GAT's weights in row order from torch ops: (H, E) weights and the (E, H)
    activated scores (for the backward)."""
    _, _, deg, dst_rows, src_rows, _ = layout
    z = pq.index_select(0, dst_rows).add_(pk.index_select(0, src_rows))  # (E, H)
    if ea_rows is not None:
        z.add_(ea_rows)
    s = F.leaky_relu(z, slope)  # (E, H)
    top = torch.segment_reduce(s, "max", lengths=deg, axis=0)  # (Nq, H)
    top = top.nan_to_num_(nan=0.0, posinf=0.0, neginf=0.0)  # no finite logit: shift by 0
    w = (s - top.index_select(0, dst_rows)).exp_()  # (E, H)
    den = torch.segment_reduce(w, "sum", lengths=deg, axis=0)  # (Nq, H)
    w.div_(torch.where(den > 0, den, 1.0).index_select(0, dst_rows))
    return w.t().contiguous(), s  # (H, E), (E, H)


def _torch_row_grads(ctx, w_rows: Tensor, s: Tensor, pq: Tensor, pk: Tensor,
                     gw_rows: Tensor, need_e: bool) -> tuple:
    """``_torch_rows``' gradients for the weights' ``gw_rows`` (H, E): g_pq (Nq, H), g_pk
    (Nk, H) and the edge terms' (E, H) in edge order (None unless ``need_e``)."""
    fwd, _, deg, dst_rows, src_rows, _ = ctx.layout
    w, gw = w_rows.t(), gw_rows.t()  # (E, H) views
    wg = w * gw  # (E, H)
    total = torch.segment_reduce(wg, "sum", lengths=deg, axis=0)  # (Nq, H)
    gs = wg.sub_(w * total.index_select(0, dst_rows))  # (E, H) the logits' gradient
    gz = torch.ops.aten.leaky_relu_backward(gs, s, ctx.slope, True)  # (E, H)
    g_e = torch.empty_like(gz).index_copy_(0, fwd.by_row, gz) if need_e else None
    return (torch.segment_reduce(gz, "sum", lengths=deg, axis=0),
            gz.new_zeros(pk.shape).index_add_(0, src_rows, gz), g_e)


def _compiled_rows(pq: Tensor, pk: Tensor, ea_rows: Tensor | None, slope: float,
                   layout: tuple) -> tuple[Tensor, None]:
    """GAT's weights in row order, (H, E), from the compiled CPU kernels."""
    from setattn.engine import cpu_kernels

    fwd, _, deg, _, src_rows, _ = layout
    pq_, pk_, ea = as_arrays(pq, pk, ea_rows)
    w = torch.from_numpy(cpu_kernels.gat_shifted_logits(
        fwd.crow[:deg.numel() + 1].numpy(), src_rows.numpy(), pq_, pk_, or_unread(ea, pq_),
        ea is not None, pq_.dtype.type(slope))).exp_()  # (H, E)
    cpu_kernels.normalise_rows(fwd.crow[:deg.numel() + 1].numpy(), w.numpy())  # in place
    return w, None


def _compiled_row_grads(ctx, w_rows: Tensor, s: None, pq: Tensor, pk: Tensor,
                        gw_rows: Tensor, need_e: bool) -> tuple:
    """``_compiled_rows``' gradients, as ``_torch_row_grads``, from ``gat_row_grads``."""
    from setattn.engine import cpu_kernels

    fwd, _, deg, _, src_rows, _ = ctx.layout
    pq_, pk_, ea = as_arrays(pq, pk, ctx.ea_rows)
    g_pq, g_pk, g_e = cpu_kernels.gat_row_grads(
        fwd.crow[:deg.numel() + 1].numpy(), fwd.by_row.numpy(), src_rows.numpy(), pq_, pk_,
        or_unread(ea, pq_), ea is not None, w_rows.numpy(), gw_rows.contiguous().numpy(),
        pq_.dtype.type(ctx.slope), need_e)
    return (torch.from_numpy(g_pq), torch.from_numpy(g_pk),
            torch.from_numpy(g_e) if need_e else None)


def rows_compiled(top: Edges, heads: int) -> bool:
    """Whether a large graph's GAT weights come from the compiled kernels: once they are
    loaded in this process, or on the graph's second pass (its row layout cached): a
    process's first call does not pay the kernels' loading (about 0.4 s) for one pass
    that torch ops compute only about 0.1 s slower."""
    return "setattn.engine.cpu_kernels" in sys.modules or ("gat_rows", heads) in top._cache


def row_layout(top: Edges, heads: int) -> tuple:
    """What ``GATRows`` reads of an edge list, cached on the topology: its
    (target-major, source-major) CSR layouts (``csr_pair``), the edges into each target
    (Nq,), the target and the source of every edge in row order (E,) each, and for each
    slot of the source-major layout the row of the same edge (E,)."""
    key = ("gat_rows", heads)
    if key not in top._cache:
        fwd, bwd = csr_pair(top, heads)
        perm = fwd.by_row
        deg = torch.diff(fwd.crow[:top.num_q + 1].long())  # (Nq,)
        dst_rows = torch.repeat_interleave(torch.arange(top.num_q, device=deg.device), deg)
        slot = torch.empty_like(perm)
        slot[perm] = torch.arange(perm.numel(), device=perm.device)  # (E,) each edge's row
        top._cache[key] = (fwd, bwd, deg, dst_rows, top.index[0].index_select(0, perm),
                           slot.index_select(0, bwd.by_row))
    return top._cache[key]


def grads_again(ctx, outputs, inputs: tuple, grad_out: Tensor, grad_w: Tensor | None
                ) -> list[Tensor | None]:
    """The gradients of a fused node's ``inputs`` from their torch ops run again:
    ``outputs(*inputs)`` gives the (Nq, H, Dv) output and (E, H) weights, which autograd
    differentiates. Under ``create_graph`` (grad mode on in the backward) it runs on the
    saved inputs themselves, so that the gradients are differentiable too; otherwise on
    detached copies. None where ``ctx.needs_input_grad`` says no."""
    higher = torch.is_grad_enabled()
    inputs = tuple(t if higher or t is None else t.detach().requires_grad_() for t in inputs)
    with torch.enable_grad():
        outs = outputs(*inputs)
    needs = ctx.needs_input_grad[:len(inputs)]
    wanted = [t for t, need in zip(inputs, needs) if need]
    pairs = [(o, g) for o, g in zip(outs, (grad_out, grad_w)) if g is not None]
    grads = iter(torch.autograd.grad([o for o, _ in pairs], wanted, [g for _, g in pairs],
                                     create_graph=higher, allow_unused=True))
    return [next(grads) if need else None for need in needs]


def softmax_sum(layout: tuple, logits: np.ndarray, values: np.ndarray) -> np.ndarray:
    """The CPU kernels' softmax of the (E, H) ``logits`` over each target's edges (in
    place: they become the weights) and weighted sum of ``values`` (Nk, H, Dv) ->
    (Nq, H, Dv); shared by FUSED_GAT, FUSED_GATV2 and FUSED_DOT."""
    from setattn.engine import cpu_kernels

    indptr, perm, src, _ = layout
    return cpu_kernels.softmax_sum(indptr, perm, src, logits, values)


def softmax_sum_grads(layout: tuple, w: np.ndarray, values: np.ndarray, grad_out: np.ndarray,
                      grad_w: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """Gradients of :func:`softmax_sum` for the output's (Nq, H, Dv) and the weights' own
    (E, H) or None: the logits' (E, H) and the values' (Nk, H, Dv)."""
    from setattn.engine import cpu_kernels

    indptr, perm, src, _ = layout
    g_v = np.zeros(values.shape, values.dtype)  # (Nk, H, Dv)
    gs = cpu_kernels.softmax_sum_grads(indptr, perm, src, w, values, grad_out,
                                       or_unread(grad_w, w), grad_w is not None, g_v)
    return gs, g_v


def or_unread(array: np.ndarray | None, stand_in: np.ndarray) -> np.ndarray:
    """``array``, or for None a stand-in of the same dtype that the kernel, told the
    array is absent, never reads (compiled signatures take arrays, not None)."""
    return stand_in if array is None else array


def _cpu_forward(pq: Tensor, pk: Tensor, v: Tensor, edge_attr: Tensor | None, slope: float,
                 layout: tuple) -> tuple[Tensor, Tensor]:
    """``gat_edges``' output (Nq, H, Dv) and weights (E, H) from the CPU kernels."""
    from setattn.engine import cpu_kernels

    _, _, src, dst = layout
    pq_, pk_, v_, ea = as_arrays(pq, pk, v, edge_attr)
    w = cpu_kernels.gat_logits(src, dst, pq_, pk_, or_unread(ea, pq_), ea is not None,
                               pq_.dtype.type(slope))  # (E, H)
    out = softmax_sum(layout, w, v_)  # w: logits -> weights
    return torch.from_numpy(out), torch.from_numpy(w)


def _cpu_backward(ctx, grad_out: Tensor, grad_w: Tensor | None) -> tuple:
    """``GATEdges.backward`` from the CPU kernels."""
    from setattn.engine import cpu_kernels

    w, pq, pk, v, edge_attr = ctx.saved_tensors[:5]
    _, _, src, dst = ctx.layout
    pq_, pk_, v_, ea, w_, go, gw = as_arrays(pq, pk, v, edge_attr, w, grad_out, grad_w)
    gs, g_v = softmax_sum_grads(ctx.layout, w_, v_, go, gw)
    g_pq, g_pk, g_e = cpu_kernels.gat_logit_grads(src, dst, pq_, pk_, or_unread(ea, pq_),
                                                  ea is not None, gs, pq_.dtype.type(ctx.slope))
    grads = (g_pq, g_pk, g_v, g_e)
    return (*(torch.from_numpy(g) if need else None
              for g, need in zip(grads, ctx.needs_input_grad[:4])),
            None, None, None, None, None)
