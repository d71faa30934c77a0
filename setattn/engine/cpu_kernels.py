"""The fused GAT and GATv2 edge kernels on the CPU: one pass over each target's edges.

FUSED_GAT and FUSED_GATV2 (:mod:`setattn.engine.fused_gat`,
:mod:`setattn.engine.fused_gatv2`) run these on eager CPU tensors. Each target node's
incoming edges are visited in a row of a CSR layout (a stable counting sort of the edges
by target, O(E + N)): the logits, the max-shifted softmax and the weighted sum of a
target are computed in a few passes over its edges, so no (E, H, D) message, gathered
key or activated score is ever stored, and a new batch of graphs costs one counting sort,
not a sort and two sparse layouts. The backward pass recomputes the activations from the
node terms and keeps only the (E, H) weights.

The loops are compiled by Numba (``cache=True``: compiled once per machine, then
loaded). They follow the torch ops of the fused paths step by step (the same max
shift, the same rule for a target with no edge, sums in edge order within a target), so
they give the same numbers to float rounding; ``tests/unit/test_cpu_kernels.py``
compares them in float64.

Every float argument, ``slope`` included, has the values' dtype (float32 or float64),
so that the arithmetic stays in it. Shapes: E edges (``src``, ``dst``), Nq targets, Nk
sources, H heads, A the score's width (GATv2), D the value width.
"""

from __future__ import annotations

import numpy as np
from numba import njit

# The row helpers are inlined into the kernels: a call per target row, each passing
# arrays, cost more than the row's arithmetic on small graphs.
# Reassociation lets the compiler vectorise the dot products over D and A (sums in
# another order: float rounding); no flag that assumes finite values, so NaN and inf
# keep their meaning in the max shift and the empty-row rules.
FAST = {"reassoc", "contract"}


@njit(cache=True, nogil=True)
def by_target(dst: np.ndarray, num_q: int) -> tuple[np.ndarray, np.ndarray]:
    """CSR layout of an edge list by target: ``indptr`` (Nq + 1,) and ``perm`` (E,), the
    edges of target i being ``perm[indptr[i]:indptr[i + 1]]`` in edge order."""
    indptr = np.zeros(num_q + 1, np.int64)
    for e in range(dst.shape[0]):
        indptr[dst[e] + 1] += 1
    for i in range(num_q):
        indptr[i + 1] += indptr[i]
    fill = indptr[:-1].copy()
    perm = np.empty(dst.shape[0], np.int64)
    for e in range(dst.shape[0]):
        t = dst[e]
        perm[fill[t]] = e
        fill[t] += 1
    return indptr, perm


@njit(cache=True, fastmath=FAST, inline="always")
def _row_exp(w, perm, a, b, m, den):
    """The unnormalised softmax of a target's logits w[perm[a:b], :] in place, per head,
    and its sum into ``den`` (H,); ``m`` (H,) holds their max, replaced by 0 where it is
    not finite (the rules of ``segment_softmax``)."""
    heads = w.shape[1]
    for h in range(heads):
        if not np.isfinite(m[h]):
            m[h] = 0
        den[h] = 0
    for p in range(a, b):
        e = perm[p]
        for h in range(heads):
            w[e, h] = np.exp(w[e, h] - m[h])
            den[h] += w[e, h]
    for h in range(heads):
        if not den[h] > 0:  # no positive sum: the weights stay 0 (or NaN)
            den[h] = 1


@njit(cache=True, fastmath=FAST, inline="always")
def _row_sum(out, w, perm, src, v, i, a, b, den):
    """Normalises the target's weights w[perm[a:b]] by ``den`` (H,) in place and adds
    out[i] = sum over those edges of w_e v[src(e)], every head: (H, D)."""
    heads, dim = v.shape[1], v.shape[2]
    for p in range(a, b):
        e = perm[p]
        j = src[e]
        for h in range(heads):
            we = w[e, h] / den[h]
            w[e, h] = we
            for d in range(dim):
                out[i, h, d] += we * v[j, h, d]


@njit(cache=True, fastmath=FAST, nogil=True)
def gat_forward(indptr, perm, src, pq, pk, ea, has_e, v, slope):
    """GAT attention: s_e = LeakyReLU(pq[dst] + pk[src] [+ ea]), softmax per target,
    out_i = sum_e w_e v[src(e)].

    Args:
        indptr, perm: ``by_target`` of the edges; src: (E,) source of every edge.
        pq: (Nq, H) target terms; pk: (Nk, H) source terms; ea: (E, H) edge terms,
            read only when ``has_e``; v: (Nk, H, D) values; slope: LeakyReLU slope.

    Returns:
        out (Nq, H, D) and the weights w (E, H), in edge order.
    """
    nq, heads = pq.shape
    out = np.zeros((nq, heads, v.shape[2]), v.dtype)
    w = np.empty((perm.shape[0], heads), v.dtype)
    m, den = np.empty(heads, v.dtype), np.empty(heads, v.dtype)
    for i in range(nq):
        a, b = indptr[i], indptr[i + 1]
        if a == b:
            continue
        for p in range(a, b):
            e = perm[p]
            j = src[e]
            for h in range(heads):
                z = pq[i, h] + pk[j, h]
                if has_e:
                    z = z + ea[e, h]
                w[e, h] = z if z > 0 else z * slope
                if p == a or w[e, h] > m[h]:
                    m[h] = w[e, h]
        _row_exp(w, perm, a, b, m, den)
        _row_sum(out, w, perm, src, v, i, a, b, den)
    return out, w


@njit(cache=True, fastmath=FAST, inline="always")
def _row_logit_grads(gs, w, perm, src, go, gw_in, has_gw, v, i, a, b, total):
    """d logit_e = w_e (gw_e - sum over the target's edges of w gw) into gs[e] (H,) for
    the edges perm[a:b] of target i, gw_e = <go[i, h], v[src(e), h]> (+ gw_in[e, h]);
    ``total`` is (H,) scratch."""
    heads, dim = v.shape[1], v.shape[2]
    for h in range(heads):
        total[h] = 0
    for p in range(a, b):
        e = perm[p]
        j = src[e]
        for h in range(heads):
            g = go[i, h, 0] * 0
            for d in range(dim):
                g += go[i, h, d] * v[j, h, d]
            if has_gw:
                g = g + gw_in[e, h]
            gs[e, h] = w[e, h] * g
            total[h] += gs[e, h]
    for p in range(a, b):
        e = perm[p]
        for h in range(heads):
            gs[e, h] = gs[e, h] - w[e, h] * total[h]


@njit(cache=True, fastmath=FAST, inline="always")
def _row_value_grads(g_v, w, perm, src, go, i, a, b):
    """g_v[src(e)] += w_e go[i] for the edges perm[a:b] of target i, every head."""
    heads, dim = go.shape[1], go.shape[2]
    for p in range(a, b):
        e = perm[p]
        j = src[e]
        for h in range(heads):
            we = w[e, h]
            for d in range(dim):
                g_v[j, h, d] += we * go[i, h, d]


@njit(cache=True, fastmath=FAST, nogil=True)
def gat_backward(indptr, perm, src, pq, pk, ea, has_e, v, w, go, gw_in, has_gw, slope,
                 num_k):
    """Gradients of ``gat_forward`` for the output's gradient ``go`` (Nq, H, D) and the
    weights' ``gw_in`` (E, H), read only when ``has_gw``.

    Returns:
        g_pq (Nq, H), g_pk (Nk, H), g_v (Nk, H, D), g_ea (E, H).
    """
    nq, heads = pq.shape
    g_pq = np.zeros((nq, heads), v.dtype)
    g_pk = np.zeros((num_k, heads), v.dtype)
    g_v = np.zeros((num_k, heads, v.shape[2]), v.dtype)
    g_ea = np.empty((perm.shape[0], heads), v.dtype)
    total = np.empty(heads, v.dtype)
    for i in range(nq):
        a, b = indptr[i], indptr[i + 1]
        _row_logit_grads(g_ea, w, perm, src, go, gw_in, has_gw, v, i, a, b, total)
        for p in range(a, b):
            e = perm[p]
            j = src[e]
            for h in range(heads):
                z = pq[i, h] + pk[j, h]
                if has_e:
                    z = z + ea[e, h]
                gz = g_ea[e, h] if z > 0 else g_ea[e, h] * slope
                g_ea[e, h] = gz
                g_pq[i, h] += gz
                g_pk[j, h] += gz
        _row_value_grads(g_v, w, perm, src, go, i, a, b)
    return g_pq, g_pk, g_v, g_ea


@njit(cache=True, fastmath=FAST, nogil=True)
def gatv2_forward(indptr, perm, src, pq, pk, ea, has_e, att, v, slope):
    """GATv2 attention: s_e = att . LeakyReLU(pq[dst] + pk[src] [+ ea]), softmax per
    target, out_i = sum_e w_e v[src(e)].

    Args:
        indptr, perm, src: as ``gat_forward``.
        pq: (Nq, H, A); pk: (Nk, H, A); ea: (E, H, A), read only when ``has_e``;
        att: (H, A); v: (Nk, H, D) (may be pk itself); slope: LeakyReLU slope.

    Returns:
        out (Nq, H, D) and the weights w (E, H), in edge order.
    """
    nq, heads, width = pq.shape
    out = np.zeros((nq, heads, v.shape[2]), v.dtype)
    w = np.empty((perm.shape[0], heads), v.dtype)
    m, den = np.empty(heads, v.dtype), np.empty(heads, v.dtype)
    for i in range(nq):
        a, b = indptr[i], indptr[i + 1]
        if a == b:
            continue
        for p in range(a, b):
            e = perm[p]
            j = src[e]
            for h in range(heads):
                s = att[h, 0] * 0
                for c in range(width):
                    z = pq[i, h, c] + pk[j, h, c]
                    if has_e:
                        z = z + ea[e, h, c]
                    s += (z if z > 0 else z * slope) * att[h, c]
                w[e, h] = s
                if p == a or s > m[h]:
                    m[h] = s
        _row_exp(w, perm, a, b, m, den)
        _row_sum(out, w, perm, src, v, i, a, b, den)
    return out, w


@njit(cache=True, fastmath=FAST, nogil=True)
def gatv2_backward(indptr, perm, src, pq, pk, ea, has_e, att, v, v_is_k, w, go, gw_in,
                   has_gw, slope, need_ea):
    """Gradients of ``gatv2_forward`` (arguments as there; ``go`` (Nq, H, D) and
    ``gw_in`` (E, H) the gradients of its outputs). With ``v_is_k`` the values are the
    keys and their gradient is added to g_pk.

    Returns:
        g_pq (Nq, H, A), g_pk (Nk, H, A), g_v (Nk, H, D) (empty when ``v_is_k``),
        g_ea (E, H, A) (empty unless ``need_ea``), g_att (H, A).
    """
    nq, heads, width = pq.shape
    num_k = pk.shape[0]
    g_pq = np.zeros((nq, heads, width), v.dtype)
    g_pk = np.zeros((num_k, heads, width), v.dtype)
    g_v = np.zeros((0 if v_is_k else v.shape[0], heads, v.shape[2]), v.dtype)
    g_ea = np.empty((perm.shape[0] if need_ea else 0, heads, width), v.dtype)
    g_att = np.zeros((heads, width), v.dtype)
    gs = np.empty((perm.shape[0], heads), v.dtype)
    total = np.empty(heads, v.dtype)
    for i in range(nq):
        a, b = indptr[i], indptr[i + 1]
        _row_logit_grads(gs, w, perm, src, go, gw_in, has_gw, v, i, a, b, total)
        for p in range(a, b):
            e = perm[p]
            j = src[e]
            for h in range(heads):
                for c in range(width):
                    z = pq[i, h, c] + pk[j, h, c]
                    if has_e:
                        z = z + ea[e, h, c]
                    g_att[h, c] += gs[e, h] * (z if z > 0 else z * slope)
                    gz = gs[e, h] * att[h, c]
                    if not z > 0:
                        gz = gz * slope
                    g_pq[i, h, c] += gz
                    g_pk[j, h, c] += gz
                    if need_ea:
                        g_ea[e, h, c] = gz
        _row_value_grads(g_pk if v_is_k else g_v, w, perm, src, go, i, a, b)
    return g_pq, g_pk, g_v, g_ea, g_att
