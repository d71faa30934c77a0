"""DENSE_SDPA and DENSE_BLOCKS: complete and bipartite sets, padded in size buckets.

Sets of similar (Lq, Lk) share a bucket and are padded to its largest, so logits are
(B, H, Lq, Lk) blocks; DENSE_SDPA hands each bucket to ``scaled_dot_product_attention``,
DENSE_BLOCKS computes logits, masked softmax and weighted sum itself (and can return the
weights). No all-pairs edge list is built unless per-edge inputs or weights need it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from setattn.engine.plan import dot_logits
from setattn.engine.scoring import combine, dot_scale, prepare
from setattn.engine.softmax import hard_dense, masked_softmax
from setattn.topology import Bipartite


def _ladder(n: Tensor) -> Tensor:
    """Round sizes up to 1, 2, 3, 4, 6, 8, 12, 16, ...: padding within a bucket <= 1/3."""
    n = n.clamp_min(1).double()
    p2 = torch.exp2(torch.ceil(torch.log2(n)))  # next power of two
    three_quarters = 0.75 * p2
    return torch.where(n <= three_quarters, three_quarters, p2).ceil().long()


def size_buckets(sizes_q: Tensor, sizes_kv: Tensor) -> list[Tensor]:
    """Group sets with nonzero queries and keys into buckets of similar (Lq, Lk).

    Args:
        sizes_q, sizes_kv: (G,) queries and keys of every set.

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
class Bucket:
    """Sets padded together: node index and validity of every slot, per side."""

    sets: Tensor  # (B,) set indices, ascending
    q_index: Tensor  # (B, Lq) query node of each slot (padded slots repeat a real one)
    q_valid: Tensor  # (B, Lq)
    k_index: Tensor  # (B, Lk)
    k_valid: Tensor  # (B, Lk)
    padded: bool  # some slot is padding
    whole: bool  # the bucket is the whole batch without padding: plain reshapes suffice
    q_pos: Tensor | None = None  # (Nq_b,) flat positions of the valid query slots
    uniform: bool = False  # every set padded to the caller's max_sizes (nothing read)


def _uniform_slots(ptr: Tensor, sizes: Tensor, length: int) -> tuple[Tensor, Tensor]:
    """Slots of every set padded to ``length``: node index (G, L) and validity (G, L).

    Invalid slots point at node 0 (their rows are gathered and ignored); nothing is read
    back from ``ptr``."""
    pos = torch.arange(length, device=ptr.device)  # (L,)
    valid = pos[None, :] < sizes[:, None]  # (G, L)
    index = ptr[:-1][:, None] + pos[None, :]  # (G, L)
    return torch.where(valid, index, torch.zeros_like(index)), valid


def _uniform_bucket(top: Bipartite) -> Bucket:
    """One bucket of all sets padded to ``top.max_sizes`` (no host read)."""
    lq, lk = top.max_sizes
    qi, qv = _uniform_slots(top.ptr_q, top.sizes_q, lq)
    ki, kv = _uniform_slots(top.ptr_kv, top.sizes_kv, lk)
    sets = torch.arange(top.sizes_q.numel(), device=top.ptr_q.device)  # (G,)
    return Bucket(sets, qi, qv, ki, kv, padded=True, whole=False, uniform=True)


def _slots(ptr: Tensor, sets: Tensor, sizes: Tensor) -> tuple[Tensor, Tensor]:
    """Node index (B, L) of each padded slot and its validity (B, L)."""
    length = int(sizes[sets].max())
    pos = torch.arange(length, device=ptr.device)  # (L,)
    valid = pos[None, :] < sizes[sets][:, None]  # (B, L)
    index = ptr[sets][:, None] + pos[None, :]  # (B, L)
    return torch.where(valid, index, ptr[sets][:, None]), valid


def bucket_plan(top: Bipartite) -> list[Bucket]:
    """The size buckets of a topology, computed once and cached on it (a host read,
    unless the topology has ``max_sizes``: then one bucket, nothing read)."""
    if "buckets" not in top._cache:
        buckets = [_uniform_bucket(top)] if top.max_sizes is not None else []
        for sets in (size_buckets(top.sizes_q, top.sizes_kv) if not buckets else []):
            qi, qv = _slots(top.ptr_q, sets, top.sizes_q)
            ki, kv = _slots(top.ptr_kv, sets, top.sizes_kv)
            padded = not bool(qv.all() and kv.all())
            whole = not padded and sets.numel() == top.sizes_q.numel()
            q_pos = torch.nonzero(qv.flatten()).flatten()  # (Nq_b,)
            buckets.append(Bucket(sets, qi, qv, ki, kv, padded, whole, q_pos))
        top._cache["buckets"] = buckets
        # every bucket's slots back to back: one gather per tensor feeds all buckets, so
        # the backward pass scatters into one gradient instead of one per bucket
        top._cache["q_slots"] = torch.cat([b.q_index.flatten() for b in buckets]
                                          or [top.ptr_q[:0]])
        top._cache["k_slots"] = torch.cat([b.k_index.flatten() for b in buckets]
                                          or [top.ptr_q[:0]])
    return top._cache["buckets"]


def _bucket_views(x: Tensor, slots: Tensor, buckets: list[Bucket], side: str) -> list[Tensor]:
    """Gather (N, H, A) rows once for all padded slots -> one (B, L, H, A) view per bucket."""
    flat = x.index_select(0, slots)  # (sum of B * L, H, A)
    shapes = [(bk.q_index if side == "q" else bk.k_index).shape for bk in buckets]
    # one split (not a slice per bucket): its backward is a single concatenation
    parts = flat.split([b * length for b, length in shapes])
    return [p.view(b, length, *x.shape[1:]) for p, (b, length) in zip(parts, shapes)]


def _block_inputs(pq: Tensor, pk: Tensor, v: Tensor, top: Bipartite,
                  buckets: list[Bucket]) -> list[tuple[Tensor, Tensor, Tensor]]:
    """(B, Lq, H, A) queries, (B, Lk, H, A) keys and (B, Lk, H, Dv) values per bucket."""
    if not buckets:
        return []
    if buckets[0].whole:  # one bucket, no padding: plain reshapes
        bk, heads = buckets[0], v.shape[1]
        b, lq, lk = bk.sets.numel(), bk.q_valid.shape[1], bk.k_valid.shape[1]
        return [(pq.reshape(b, lq, heads, -1), pk.reshape(b, lk, heads, -1),
                 v.reshape(b, lk, heads, v.shape[2]))]
    q_views = _bucket_views(pq, top._cache["q_slots"], buckets, "q")
    k_views = _bucket_views(pk, top._cache["k_slots"], buckets, "k")
    v_views = _bucket_views(v, top._cache["k_slots"], buckets, "k")
    return list(zip(q_views, k_views, v_views))


def _bucket_edge_ids(top: Bipartite, bk: Bucket) -> tuple[Tensor, Tensor]:
    """Canonical edge id (B, Lq, Lk) of every slot pair (0 where padded) and validity."""
    edge_off = top.edge_offsets()  # (G + 1,)
    lq, lk = bk.q_valid.shape[1], bk.k_valid.shape[1]
    nk = top.sizes_kv[bk.sets][:, None, None]  # (B, 1, 1)
    eid = (edge_off[bk.sets][:, None, None]
           + torch.arange(lq, device=nk.device)[None, :, None] * nk
           + torch.arange(lk, device=nk.device)[None, None, :])  # (B, Lq, Lk)
    pair_valid = bk.q_valid[:, :, None] & bk.k_valid[:, None, :]  # (B, Lq, Lk)
    return torch.where(pair_valid, eid, torch.zeros_like(eid)), pair_valid


def _block_mask_bias(bk: Bucket, eid: Tensor | None, mask: Tensor | None,
                     bias: Tensor | None) -> tuple[Tensor | None, Tensor | None]:
    """Which slot pairs count, bool (B, H|1, Lq|1, Lk) or None, and the bias (B, H|1, Lq, Lk)."""
    ok = bk.k_valid[:, None, None, :] if bk.padded else None  # (B, 1, 1, Lk)
    if mask is not None:
        m = mask[eid].permute(0, 3, 1, 2)  # (B, H|1, Lq, Lk)
        ok = m if ok is None else ok & m
    dense_bias = None if bias is None else bias[eid].permute(0, 3, 1, 2)  # (B, H|1, Lq, Lk)
    return ok, dense_bias


def attend_blocks(q: Tensor, k: Tensor, v: Tensor, top: Bipartite, score: nn.Module,
                  bias: Tensor | None, mask: Tensor | None, edge_attr: Tensor | None,
                  p: float, top_k: int | None, sdpa: bool,
                  need_weights: bool) -> tuple[Tensor, Tensor | None]:
    """Attention of every set's queries over its keys, bucket by bucket.

    Args:
        q: (Nq, H, Dk); k: (Nk, H, Dk); v: (Nk, H, Dv).
        bias: (E, H|1) or None; mask: (E, H|1) bool or None; edge_attr: (E, H[, A]) or
            None, all in the canonical (target-major) edge order.
        p: dropout probability; top_k: hard attention's k, or None.
        sdpa: DENSE_SDPA (``scaled_dot_product_attention``) rather than DENSE_BLOCKS.
        need_weights: also return the weights (DENSE_BLOCKS only).

    Returns:
        (Nq, H, Dv) output and the (E, H) weights, or None when not needed.
    """
    heads, dv = v.shape[1], v.shape[2]
    if top.max_sizes is not None and (top.num_q == 0 or top.num_kv == 0):
        return _no_rows(top, v), _gather_weights([], [], top, v, need_weights)
    pq, pk = prepare(score, q, k)
    scale = dot_scale(score, pq.shape[-1])
    per_edge = bias is not None or mask is not None or edge_attr is not None or need_weights
    buckets = bucket_plan(top)
    rows, outs, edge_ids, weights = [], [], [], []
    for bk, (qb, kb, vb) in zip(buckets, _block_inputs(pq, pk, v, top, buckets)):
        # per-edge inputs in canonical (target-major) order -> (B, H|1, Lq, Lk)
        eid, pair_valid = _bucket_edge_ids(top, bk) if per_edge else (None, None)
        ok, dense_bias = _block_mask_bias(bk, eid, mask, bias)
        if sdpa:
            may_empty = mask is not None or bk.uniform  # rows without any key to attend
            ob = _sdpa_block(qb, kb, vb, ok, dense_bias, scale, p, may_empty)  # (B, Lq, H, Dv)
        else:
            ea = None if edge_attr is None else edge_attr[eid]  # (B, Lq, Lk, H[, A])
            ob, w = _explicit_block(score, qb, kb, vb, ok, dense_bias, ea, scale, p, top_k)
            if need_weights:
                edge_ids.append(eid[pair_valid])  # (E_b,)
                weights.append(w.permute(0, 2, 3, 1)[pair_valid])  # (E_b, H)
        if bk.whole:
            out = ob.reshape(top.num_q, heads, dv)  # (Nq, H, Dv)
            return out, _gather_weights(weights, edge_ids, top, v, need_weights)
        if bk.uniform:  # padded slots point at row 0: they add zeros there
            kept = ob * bk.q_valid[:, :, None, None]  # (G, Lq, H, Dv)
            out = v.new_zeros(top.num_q, heads, dv).index_add(
                0, bk.q_index.flatten(), kept.flatten(0, 1))  # (Nq, H, Dv)
            return out, _gather_weights(weights, edge_ids, top, v, need_weights)
        rows.append(bk.q_index.flatten().index_select(0, bk.q_pos))  # (Nq_b,)
        outs.append(ob.flatten(0, 1).index_select(0, bk.q_pos))  # (Nq_b, H, Dv)
    if not rows:  # no set has both queries and keys
        return _no_rows(top, v), _gather_weights(weights, edge_ids, top, v, need_weights)
    out = v.new_zeros(top.num_q, heads, dv)
    out = out.index_copy(0, torch.cat(rows), torch.cat(outs))  # (Nq, H, Dv)
    return out, _gather_weights(weights, edge_ids, top, v, need_weights)


def _no_rows(top: Bipartite, v: Tensor) -> Tensor:
    """(Nq, H, Dv) zeros, still on the autograd graph (no set has queries and keys)."""
    out = v.new_zeros(top.num_q, v.shape[1], v.shape[2])
    return out.index_copy(0, top.ptr_q[:0], v[:0])


def _explicit_block(score: nn.Module, qb: Tensor, kb: Tensor, vb: Tensor, ok: Tensor | None,
                    dense_bias: Tensor | None, ea: Tensor | None, scale: float | None,
                    p: float, top_k: int | None) -> tuple[Tensor, Tensor]:
    """DENSE_BLOCKS on one bucket: logits, masked softmax, weighted sum.

    Args:
        qb: (B, Lq, H, A); kb: (B, Lk, H, A); vb: (B, Lk, H, Dv).
        ok, dense_bias: broadcastable to (B, H, Lq, Lk), or None.
        ea: edge features (B, Lq, Lk, H[, A]) or None.

    Returns:
        (B, Lq, H, Dv) output and the (B, H, Lq, Lk) weights (without dropout).
    """
    if dot_logits(scale, ea):
        logits = torch.einsum("bihd,bjhd->bhij", qb, kb) * scale  # (B, H, Lq, Lk)
    else:
        pairs = combine(score, qb[:, :, None], kb[:, None], ea)  # (B, Lq, Lk, H)
        logits = pairs.permute(0, 3, 1, 2)  # (B, H, Lq, Lk)
    if dense_bias is not None:
        logits = logits + dense_bias
    w = masked_softmax(logits, ok)  # (B, H, Lq, Lk)
    if top_k is not None:
        w = hard_dense(w, ok, top_k)
    wd = F.dropout(w, p) if p > 0 else w
    return torch.einsum("bhij,bjhd->bihd", wd, vb), w  # (B, Lq, H, Dv)


def _gather_weights(weights: list[Tensor], edge_ids: list[Tensor], top: Bipartite, v: Tensor,
                    need: bool) -> Tensor | None:
    """Per-bucket (E_b, H) weights -> (E, H) in canonical order (None when not needed)."""
    if not need:
        return None
    if not weights:
        return v.new_zeros(top.num_edges, v.shape[1])
    w = v.new_zeros(top.num_edges, weights[0].shape[1])  # (E, H)
    return w.index_copy(0, torch.cat(edge_ids), torch.cat(weights))


def _sdpa_block(qb: Tensor, kb: Tensor, vb: Tensor, ok: Tensor | None,
                dense_bias: Tensor | None, scale: float, p: float,
                may_empty: bool = True) -> Tensor:
    """scaled_dot_product_attention on one bucket; rows with no valid key give 0.

    Args:
        qb: (B, Lq, H, D); kb: (B, Lk, H, D); vb: (B, Lk, H, Dv).
        ok: bool broadcastable to (B, H, Lq, Lk) or None; dense_bias likewise.
        may_empty: some row may have no valid key (a mask, or sets padded to
            ``max_sizes``); such rows attend to every slot and are then zeroed, which
            costs two masks but reads nothing back from the device.

    Returns:
        (B, Lq, H, Dv) output.
    """
    empty_rows = None
    if ok is not None and may_empty:
        empty_rows = ~ok.any(-1, keepdim=True)  # (B, H|1, Lq|1, 1)
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
