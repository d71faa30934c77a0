"""CSR layouts of an edge list and the sparse-dense products the SPARSE_CSR path runs on.

Per head, the weights of an edge list form a sparse (Nq, Nk) matrix; the H heads are
laid out block-diagonally as one (Nq * H, Nk * H) CSR matrix, so that one call of torch's
CSR kernels serves every head. Two autograd nodes are built on them:

* :class:`EdgeSum`: out_i = sum_{j -> i} w_ij v_j, a CSR x dense product;
* :class:`EdgeDot`: s_e = <q_dst(e), k_src(e)>, a sampled dense x dense product.

Their backward passes are made of the same two nodes, so only the (E, H) weights and
the node rows are kept, never (E, H, D) messages, and double backward is right too.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch
from torch import Tensor

from setattn.topology import Edges


@dataclass
class CSRSide:
    """Sparsity pattern of a per-head block-diagonal matrix in CSR form.

    Row ``r * H + h`` holds head h of row node r; its column ``c * H + h`` is head h of
    column node c. ``order`` maps every stored slot to its flat (edge * H + head)
    position in an (E, H) tensor, so values are ``w.reshape(-1)[order]``.
    """

    crow: Tensor  # (R * H + 1,)
    col: Tensor  # (E * H,)
    order: Tensor  # (E * H,)
    shape: tuple[int, int]  # (R * H, C * H)


def csr_side(rows: Tensor, cols: Tensor, n_rows: int, n_cols: int, heads: int) -> CSRSide:
    """The layout whose row r holds the edges with ``rows == r``.

    Args:
        rows, cols: (E,) row and column node of every edge.
        n_rows, n_cols: node counts R and C; heads: H.
    """
    e = rows.numel()
    perm = torch.argsort(rows, stable=True)  # (E,) edges grouped by row
    deg = rows.new_zeros(n_rows).index_add_(0, rows, torch.ones_like(rows))  # (R,)
    start = torch.cumsum(deg, 0) - deg  # (R,) first sorted edge of each row
    r = rows[perm]  # (E,)
    local = torch.arange(e, device=rows.device) - start[r]  # (E,) rank within its row
    hs = torch.arange(heads, device=rows.device)  # (H,)
    slot = (start[r] * heads + local)[:, None] + hs[None, :] * deg[r][:, None]  # (E, H)
    order = torch.empty(e * heads, dtype=torch.long, device=rows.device)  # (E * H,)
    col = torch.empty_like(order)  # (E * H,)
    order[slot.flatten()] = (perm[:, None] * heads + hs[None, :]).flatten()
    col[slot.flatten()] = (cols[perm][:, None] * heads + hs[None, :]).flatten()
    crow = torch.cat([deg.new_zeros(1), torch.cumsum(deg.repeat_interleave(heads), 0)])
    return CSRSide(crow, col, order, (n_rows * heads, n_cols * heads))


def csr_pair(top: Edges, heads: int) -> tuple[CSRSide, CSRSide]:
    """(target-major, source-major) CSR layouts of an edge list, cached on the topology."""
    key = ("csr", heads)
    if key not in top._cache:
        src, dst = top.index[0], top.index[1]
        top._cache[key] = (csr_side(dst, src, top.num_q, top.num_kv, heads),
                           csr_side(src, dst, top.num_kv, top.num_q, heads))
    return top._cache[key]


def csr_tensor(side: CSRSide, values: Tensor) -> Tensor:
    """A CSR tensor of ``side``'s pattern holding ``values`` (E * H,) in slot order."""
    # torch notes once per process that CSR support is "in beta"; these kernels are used
    # on purpose, so that notice is silenced here, for this call only
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return torch.sparse_csr_tensor(side.crow, side.col, values, size=side.shape,
                                       device=values.device, check_invariants=False)


def _spmm(side: CSRSide, w: Tensor, x: Tensor) -> Tensor:
    """Per-edge weights (E, H) times node rows (C, H, D) -> (R, H, D)."""
    a = csr_tensor(side, w.reshape(-1).index_select(0, side.order))
    # into a fresh row-major result: ``a @ x`` zero-fills a column-major one and copies it
    # back, two passes over cold memory that cost more than the product itself
    out = x.new_empty(side.shape[0], x.shape[-1])  # (R * H, D)
    out.addmm_(a, x.reshape(-1, x.shape[-1]), beta=0.0)  # beta 0: out's contents unread
    return out.view(-1, x.shape[1], x.shape[2])


def _sddmm(side: CSRSide, a: Tensor, b: Tensor) -> Tensor:
    """<a_row, b_col> on every edge and head: a (R, H, D), b (C, H, D) -> (E, H)."""
    pattern = csr_tensor(side, a.new_zeros(side.col.numel()))
    flat = a.reshape(-1, a.shape[-1])  # (R * H, D)
    vals = torch.sparse.sampled_addmm(pattern, flat, b.reshape(-1, b.shape[-1]).t(), beta=0.0)
    out = vals.values().new_empty(side.col.numel()).index_copy_(0, side.order, vals.values())
    return out.view(-1, a.shape[1])  # (E, H)


class EdgeSum(torch.autograd.Function):
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
        gw = EdgeDot.apply(grad_out, v, fwd, bwd) if ctx.needs_input_grad[0] else None  # (E, H)
        gv = EdgeSum.apply(w, grad_out, bwd, fwd) if ctx.needs_input_grad[1] else None
        return gw, gv, None, None


class EdgeDot(torch.autograd.Function):
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
        gq = EdgeSum.apply(grad_s, k, fwd, bwd) if ctx.needs_input_grad[0] else None  # (Nq, H, D)
        gk = EdgeSum.apply(grad_s, q, bwd, fwd) if ctx.needs_input_grad[1] else None  # (Nk, H, D)
        return gq, gk, None, None
