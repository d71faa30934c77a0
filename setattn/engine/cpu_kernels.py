"""The fused edge kernels on the CPU: one pass over each target's edges.

FUSED_GAT, FUSED_GATV2 and FUSED_DOT (:mod:`setattn.engine.fused_gat`,
:mod:`setattn.engine.fused_gatv2`, :mod:`setattn.engine.fused_dot`) run these on eager
CPU tensors, in two steps each way:

* the score's logits, one loop over the edges (``gat_logits``, ``gatv2_logits``,
  ``dot_logits``), and their gradients (``gat_logit_grads``, ``gatv2_logit_grads``,
  ``dot_logit_grads``);
* the softmax over each target's incoming edges and the weighted sum of the values
  (``softmax_sum``) and its gradients (``softmax_sum_grads``), shared by both scores:
  each target's edges are a row of a CSR layout (``by_target``, a stable counting sort
  of the edges by target, O(E + N)), visited a few times in a row.

No (E, H, D) message, gathered key or activated score is stored, and a new batch of
graphs costs one counting sort, not a sort and two sparse layouts. The backward pass
recomputes the activations from the node terms and keeps only the (E, H) weights.

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


@njit(cache=True, fastmath=FAST, nogil=True)
def softmax_sum(indptr, perm, src, w, v):
    """The softmax of the logits over each target's edges, in place, and the weighted sum
    of the values: out_i = sum_{e into i} w_e v[src(e)].

    Per target and head the logits are shifted by their max (by 0 when it is not
    finite) and a sum that is not positive is taken as 1: the rules of
    ``segment_softmax`` (a target no edge enters gets 0).

    Args:
        indptr, perm: ``by_target`` of the edges; src: (E,) source of every edge.
        w: (E, H) logits in edge order, replaced by the weights.
        v: (Nk, H, D) values.

    Returns:
        out (Nq, H, D).
    """
    nq, heads, dim = indptr.shape[0] - 1, w.shape[1], v.shape[2]
    out = np.zeros((nq, heads, dim), v.dtype)
    m, den = np.empty(heads, w.dtype), np.empty(heads, w.dtype)
    for i in range(nq):
        a, b = indptr[i], indptr[i + 1]
        if a == b:
            continue
        for h in range(heads):
            m[h] = w[perm[a], h]
        for p in range(a + 1, b):
            e = perm[p]
            for h in range(heads):
                if w[e, h] > m[h]:
                    m[h] = w[e, h]
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
        for p in range(a, b):
            e = perm[p]
            j = src[e]
            for h in range(heads):
                we = w[e, h] / den[h]
                w[e, h] = we
                for d in range(dim):
                    out[i, h, d] += we * v[j, h, d]
    return out


@njit(cache=True, fastmath=FAST, nogil=True)
def softmax_sum_grads(indptr, perm, src, w, v, go, gw_in, has_gw, g_v):
    """Gradients of ``softmax_sum``: the logits' (returned) and the values' (added to
    ``g_v``).

    With gw_e = <go[i], v[src(e)]> (+ gw_in[e]) per head, d logit_e = w_e (gw_e - sum
    over the edges e' into the same target of w_e' gw_e'), and g_v[src(e)] += w_e go[i].

    Args:
        indptr, perm, src, v: as ``softmax_sum``; w: (E, H) its weights.
        go: (Nq, H, D) the output's gradient; gw_in: (E, H) the weights' own gradient,
            read only when ``has_gw``; g_v: (Nk, H, D), added to.

    Returns:
        (E, H) gradient of the logits.
    """
    nq, heads, dim = indptr.shape[0] - 1, w.shape[1], v.shape[2]
    gs = np.empty(w.shape, w.dtype)
    total = np.empty(heads, w.dtype)
    zero = np.zeros(1, w.dtype)[0]
    for i in range(nq):
        a, b = indptr[i], indptr[i + 1]
        for h in range(heads):
            total[h] = 0
        for p in range(a, b):
            e = perm[p]
            j = src[e]
            for h in range(heads):
                g = zero
                for d in range(dim):
                    g += go[i, h, d] * v[j, h, d]
                if has_gw:
                    g = g + gw_in[e, h]
                gs[e, h] = w[e, h] * g
                total[h] += gs[e, h]
                we = w[e, h]
                for d in range(dim):
                    g_v[j, h, d] += we * go[i, h, d]
        for p in range(a, b):
            e = perm[p]
            for h in range(heads):
                gs[e, h] = gs[e, h] - w[e, h] * total[h]
    return gs


@njit(cache=True, fastmath=FAST, nogil=True)
def head_dots(x, att):
    """Per-head dot products of node rows with T attention vectors: x (N, H, D), att
    (T, H, D) -> (T, N, H), out[t, n, h] = <x[n, h], att[t, h]>."""
    terms, (n, heads, dim) = att.shape[0], x.shape
    out = np.empty((terms, n, heads), x.dtype)
    zero = np.zeros(1, x.dtype)[0]
    for i in range(n):
        for t in range(terms):
            for h in range(heads):
                acc = zero
                for d in range(dim):
                    acc += x[i, h, d] * att[t, h, d]
                out[t, i, h] = acc
    return out


@njit(cache=True, fastmath=FAST, nogil=True)
def head_dot_grads(x, att, g, need_x):
    """Gradients of ``head_dots`` for the output's gradient g (T, N, H): g_x (N, H, D),
    sum_t g[t, n, h] att[t, h] (empty unless ``need_x``), and g_att (T, H, D),
    sum_n g[t, n, h] x[n, h]."""
    terms, (n, heads, dim) = att.shape[0], x.shape
    g_x = np.zeros((n if need_x else 0, heads, dim), x.dtype)
    g_att = np.zeros(att.shape, att.dtype)
    for i in range(n):
        for t in range(terms):
            for h in range(heads):
                gi = g[t, i, h]
                for d in range(dim):
                    g_att[t, h, d] += gi * x[i, h, d]
                if need_x:
                    for d in range(dim):
                        g_x[i, h, d] += gi * att[t, h, d]
    return g_x, g_att


@njit(cache=True, fastmath=FAST, nogil=True)
def dot_logits(src, dst, q, k, scale):
    """Dot-product logits s_e = scale <q[dst(e), h], k[src(e), h]>: (E, H).

    Args:
        src, dst: (E,); q: (Nq, H, A) prepared queries; k: (Nk, H, A) prepared keys;
        scale: the score's scale.
    """
    heads, width = q.shape[1], q.shape[2]
    s = np.empty((src.shape[0], heads), q.dtype)
    zero = np.zeros(1, q.dtype)[0]
    for e in range(src.shape[0]):
        i, j = dst[e], src[e]
        for h in range(heads):
            acc = zero
            for c in range(width):
                acc += q[i, h, c] * k[j, h, c]
            s[e, h] = acc * scale
    return s


@njit(cache=True, fastmath=FAST, nogil=True)
def dot_logit_grads(src, dst, q, k, gs, scale):
    """Gradients of ``dot_logits`` for the logits' gradient ``gs`` (E, H): g_q (Nq, H, A)
    and g_k (Nk, H, A)."""
    heads, width = q.shape[1], q.shape[2]
    g_q, g_k = np.zeros(q.shape, q.dtype), np.zeros(k.shape, k.dtype)
    for e in range(src.shape[0]):
        i, j = dst[e], src[e]
        for h in range(heads):
            g = gs[e, h] * scale
            for c in range(width):
                g_q[i, h, c] += g * k[j, h, c]
                g_k[j, h, c] += g * q[i, h, c]
    return g_q, g_k


@njit(cache=True, fastmath=FAST, inline="always")
def _gat_input(pq, pk, ea, has_e, e, i, j, h):
    """pq[i, h] + pk[j, h] (+ ea[e, h]): GAT's LeakyReLU input on edge e (j -> i)."""
    z = pq[i, h] + pk[j, h]
    return z + ea[e, h] if has_e else z


@njit(cache=True, fastmath=FAST, nogil=True)
def gat_logits(src, dst, pq, pk, ea, has_e, slope):
    """GAT's logits s_e = LeakyReLU(pq[dst] + pk[src] [+ ea]): (E, H).

    Args:
        src, dst: (E,); pq: (Nq, H) target terms; pk: (Nk, H) source terms; ea: (E, H)
            edge terms, read only when ``has_e``; slope: the LeakyReLU slope.
    """
    heads = pq.shape[1]
    s = np.empty((src.shape[0], heads), pq.dtype)
    for e in range(src.shape[0]):
        i, j = dst[e], src[e]
        for h in range(heads):
            z = _gat_input(pq, pk, ea, has_e, e, i, j, h)
            s[e, h] = z if z > 0 else z * slope
    return s


@njit(cache=True, fastmath=FAST, nogil=True)
def gat_logit_grads(src, dst, pq, pk, ea, has_e, gs, slope):
    """Gradients of ``gat_logits`` for the logits' gradient ``gs`` (E, H): g_pq (Nq, H),
    g_pk (Nk, H) and the edge terms' g_ea (E, H)."""
    heads = pq.shape[1]
    g_pq, g_pk = np.zeros(pq.shape, pq.dtype), np.zeros(pk.shape, pk.dtype)
    g_ea = np.empty(gs.shape, gs.dtype)
    for e in range(src.shape[0]):
        i, j = dst[e], src[e]
        for h in range(heads):
            z = _gat_input(pq, pk, ea, has_e, e, i, j, h)
            gz = gs[e, h] if z > 0 else gs[e, h] * slope
            g_ea[e, h] = gz
            g_pq[i, h] += gz
            g_pk[j, h] += gz
    return g_pq, g_pk, g_ea


@njit(cache=True, fastmath=FAST, nogil=True)
def gat_shifted_logits(indptr, src_rows, pq, pk, ea_rows, has_e, slope):
    """GAT's logits for a large graph whose sum is a CSR product, in the CSR layout's row
    order (the edges sorted by target), each shifted by its target's max per head (by 0
    when that is not finite), as ``softmax_sum`` shifts them: only the source terms are
    read at random. Their ``exp`` is one vectorised torch call, then
    ``normalise_rows`` makes them weights.

    Args:
        indptr: (Nq + 1,) row pointers; src_rows: (E,) the sources in row order.
        pq: (Nq, H), pk: (Nk, H) node terms; ea_rows: (E, H) edge terms in row order,
            read only when ``has_e``; slope: the LeakyReLU slope.

    Returns:
        (H, E) shifted logits, head by head in row order.
    """
    nq, heads, e_all = indptr.shape[0] - 1, pq.shape[1], src_rows.shape[0]
    rows = np.empty((heads, e_all), pq.dtype)
    m = np.empty(heads, pq.dtype)
    for i in range(nq):
        a, b = indptr[i], indptr[i + 1]
        for p in range(a, b):
            j = src_rows[p]
            for h in range(heads):
                z = _gat_input(pq, pk, ea_rows, has_e, p, i, j, h)
                z = z if z > 0 else z * slope
                rows[h, p] = z
                if z > m[h] or p == a:
                    m[h] = z
        for h in range(heads):
            if not np.isfinite(m[h]):
                m[h] = 0
            for p in range(a, b):
                rows[h, p] -= m[h]
    return rows


@njit(cache=True, fastmath=FAST, nogil=True)
def normalise_rows(indptr, rows):
    """The exponentiated logits ``rows`` (H, E, row order) divided by their sum over each
    target (a sum that is not positive taken as 1), in place."""
    nq, heads = indptr.shape[0] - 1, rows.shape[0]
    for h in range(heads):
        for i in range(nq):
            a, b = indptr[i], indptr[i + 1]
            den = rows[h, a:b].sum()
            if not den > 0:
                den = 1
            for p in range(a, b):
                rows[h, p] = rows[h, p] / den


@njit(cache=True, fastmath=FAST, nogil=True)
def gat_row_grads(indptr, perm, src_rows, pq, pk, ea_rows, has_e, w_rows, gw_rows, slope,
                  need_ea):
    """Gradients of ``gat_shifted_logits`` then ``normalise_rows`` for the weights'
    gradient ``gw_rows``: g_pq (Nq, H), g_pk (Nk, H) and, when ``need_ea``, the edge
    terms' g_ea (E, H) in edge order (else empty).

    d logit_e = w_e (gw_e - sum over the edges e' into the same target of w_e' gw_e'),
    then through the LeakyReLU as ``gat_logit_grads``. ``w_rows`` and ``gw_rows`` are
    (H, E) in the layout's row order, so only the source terms' rows are met at random.
    """
    nq, heads = indptr.shape[0] - 1, pq.shape[1]
    g_pq, g_pk = np.zeros(pq.shape, pq.dtype), np.zeros(pk.shape, pk.dtype)
    g_ea = np.empty((perm.shape[0] if need_ea else 0, heads), pq.dtype)
    total = np.empty(heads, pq.dtype)
    for i in range(nq):
        a, b = indptr[i], indptr[i + 1]
        for h in range(heads):
            acc = total[h] * 0
            for p in range(a, b):
                acc += w_rows[h, p] * gw_rows[h, p]
            total[h] = acc
        for p in range(a, b):
            j = src_rows[p]
            for h in range(heads):
                gs = w_rows[h, p] * gw_rows[h, p] - w_rows[h, p] * total[h]
                z = _gat_input(pq, pk, ea_rows, has_e, p, i, j, h)
                gz = gs if z > 0 else gs * slope
                if need_ea:
                    g_ea[perm[p], h] = gz
                g_pq[i, h] += gz
                g_pk[j, h] += gz
    return g_pq, g_pk, g_ea


@njit(cache=True, fastmath=FAST, nogil=True)
def gatv2_logits(src, dst, pq, pk, ea, has_e, att, slope):
    """GATv2's logits s_e = att . LeakyReLU(pq[dst] + pk[src] [+ ea]): (E, H).

    Args:
        src, dst: (E,); pq: (Nq, H, A); pk: (Nk, H, A); ea: (E, H, A), read only when
            ``has_e``; att: (H, A); slope: the LeakyReLU slope.
    """
    heads, width = pq.shape[1], pq.shape[2]
    s = np.empty((src.shape[0], heads), pq.dtype)
    zero = np.zeros(1, pq.dtype)[0]
    for e in range(src.shape[0]):
        i, j = dst[e], src[e]
        for h in range(heads):
            acc = zero
            for c in range(width):
                z = pq[i, h, c] + pk[j, h, c]
                if has_e:
                    z = z + ea[e, h, c]
                acc += (z if z > 0 else z * slope) * att[h, c]
            s[e, h] = acc
    return s


@njit(cache=True, fastmath=FAST, nogil=True)
def gatv2_logit_grads(src, dst, pq, pk, ea, has_e, att, gs, slope, need_ea):
    """Gradients of ``gatv2_logits`` for the logits' gradient ``gs`` (E, H): g_pq
    (Nq, H, A), g_pk (Nk, H, A), g_ea (E, H, A) (empty unless ``need_ea``) and g_att
    (H, A)."""
    heads, width = pq.shape[1], pq.shape[2]
    g_pq, g_pk = np.zeros(pq.shape, pq.dtype), np.zeros(pk.shape, pk.dtype)
    g_ea = np.empty((src.shape[0] if need_ea else 0, heads, width), pq.dtype)
    g_att = np.zeros(att.shape, att.dtype)
    for e in range(src.shape[0]):
        i, j = dst[e], src[e]
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
    return g_pq, g_pk, g_ea, g_att
