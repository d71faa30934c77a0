"""The one attention engine: scores on edges, softmax per target node, weighted sum.

For every edge j -> i of a topology and every head h:

    s_ij = score(q_i, k_j, e_ij) + bias_ij          logits, (E, H)
    p_ij = softmax over the incoming edges of i     weights, sum to 1 per (i, h)
    z_i  = sum_j p_ij v_j                           output, (Nq, H, Dv)

Two paths compute this and give the same numbers:

* dense (complete, bipartite, window topologies): sets are grouped into buckets of
  similar size and padded within a bucket, so logits are (B, H, Lq, Lk) blocks;
  dot-type scores go to ``scaled_dot_product_attention``. Windows gather their
  2r + 1 neighbours into (N, W) blocks (compiled and accelerator runs; eager CPU runs
  give windows to the sparse path, whose CSR kernels are faster there). No all-pairs
  edge list is built unless weights are asked for.
* sparse (edge lists): logits per edge, a max-shifted softmax per target node
  (segment softmax) and a segment sum of the weighted values. On the CPU, from
  ``_CSR_MIN_EDGES`` edges on, the sum (and dot-type logits) run as CSR sparse-dense
  products with their own backward, so only the (E, H) weights are kept, never
  (E, H, D) messages; smaller graphs gather messages and index_add them, which is
  cheaper than building the CSR layouts. So do graphs with no more edges than keys
  below ``_CSR_MIN_EDGES_FEW`` edges, and scores whose logits already gathered the key
  rows that are also the values (GATv2): those rows are reused. Bipartite topologies
  with at most one query per set (attention pooling) also take this path: padding them
  into (B, 1, L) blocks costs more than it saves. GATv2 scores without bias, mask,
  dropout or hard attention run as one autograd node with a hand-written backward
  (``_GATv2Edges``), the same numbers as the plain ops in fewer operations.

A target with nothing to attend to (no incoming edge, an empty set, every edge
masked) gets zeros, never NaN. Weights returned or captured never include dropout.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from setattn.capture import is_capturing, record
from setattn.scores import GATv2, ScaledDot, Score
from setattn.topology import Bipartite, Complete, Edges, Topology, Window

_DEFAULT_SCORE = ScaledDot()
# The sparse path uses torch's CSR kernels on purpose; their "beta" notice is noise here.
warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")


@dataclass
class AttentionGraph:
    """Attention weights as a weighted directed graph.

    Attributes:
        edge_index: (2, E) long; row 0 = source j (key), row 1 = target i (query).
        weights: (E, H) attention weight of every edge and head; for each target and
            head the weights of its incoming edges sum to 1 (or are all 0).
        num_nodes: (num_kv, num_q), the sizes of the source and target node sets.
        bipartite: sources and targets are different node sets (cross attention,
            pooling, a bipartite edge list), so node j and target j are not the same node.
    """

    edge_index: Tensor
    weights: Tensor
    num_nodes: tuple[int, int]
    bipartite: bool = False

    def to_networkx(self):
        """A ``networkx.DiGraph`` with ``weight`` (mean over heads) and ``head0``... attributes."""
        from setattn.domains.graphs import attention_to_networkx

        return attention_to_networkx(self.edge_index, self.weights, num_nodes=self.num_nodes,
                                     bipartite=self.bipartite)

    def to_dense(self) -> Tensor:
        """(H, num_q, num_kv) weight matrix (zeros where there is no edge; repeated edges add)."""
        src, dst = self.edge_index
        h = self.weights.shape[1]
        dense = self.weights.new_zeros(h, self.num_nodes[1], self.num_nodes[0])
        heads = torch.arange(h, device=dense.device)[:, None]  # (H, 1)
        return dense.index_put_((heads, dst[None], src[None]), self.weights.t(), accumulate=True)


def attend(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    topology: Topology,
    score: nn.Module | None = None,
    *,
    bias: Tensor | None = None,
    mask: Tensor | None = None,
    edge_attr: Tensor | None = None,
    dropout: float = 0.0,
    training: bool = True,
    hard: int | str | None = None,
    return_weights: bool = False,
) -> Tensor | tuple[Tensor, AttentionGraph]:
    """Attention of queries over keys/values along the edges of ``topology``.

    Args:
        q: (Nq, H, Dk) queries, one per target node.
        k: (Nk, H, Dk) keys, one per source node.
        v: (Nk, H, Dv) values.
        topology: from :mod:`setattn.topology`: ``complete``, ``bipartite``, ``window``
            or ``edges``.
        score: a :mod:`setattn.scores` module or any module mapping broadcastable
            (..., H, Dk) q, k to (..., H); scaled dot product by default.
        bias: (E,) or (E, H) added to the logits, in the topology's canonical edge order
            (``topology.edge_index()``).
        mask: (E,) or (E, H) bool, False removes the edge; same order as ``bias``.
        edge_attr: (E, H) or (E, H, A) per-edge input handed to the score (GAT, GATv2,
            additive scores add it inside their nonlinearity).
        dropout: probability of dropping an attention weight (when ``training``).
        training: apply dropout only when True.
        hard: None for soft attention; ``"argmax"`` or an int k keeps the top-k weights
            per target and head, renormalised, with a straight-through gradient.
        return_weights: also return the weights as an :class:`AttentionGraph`.

    Returns:
        (Nq, H, Dv) output, and the ``AttentionGraph`` when ``return_weights``.
    """
    score = _DEFAULT_SCORE if score is None else score
    _check_inputs(q, k, v, topology)
    top_k = _parse_hard(hard)
    p = dropout if training else 0.0
    need_weights = return_weights or is_capturing()
    n_edges = topology.num_edges if (bias is not None or mask is not None
                                     or edge_attr is not None) else None
    bias = _per_edge(bias, "bias", n_edges, q.shape[1])
    mask = _per_edge(mask, "mask", n_edges, q.shape[1])
    if mask is not None and mask.dtype != torch.bool:  # SDPA would read a float mask as a bias
        raise ValueError(f"mask must be a bool tensor (True keeps the edge), got {mask.dtype}")
    edge_attr = _check_edge_attr(edge_attr, n_edges, q.shape[1])

    if isinstance(topology, Edges):
        out, w = _attend_edges(q, k, v, topology, score, bias, mask, edge_attr, p, top_k)
    elif isinstance(topology, Window):
        out, w = _attend_window(q, k, v, topology, score, bias, mask, edge_attr, p, top_k)
    elif isinstance(topology, Bipartite):
        out, w = _attend_blocks(q, k, v, topology, score, bias, mask, edge_attr, p, top_k,
                                need_weights)
    else:
        raise TypeError(f"topology must come from setattn.topology, got {type(topology).__name__}")

    if not need_weights:
        return out
    graph = AttentionGraph(topology.edge_index(), w.detach(), (topology.num_kv, topology.num_q),
                           bipartite=_is_bipartite(topology))
    if is_capturing():
        record(graph)
    return (out, graph) if return_weights else out


# ---------------------------------------------------------------------------------------
# checks


def _is_bipartite(top: Topology) -> bool:
    """Whether queries and keys are different node sets."""
    if isinstance(top, Complete | Window):
        return False
    return isinstance(top, Bipartite) or top.num_q != top.num_kv


def _check_inputs(q: Tensor, k: Tensor, v: Tensor, top: Topology) -> None:
    if not isinstance(top, Bipartite | Window | Edges):
        raise TypeError(f"topology must come from setattn.topology, got {type(top).__name__}")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() != 3:
            raise ValueError(f"{name} must have shape (N, H, D), got {tuple(t.shape)}")
    if k.shape[:2] != v.shape[:2]:
        raise ValueError(f"k {tuple(k.shape)} and v {tuple(v.shape)} must agree in (N, H)")
    if q.shape[1] != k.shape[1]:
        raise ValueError(f"q has {q.shape[1]} heads but k has {k.shape[1]}")
    if q.shape[0] != top.num_q:
        raise ValueError(f"q has {q.shape[0]} rows but the topology has {top.num_q} queries")
    if k.shape[0] != top.num_kv:
        raise ValueError(f"k has {k.shape[0]} rows but the topology has {top.num_kv} keys")


def _per_edge(t: Tensor | None, name: str, n_edges: int | None, heads: int) -> Tensor | None:
    """(E,) or (E, H) -> (E, H) or (E, 1)."""
    if t is None:
        return None
    if t.dim() == 1:
        t = t[:, None]
    if t.dim() != 2 or t.shape[0] != n_edges or t.shape[1] not in (1, heads):
        raise ValueError(
            f"{name} must have shape (E,) or (E, H) with E={n_edges}, H={heads}; "
            f"got {tuple(t.shape)}"
        )
    return t


def _check_edge_attr(t: Tensor | None, n_edges: int | None, heads: int) -> Tensor | None:
    if t is not None and (t.dim() not in (2, 3) or t.shape[0] != n_edges or t.shape[1] != heads):
        raise ValueError(
            f"edge_attr must have shape (E, H) or (E, H, A) with E={n_edges}, H={heads}; "
            f"got {tuple(t.shape)}"
        )
    return t


def _parse_hard(hard: int | str | None) -> int | None:
    if hard is None:
        return None
    if hard == "argmax":
        return 1
    if isinstance(hard, int) and not isinstance(hard, bool) and hard >= 1:
        return hard
    raise ValueError(f"hard must be None, 'argmax' or an int >= 1, got {hard!r}")


# ---------------------------------------------------------------------------------------
# pieces shared by the paths


def _prepare(score: nn.Module, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
    if isinstance(score, Score):
        return score.prepare_q(q), score.prepare_k(k)
    return q, k


def _combine(score: nn.Module, pq: Tensor, pk: Tensor, edge_attr: Tensor | None) -> Tensor:
    if isinstance(score, Score):
        return score.combine(pq, pk, edge_attr)
    return score(pq, pk) if edge_attr is None else score(pq, pk, edge_attr)


def _dot_scale(score: nn.Module, dim: int) -> float | None:
    return score.dot_scale(dim) if isinstance(score, Score) else None


def _straight_through(hard_w: Tensor, soft_w: Tensor) -> Tensor:
    """Forward value ``hard_w``, gradient of ``soft_w``."""
    return hard_w + (soft_w - soft_w.detach())


def masked_softmax(logits: Tensor, valid: Tensor | None, dim: int = -1) -> Tensor:
    """Softmax along ``dim`` over the valid entries only; rows with none valid give 0.

    Args:
        logits: (..., K) scores.
        valid: bool, broadcastable to ``logits``; None means all valid.
    """
    if valid is not None:
        logits = logits.masked_fill(~valid, float("-inf"))
    top = logits.amax(dim, keepdim=True).detach()
    top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
    ex = torch.exp(logits - top)  # masked entries: exp(-inf) = 0
    den = ex.sum(dim, keepdim=True)
    return ex / torch.where(den > 0, den, torch.ones_like(den))


def _hard_dense(w: Tensor, valid: Tensor | None, k: int) -> Tensor:
    """Keep the k largest valid weights along the last dim, renormalised (straight-through)."""
    k = min(k, w.shape[-1])
    ranked = w if valid is None else w.masked_fill(~valid, -1.0)
    keep = torch.zeros_like(w, dtype=torch.bool).scatter_(-1, ranked.topk(k, dim=-1).indices, True)
    if valid is not None:
        keep &= valid
    hw = w.detach() * keep
    hw = hw / hw.sum(-1, keepdim=True).clamp_min(torch.finfo(w.dtype).tiny)
    return _straight_through(hw, w)


# ---------------------------------------------------------------------------------------
# sparse path: edge lists


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


def _hard_edges(w: Tensor, index: Tensor, num_segments: int, k: int,
                valid: Tensor | None) -> Tensor:
    """Top-k weights per target and head over edges (straight-through)."""
    e, h = w.shape
    wd = w.detach().double()
    if valid is not None:
        wd = wd.masked_fill(~valid, -1.0)
    # sort by target ascending, then weight descending
    key = index[:, None].double() + 0.25 * (1.0 - wd)  # (E, H), in [t, t + 0.5]
    order = key.argsort(dim=0, stable=True)  # (E, H)
    counts = torch.bincount(index, minlength=num_segments)
    starts = torch.cumsum(counts, 0) - counts  # (N,)
    sorted_index = index.sort(stable=True).values  # (E,) same for every head
    rank_sorted = torch.arange(e, device=w.device) - starts[sorted_index]  # (E,)
    rank = torch.empty_like(order).scatter_(0, order, rank_sorted[:, None].expand(-1, h))
    keep = rank < k  # (E, H)
    if valid is not None:
        keep &= valid
    hw = w.detach() * keep
    den = w.new_zeros(num_segments, h).index_add_(0, index, hw)  # (N, H)
    hw = hw / den[index].clamp_min(torch.finfo(w.dtype).tiny)
    return _straight_through(hw, w)


@dataclass
class _CSRSide:
    """Sparsity pattern of a per-head block-diagonal matrix in CSR form.

    Row ``r * H + h`` holds head h of row node r; its column ``c * H + h`` is head h of
    column node c. ``order`` maps every stored slot to its flat (edge * H + head)
    position in an (E, H) tensor, so values are ``w.reshape(-1)[order]``.
    """

    crow: Tensor  # (R * H + 1,)
    col: Tensor  # (E * H,)
    order: Tensor  # (E * H,)
    shape: tuple[int, int]  # (R * H, C * H)


def _csr_side(rows: Tensor, cols: Tensor, n_rows: int, n_cols: int, heads: int) -> _CSRSide:
    e = rows.numel()
    perm = torch.argsort(rows, stable=True)  # (E,) edges grouped by row
    deg = torch.bincount(rows, minlength=n_rows)  # (R,)
    start = torch.cumsum(deg, 0) - deg  # (R,) first sorted edge of each row
    r = rows[perm]  # (E,)
    local = torch.arange(e, device=rows.device) - start[r]  # (E,) rank within its row
    hs = torch.arange(heads, device=rows.device)  # (H,)
    slot = (start[r] * heads + local)[:, None] + hs[None, :] * deg[r][:, None]  # (E, H)
    order = torch.empty(e * heads, dtype=torch.long, device=rows.device)
    col = torch.empty_like(order)
    order[slot.flatten()] = (perm[:, None] * heads + hs[None, :]).flatten()
    col[slot.flatten()] = (cols[perm][:, None] * heads + hs[None, :]).flatten()
    crow = torch.cat([deg.new_zeros(1), torch.cumsum(deg.repeat_interleave(heads), 0)])
    return _CSRSide(crow, col, order, (n_rows * heads, n_cols * heads))


def _csr_pair(top: Edges, heads: int) -> tuple[_CSRSide, _CSRSide]:
    """(target-major, source-major) CSR layouts of an edge list, cached on the topology."""
    key = ("csr", heads)
    if key not in top._cache:
        src, dst = top.index[0], top.index[1]
        top._cache[key] = (_csr_side(dst, src, top.num_q, top.num_kv, heads),
                           _csr_side(src, dst, top.num_kv, top.num_q, heads))
    return top._cache[key]


def _csr(side: _CSRSide, values: Tensor) -> Tensor:
    return torch.sparse_csr_tensor(side.crow, side.col, values, size=side.shape,
                                   check_invariants=False)


def _spmm(side: _CSRSide, w: Tensor, x: Tensor) -> Tensor:
    """Per-edge weights (E, H) times node rows (C, H, D) -> (R, H, D)."""
    a = _csr(side, w.reshape(-1).index_select(0, side.order))
    out = a @ x.reshape(-1, x.shape[-1])  # (R * H, D)
    return out.view(-1, x.shape[1], x.shape[2])


def _sddmm(side: _CSRSide, a: Tensor, b: Tensor) -> Tensor:
    """<a_row, b_col> on every edge and head: a (R, H, D), b (C, H, D) -> (E, H)."""
    pattern = _csr(side, a.new_zeros(side.col.numel()))
    flat = a.reshape(-1, a.shape[-1])  # (R * H, D)
    vals = torch.sparse.sampled_addmm(pattern, flat, b.reshape(-1, b.shape[-1]).t(), beta=0.0)
    out = vals.values().new_empty(side.col.numel()).index_copy_(0, side.order, vals.values())
    return out.view(-1, a.shape[1])


class _EdgeSum(torch.autograd.Function):
    """out_i = sum_{j -> i} w_ij v_j per head, without (E, H, D) messages.

    Forward is a CSR sparse-dense product; backward is another one for v (the
    transposed pattern) and a sampled dense-dense product for w, so only the (E, H)
    weights and v are kept for the backward pass.
    """

    @staticmethod
    def forward(ctx, w, v, fwd, bwd):
        ctx.save_for_backward(w, v)
        ctx.sides = (fwd, bwd)
        return _spmm(fwd, w, v)  # (Nq, H, Dv)

    @staticmethod
    def backward(ctx, grad_out):
        w, v = ctx.saved_tensors
        fwd, bwd = ctx.sides
        grad_out = grad_out.contiguous()
        # built from the Functions themselves, so that double backward is right too
        gw = _EdgeDot.apply(grad_out, v, fwd, bwd) if ctx.needs_input_grad[0] else None  # (E, H)
        gv = _EdgeSum.apply(w, grad_out, bwd, fwd) if ctx.needs_input_grad[1] else None
        return gw, gv, None, None


class _EdgeDot(torch.autograd.Function):
    """s_e = <q_dst(e), k_src(e)> per head, without gathering (E, H, D) pairs."""

    @staticmethod
    def forward(ctx, q, k, fwd, bwd):
        ctx.save_for_backward(q, k)
        ctx.sides = (fwd, bwd)
        return _sddmm(fwd, q, k)  # (E, H)

    @staticmethod
    def backward(ctx, grad_s):
        q, k = ctx.saved_tensors
        fwd, bwd = ctx.sides
        gq = _EdgeSum.apply(grad_s, k, fwd, bwd) if ctx.needs_input_grad[0] else None  # (Nq, H, D)
        gk = _EdgeSum.apply(grad_s, q, bwd, fwd) if ctx.needs_input_grad[1] else None  # (Nk, H, D)
        return gq, gk, None, None


def _gatv2_edges(pq, pk, v, edge_attr, att, src, dst, num_q: int, slope: float):
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


class _GATv2Edges(torch.autograd.Function):
    """``_gatv2_edges`` as one autograd node with a hand-written backward.

    Small graphs (a batch of molecules: a few hundred atoms) spend most of their time
    in per-operation overhead: this runs the scores, softmax and sum in about half the
    operations autograd would record, and keeps only the activated scores (E, H, A),
    the gathered values (E, H, Dv) and the weights (E, H) for the backward pass. Under
    ``create_graph`` the backward lets autograd differentiate ``_gatv2_edges`` instead,
    so second derivatives stay right. Needs a LeakyReLU slope >= 0 (the sign of the activation
    then tells which side of 0 its input was).
    """

    @staticmethod
    def forward(ctx, pq, pk, v, edge_attr, att, src, dst, num_q, slope):
        out, w, g, v_e = _gatv2_edges(pq, pk, v, edge_attr, att, src, dst, num_q, slope)
        ctx.save_for_backward(g, w, v_e, pq, pk, v, edge_attr, att, src, dst)
        ctx.num_q, ctx.slope = num_q, slope
        return out, w  # (Nq, H, Dv), (E, H)

    @staticmethod
    def backward(ctx, grad_out, grad_w):
        g, w, v_e, pq, pk, v, edge_attr, att, src, dst = ctx.saved_tensors
        if torch.is_grad_enabled():  # create_graph: let autograd differentiate the ops
            return _GATv2Edges._plain_backward(ctx, grad_out, grad_w)
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
        # through the LeakyReLU, read off its output g
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
        return g_pq, g_pk, g_v, g_e, g_att, None, None, None, None

    @staticmethod
    def _plain_backward(ctx, grad_out, grad_w):
        _, _, _, pq, pk, v, edge_attr, att, src, dst = ctx.saved_tensors
        inputs = (pq, pk, v, edge_attr, att)
        wanted = [t for t, need in zip(inputs, ctx.needs_input_grad) if need]
        outs = _gatv2_edges(pq, pk, v, edge_attr, att, src, dst, ctx.num_q, ctx.slope)[:2]
        pairs = [(o, g) for o, g in zip(outs, (grad_out, grad_w)) if g is not None]
        grads = iter(torch.autograd.grad([o for o, _ in pairs], wanted, [g for _, g in pairs],
                                         create_graph=True, allow_unused=True))
        picked = [next(grads) if need else None for need in ctx.needs_input_grad[:5]]
        return (*picked, None, None, None, None)


def _fuse_gatv2(score, edge_attr, bias, mask, p: float, top_k) -> bool:
    """Whether ``_GATv2Edges`` computes this call: a GATv2 score with (E, H, A) or no edge
    features, slope >= 0, and no bias, mask, dropout or hard attention."""
    return (isinstance(score, GATv2) and score.negative_slope >= 0 and bias is None
            and mask is None and p == 0 and top_k is None
            and (edge_attr is None or edge_attr.dim() == 3))


def _use_csr(x: Tensor) -> bool:
    """CSR kernels serve eager CPU runs; compiled or accelerator runs use index_add."""
    return x.device.type == "cpu" and not torch.compiler.is_compiling()


# Below this many edges, building the two CSR layouts costs more than it saves: gathered
# messages and index_add are faster (fwd+bwd, 4 heads x 32: 1.2 vs 2.0 ms at 500 edges,
# 6.5 vs 3.7 ms at 2000).
_CSR_MIN_EDGES = 1024
# The same when there are no more edges than keys (attention pooling: one edge per key),
# whose gathered messages are no bigger than the values: pooling 4 heads x 32, fwd+bwd,
# 8.8 vs 12 ms at 4096 items, 17 vs 21 ms at 8192; CSR wins from about 16k items on.
_CSR_MIN_EDGES_FEW = 16384


def _attend_edges(q, k, v, top: Edges, score, bias, mask, edge_attr, p, top_k):
    src, dst = top.index[0], top.index[1]
    heads = q.shape[1]
    pq, pk = _prepare(score, q, k)
    if _fuse_gatv2(score, edge_attr, bias, mask, p, top_k):
        return _GATv2Edges.apply(pq, pk, None if v is pk else v, edge_attr, score.att, src, dst,
                                 top.num_q, score.negative_slope)
    # sampled_addmm rejects patterns with more entries than the dense matrix has, which a
    # multigraph (repeated edges) can reach: those fall back to index_add
    least = _CSR_MIN_EDGES if top.num_edges > top.num_kv else _CSR_MIN_EDGES_FEW
    csr = _use_csr(v) and least <= top.num_edges <= top.num_q * top.num_kv
    scale = _dot_scale(score, pq.shape[-1])
    pk_e = None
    if csr and scale is not None and edge_attr is None:
        fwd, bwd = _csr_pair(top, heads)
        logits = _EdgeDot.apply(pq.contiguous(), pk.contiguous(), fwd, bwd) * scale  # (E, H)
    else:
        pq_e, pk_e = pq.index_select(0, dst), pk.index_select(0, src)  # (E, H, A)
        logits = _combine(score, pq_e, pk_e, edge_attr)  # (E, H)
    if bias is not None:
        logits = logits + bias
    w = segment_softmax(logits, dst, top.num_q, mask)  # (E, H)
    if top_k is not None:
        w = _hard_edges(w, dst, top.num_q, top_k, mask)
    wd = F.dropout(w, p) if p > 0 else w
    # values that are the keys whose rows the logits gathered (GATv2): reusing those rows
    # beats the CSR product, whose layouts cost more to build than it saves then
    reuse = v is pk and pk_e is not None
    if csr and not reuse:
        fwd, bwd = _csr_pair(top, heads)
        return _EdgeSum.apply(wd.contiguous(), v.contiguous(), fwd, bwd), w
    v_e = pk_e if reuse else v.index_select(0, src)  # (E, H, Dv)
    msg = v_e * wd[..., None]  # (E, H, Dv)
    out = v.new_zeros(top.num_q, v.shape[1], v.shape[2]).index_add_(0, dst, msg)  # (Nq, H, Dv)
    return out, w


# ---------------------------------------------------------------------------------------
# dense path: windows


def _scatter_to_slots(t: Tensor | None, valid: Tensor) -> Tensor | None:
    """Per-edge (E, ...) values in target-major order -> (*valid.shape, ...) slots."""
    if t is None:
        return None
    out = t.new_zeros(*valid.shape, *t.shape[1:])
    out[valid] = t
    return out


def _as_edges(top: Window | Bipartite) -> Edges:
    """The topology's pairs as an edge list in its canonical order, cached on it."""
    if "edges" not in top._cache:
        top._cache["edges"] = Edges(top.edge_index(), num_q=top.num_q, num_kv=top.num_kv)
    return top._cache["edges"]


def _attend_window(q, k, v, top: Window, score, bias, mask, edge_attr, p, top_k):
    if _use_csr(v):
        # On the CPU the sparse path's CSR kernels beat the gathered (N, W, H, D) blocks
        # 4-8x (benchmarks/scaling.py): the same pairs, the same canonical edge order.
        return _attend_edges(q, k, v, _as_edges(top), score, bias, mask, edge_attr, p,
                             top_k)
    index, valid = top.neighbours()  # (N, W), (N, W)
    pq, pk = _prepare(score, q, k)
    kg = pk[index]  # (N, W, H, A)
    scale = _dot_scale(score, pq.shape[-1])
    if scale is not None and edge_attr is None:
        logits = torch.einsum("nha,nwha->nwh", pq, kg) * scale  # (N, W, H)
    else:
        logits = _combine(score, pq[:, None], kg, _scatter_to_slots(edge_attr, valid))
    if bias is not None:
        logits = logits + _scatter_to_slots(bias, valid)
    ok = valid[..., None]  # (N, W, 1)
    if mask is not None:
        ok = ok & _scatter_to_slots(mask, valid)
    w = masked_softmax(logits, ok, dim=1)  # (N, W, H)
    if top_k is not None:
        w = _hard_dense(w.transpose(1, 2), ok.transpose(1, 2), top_k).transpose(1, 2)
    wd = F.dropout(w, p) if p > 0 else w
    out = torch.einsum("nwh,nwhd->nhd", wd, v[index])  # (N, H, Dv)
    return out, w[valid]


# ---------------------------------------------------------------------------------------
# dense path: complete and bipartite sets, bucketed by size


def _ladder(n: Tensor) -> Tensor:
    """Round sizes up to 1, 2, 3, 4, 6, 8, 12, 16, ...: padding within a bucket <= 1/3."""
    n = n.clamp_min(1).double()
    p2 = torch.exp2(torch.ceil(torch.log2(n)))  # next power of two
    three_quarters = 0.75 * p2
    return torch.where(n <= three_quarters, three_quarters, p2).ceil().long()


def size_buckets(sizes_q: Tensor, sizes_kv: Tensor) -> list[Tensor]:
    """Group sets with nonzero queries and keys into buckets of similar (Lq, Lk).

    Returns:
        list of (B,) ascending set indices, one tensor per bucket.
    """
    active = torch.nonzero((sizes_q > 0) & (sizes_kv > 0)).flatten()  # (G',)
    if active.numel() == 0:
        return []
    sq, sk = sizes_q[active], sizes_kv[active]
    if bool((sq == sq[0]).all() and (sk == sk[0]).all()):
        return [active]
    key = _ladder(sq) * (int(_ladder(sk).max()) + 1) + _ladder(sk)  # (G',)
    return [active[key == u] for u in torch.unique(key)]


@dataclass
class _Bucket:
    """Sets padded together: node index and validity of every slot, per side."""

    sets: Tensor  # (B,) set indices, ascending
    q_index: Tensor  # (B, Lq) query node of each slot (padded slots repeat a real one)
    q_valid: Tensor  # (B, Lq)
    k_index: Tensor  # (B, Lk)
    k_valid: Tensor  # (B, Lk)
    padded: bool  # some slot is padding
    whole: bool  # the bucket is the whole batch without padding: plain reshapes suffice


def _slots(ptr: Tensor, sets: Tensor, sizes: Tensor) -> tuple[Tensor, Tensor]:
    """Node index (B, L) of each padded slot and its validity (B, L)."""
    length = int(sizes[sets].max())
    pos = torch.arange(length, device=ptr.device)  # (L,)
    valid = pos[None, :] < sizes[sets][:, None]  # (B, L)
    index = ptr[sets][:, None] + pos[None, :]  # (B, L)
    return torch.where(valid, index, ptr[sets][:, None]), valid


def _plan(top: Bipartite) -> list[_Bucket]:
    """The size buckets of a topology, computed once and cached on it."""
    if "plan" not in top._cache:
        plan = []
        for sets in size_buckets(top.sizes_q, top.sizes_kv):
            qi, qv = _slots(top.ptr_q, sets, top.sizes_q)
            ki, kv = _slots(top.ptr_kv, sets, top.sizes_kv)
            padded = not bool(qv.all() and kv.all())
            whole = not padded and sets.numel() == top.sizes_q.numel()
            plan.append(_Bucket(sets, qi, qv, ki, kv, padded, whole))
        top._cache["plan"] = plan
        # every bucket's slots back to back: one gather per tensor feeds all buckets, so
        # the backward pass scatters into one gradient instead of one per bucket
        top._cache["q_slots"] = torch.cat([b.q_index.flatten() for b in plan] or [top.ptr_q[:0]])
        top._cache["k_slots"] = torch.cat([b.k_index.flatten() for b in plan] or [top.ptr_q[:0]])
    return top._cache["plan"]


def _bucket_views(x: Tensor, slots: Tensor, plan: list[_Bucket], side: str) -> list[Tensor]:
    """Gather (N, H, A) rows once for all padded slots -> one (B, L, H, A) view per bucket."""
    flat = x.index_select(0, slots)  # (sum of B * L, H, A)
    shapes = [(bk.q_index if side == "q" else bk.k_index).shape for bk in plan]
    # one split (not a slice per bucket): its backward is a single concatenation
    parts = flat.split([b * length for b, length in shapes])
    return [p.view(b, length, *x.shape[1:]) for p, (b, length) in zip(parts, shapes)]


def _bucket_edge_ids(top: Bipartite, bk: _Bucket) -> tuple[Tensor, Tensor]:
    """Canonical edge id (B, Lq, Lk) of every slot pair (0 where padded) and validity."""
    edge_off = top.edge_offsets()
    lq, lk = bk.q_valid.shape[1], bk.k_valid.shape[1]
    nk = top.sizes_kv[bk.sets][:, None, None]
    eid = (edge_off[bk.sets][:, None, None]
           + torch.arange(lq, device=nk.device)[None, :, None] * nk
           + torch.arange(lk, device=nk.device)[None, None, :])  # (B, Lq, Lk)
    pair_valid = bk.q_valid[:, :, None] & bk.k_valid[:, None, :]  # (B, Lq, Lk)
    return torch.where(pair_valid, eid, torch.zeros_like(eid)), pair_valid


def _one_query_per_set(top: Bipartite) -> bool:
    """Every set has at most one query (pooling: a summary per set attends to its items)."""
    if "one_query" not in top._cache:
        top._cache["one_query"] = bool((top.sizes_q <= 1).all()) and not isinstance(
            top, Complete)
    return top._cache["one_query"]


def _attend_blocks(q, k, v, top: Bipartite, score, bias, mask, edge_attr, p, top_k,
                   need_weights):
    if _one_query_per_set(top):
        # one query row per set: padding sets into (B, 1, L) blocks costs more than a
        # segment softmax over the (query, item) edges, in the same canonical order
        return _attend_edges(q, k, v, _as_edges(top), score, bias, mask, edge_attr, p, top_k)
    heads, dv = v.shape[1], v.shape[2]
    pq, pk = _prepare(score, q, k)
    scale = _dot_scale(score, pq.shape[-1])
    per_edge = bias is not None or mask is not None or edge_attr is not None or need_weights
    use_sdpa = scale is not None and edge_attr is None and top_k is None and not need_weights

    rows, outs, edge_ids, weights = [], [], [], []
    plan = _plan(top)
    if plan and not plan[0].whole:
        q_views = _bucket_views(pq, top._cache["q_slots"], plan, "q")
        k_views = _bucket_views(pk, top._cache["k_slots"], plan, "k")
        v_views = _bucket_views(v, top._cache["k_slots"], plan, "k")
    for n, bk in enumerate(plan):
        if bk.whole:  # one bucket, no padding: plain reshapes
            b, lq, lk = bk.sets.numel(), bk.q_valid.shape[1], bk.k_valid.shape[1]
            qb = pq.reshape(b, lq, heads, -1)  # (B, Lq, H, A)
            kb, vb = pk.reshape(b, lk, heads, -1), v.reshape(b, lk, heads, dv)
        else:
            qb, kb, vb = q_views[n], k_views[n], v_views[n]  # (B, L, H, .)

        # per-edge inputs in canonical (target-major) order -> (B, H|1, Lq, Lk)
        eid = pair_valid = None
        if per_edge:
            eid, pair_valid = _bucket_edge_ids(top, bk)
        ok = bk.k_valid[:, None, None, :] if bk.padded else None  # (B, 1, 1, Lk)
        if mask is not None:
            m = mask[eid].permute(0, 3, 1, 2)  # (B, H|1, Lq, Lk)
            ok = m if ok is None else ok & m
        dense_bias = None if bias is None else bias[eid].permute(0, 3, 1, 2)

        if use_sdpa:
            ob = _sdpa_block(qb, kb, vb, ok, dense_bias, scale, p)  # (B, Lq, H, Dv)
        else:
            if scale is not None and edge_attr is None:
                logits = torch.einsum("bihd,bjhd->bhij", qb, kb) * scale  # (B, H, Lq, Lk)
            else:
                ea = None if edge_attr is None else edge_attr[eid]  # (B, Lq, Lk, H[, A])
                logits = _combine(score, qb[:, :, None], kb[:, None], ea).permute(0, 3, 1, 2)
            if dense_bias is not None:
                logits = logits + dense_bias
            w = masked_softmax(logits, ok)  # (B, H, Lq, Lk)
            if top_k is not None:
                w = _hard_dense(w, ok, top_k)
            wd = F.dropout(w, p) if p > 0 else w
            ob = torch.einsum("bhij,bjhd->bihd", wd, vb)  # (B, Lq, H, Dv)
            if need_weights:
                edge_ids.append(eid[pair_valid])
                weights.append(w.permute(0, 2, 3, 1)[pair_valid])  # (E_b, H)
        if bk.whole:
            out = ob.reshape(top.num_q, heads, dv)
            return out, _gather_weights(weights, edge_ids, top, v, need_weights)
        rows.append(bk.q_index[bk.q_valid])
        outs.append(ob[bk.q_valid])  # (Nq_b, H, Dv)

    if not rows:  # no set has both queries and keys: zeros, still on the autograd graph
        rows, outs = [top.ptr_q[:0]], [v[:0]]
    out = v.new_zeros(top.num_q, heads, dv)
    out = out.index_copy(0, torch.cat(rows), torch.cat(outs))
    return out, _gather_weights(weights, edge_ids, top, v, need_weights)


def _gather_weights(weights, edge_ids, top: Bipartite, v: Tensor, need: bool) -> Tensor | None:
    """Per-bucket (E_b, H) weights -> (E, H) in canonical order (None when not needed)."""
    if not need:
        return None
    if not weights:
        return v.new_zeros(top.num_edges, v.shape[1])
    w = v.new_zeros(top.num_edges, weights[0].shape[1])
    return w.index_copy(0, torch.cat(edge_ids), torch.cat(weights))


def _sdpa_block(qb, kb, vb, ok, dense_bias, scale, p):
    """scaled_dot_product_attention on one bucket; rows with no valid key give 0.

    Args:
        qb: (B, Lq, H, D); kb: (B, Lk, H, D); vb: (B, Lk, H, Dv).
        ok: bool broadcastable to (B, H, Lq, Lk) or None; dense_bias likewise.
    """
    empty_rows = None
    if ok is not None:
        has_any = ok.any(-1, keepdim=True)  # (B, H|1, Lq|1, 1)
        if not bool(has_any.all()):
            empty_rows = ~has_any
            ok = ok | empty_rows  # let empty rows attend to anything, then zero them
    attn_mask = ok
    if dense_bias is not None:
        attn_mask = dense_bias if ok is None else dense_bias.masked_fill(~ok, float("-inf"))
    ob = F.scaled_dot_product_attention(
        qb.transpose(1, 2), kb.transpose(1, 2), vb.transpose(1, 2),
        attn_mask=attn_mask, dropout_p=p, scale=scale,
    )  # (B, H, Lq, Dv)
    if empty_rows is not None:
        ob = ob.masked_fill(empty_rows, 0.0)
    return ob.transpose(1, 2)  # (B, Lq, H, Dv)
