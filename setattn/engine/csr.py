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

import numpy as np
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

    Slot s of the layout is the s-th flat (edge * H + head) position in the order of
    the key ``row * H + head``, ties kept in edge order: row ``r * H + h`` holds head h
    of r's edges in the order they come in the list. On the CPU it is computed with
    NumPy, whose calls cost a fraction of torch's on the few thousand edges of a batch
    of molecules (this runs once per layer and batch); both give the same tensors.

    Args:
        rows, cols: (E,) row and column node of every edge.
        n_rows, n_cols: node counts R and C; heads: H.
    """
    shape = (n_rows * heads, n_cols * heads)
    if rows.device.type == "cpu":
        crow, col, order = _csr_numpy(rows.numpy(), cols.numpy(), n_rows, heads)
        return CSRSide(torch.from_numpy(crow), torch.from_numpy(col),
                       torch.from_numpy(order), shape)
    return CSRSide(*_csr_torch(rows, cols, n_rows, heads), shape)


# How both computations place the slots, with no sort or division of (E * H,) keys:
# with the edges sorted by row (``by_row``), sorted edge i of row r (its k-th, k = i -
# start[r]) holds, for head h, slot start[r] * H + h * deg[r] + k of block r * H + h,
# that is (start[r] * (H - 1) + i) + h * deg[r]: one (H, E) broadcast, and col and
# order are scattered to it. Block r * H + h starts at start[r] * H + h * deg[r].


def _csr_torch(rows: Tensor, cols: Tensor, n_rows: int,
               heads: int) -> tuple[Tensor, Tensor, Tensor]:
    """``csr_side``'s crow (R * H + 1,), col (E * H,) and order (E * H,), in torch (any
    device)."""
    e = rows.numel()
    by_row = torch.sort(rows, stable=True).indices  # (E,)
    deg = torch.bincount(rows, minlength=n_rows)  # (R,) edges per row
    start = torch.cat([deg.new_zeros(1), torch.cumsum(deg, 0)])  # (R + 1,)
    hs = torch.arange(heads, device=rows.device)[:, None]  # (H, 1)
    crow = torch.cat([(start[:-1] * heads + hs * deg).t().flatten(),
                      start.new_full((1,), e * heads)])  # (R * H + 1,)
    r = rows[by_row]  # (E,) row of each sorted edge
    slot = (start[r] * (heads - 1) + torch.arange(e, device=rows.device)
            + hs * deg[r]).flatten()  # (H * E,)
    col = torch.empty_like(slot).index_put_((slot,), (cols[by_row] * heads + hs).flatten())
    order = torch.empty_like(slot).index_put_((slot,), (by_row * heads + hs).flatten())
    return crow, col, order


TORCH_SORT_MIN_EDGES = 32768
"""From this many edges the CPU layout sorts with torch's stable sort (a radix sort for
integers: 36 ms for 1.1 million edges, NumPy's merge sort 114 ms); below it NumPy's,
whose call costs less on the few thousand edges of a batch of molecules."""


def _csr_numpy(rows: np.ndarray, cols: np.ndarray, n_rows: int,
               heads: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``csr_side``'s crow (R * H + 1,), col (E * H,) and order (E * H,), in NumPy.

    The edges are sorted by row once (E keys, not E * H); the slots are one (H, E)
    broadcast (see above). On one core: 193 us a side for a batch of 64 molecules
    (8,005 edges with self loops, 4 heads), 0.22 s for 1.1 million edges on a first
    call, against 333 us and 0.60 s for a repeat and a division over the (E * H,)
    slots (benchmarks/layers.py measures the layers built on it).
    """
    e = rows.shape[0]
    if e >= TORCH_SORT_MIN_EDGES:
        by_row = torch.sort(torch.from_numpy(rows), stable=True).indices.numpy()  # (E,)
    else:
        by_row = np.argsort(rows, kind="stable")  # (E,)
    by_row = by_row.astype(np.int64, copy=False)
    deg = np.bincount(rows, minlength=n_rows)  # (R,) edges per row
    start = np.zeros(n_rows + 1, dtype=np.int64)  # (R + 1,)
    np.cumsum(deg, out=start[1:])
    if heads == 1:
        return start, cols[by_row].astype(np.int64, copy=False), by_row
    hs = np.arange(heads, dtype=np.int64)[:, None]  # (H, 1)
    crow = np.empty(n_rows * heads + 1, dtype=np.int64)  # (R * H + 1,)
    crow[:-1] = np.add(start[:-1] * heads, hs * deg).T.ravel()
    crow[-1] = e * heads
    r = rows[by_row]  # (E,) row of each sorted edge
    # four (H, E) arrays in all, one of them reused: on a large graph's first call each
    # fresh one costs its page faults
    slot = np.multiply(hs, deg[r])  # (H, E)
    slot += start[r] * (heads - 1) + np.arange(e, dtype=np.int64)
    values = np.add(cols[by_row].astype(np.int64, copy=False) * heads, hs)  # (H, E)
    col = np.empty(e * heads, dtype=np.int64)  # (E * H,)
    col[slot] = values
    np.add(by_row * heads, hs, out=values)
    order = np.empty(e * heads, dtype=np.int64)  # (E * H,)
    order[slot] = values
    return crow, col, order


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
