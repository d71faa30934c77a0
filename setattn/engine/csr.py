"""CSR layouts of an edge list and the sparse-dense products the SPARSE_CSR path runs on.

Per head, the weights of an edge list form a sparse (Nq, Nk) matrix; the H heads are
laid out block-diagonally, head by head, as one (H * Nq, H * Nk) CSR matrix, so that one
call of torch's CSR kernels serves every head. Two autograd nodes are built on them:

* :class:`EdgeSum`: out_i = sum_{j -> i} w_ij v_j, a CSR x dense product;
* :class:`EdgeDot`: s_e = <q_dst(e), k_src(e)>, a sampled dense x dense product.

Their backward passes are made of the same two nodes, so only the (E, H) weights and
the node rows are kept, never (E, H, D) messages, and double backward is right too.
Node rows enter head-major ((H, N, D), one transposing copy) and the outputs are
head-major tensors seen as (N, H, D), so that a head's product reads one contiguous
block of rows.
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

    Row ``h * R + r`` holds head h of row node r; its column ``h * C + c`` is head h of
    column node c. Head h's block is the one-head layout shifted, so the slots of every
    head hold the edges in the order ``by_row``: values are ``slot_values(side, w)``.
    ``crow`` and ``col`` are int32 where every index fits (MKL's own index type on the
    CPU: int64 ones are converted on every product), else int64.
    """

    crow: Tensor  # (H * R + 1,)
    col: Tensor  # (H * E,)
    by_row: Tensor  # (E,) int64: the edges sorted by row, ties in edge order
    shape: tuple[int, int]  # (H * R, H * C)


INT32_LIMIT = 2**31 - 1


def index_dtype(heads: int, n_rows: int, n_cols: int, e: int) -> torch.dtype:
    """int32 where every CSR index of the layout fits in it, else int64."""
    return torch.int32 if heads * max(n_rows, n_cols, e) < INT32_LIMIT else torch.int64


def slot_values(side: CSRSide, w: Tensor) -> Tensor:
    """Per-edge, per-head values (E, H) in ``side``'s slot order (H * E,): each head's
    column gathered in row order (one transposing copy, then H gathers of E)."""
    if w.shape[-1] == 1:
        return w.reshape(-1).index_select(0, side.by_row)  # (E,)
    return w.t().contiguous().index_select(1, side.by_row).reshape(-1)  # (H * E,)


def csr_side(rows: Tensor, cols: Tensor, n_rows: int, n_cols: int, heads: int) -> CSRSide:
    """The layout whose row r holds the edges with ``rows == r``.

    Head h's block is the one-head layout (edges sorted by row, ties kept in edge order)
    shifted by h * R rows and h * C columns, so every slot is one (H, E) broadcast of the
    sorted edges: no sort or scatter of (H * E,) keys. On the CPU it is computed with
    NumPy, whose calls cost a fraction of torch's on the few thousand edges of a batch of
    molecules (this runs once per layer and batch); both give the same tensors.

    Args:
        rows, cols: (E,) row and column node of every edge.
        n_rows, n_cols: node counts R and C; heads: H.
    """
    shape = (n_rows * heads, n_cols * heads)
    if rows.device.type == "cpu":
        crow, col, by_row = _csr_numpy(rows.numpy(), cols.numpy(), n_rows, n_cols, heads)
        return CSRSide(torch.from_numpy(crow), torch.from_numpy(col),
                       torch.from_numpy(by_row), shape)
    return CSRSide(*_csr_torch(rows, cols, n_rows, n_cols, heads), shape)


def _csr_torch(rows: Tensor, cols: Tensor, n_rows: int, n_cols: int,
               heads: int) -> tuple[Tensor, Tensor, Tensor]:
    """``csr_side``'s crow (H * R + 1,), col (H * E,) and by_row (E,), in torch (any
    device)."""
    e = rows.numel()
    dtype = index_dtype(heads, n_rows, n_cols, e)
    by_row = torch.sort(rows, stable=True).indices  # (E,)
    deg = torch.bincount(rows, minlength=n_rows)  # (R,) edges per row
    start = torch.cumsum(deg, 0)  # (R,) end of each row's edges
    hs = torch.arange(heads, device=rows.device)[:, None]  # (H, 1)
    crow = torch.cat([start.new_zeros(1), (start + hs * e).flatten()])  # (H * R + 1,)
    col = (cols[by_row] + hs * n_cols).flatten()  # (H * E,)
    return crow.to(dtype), col.to(dtype), by_row


TORCH_SORT_MIN_EDGES = 32768
"""From this many edges the CPU layout sorts with torch's stable sort (a radix sort for
integers: 36 ms for 1.1 million edges, NumPy's merge sort 114 ms); below it NumPy's,
whose call costs less on the few thousand edges of a batch of molecules."""


def _csr_numpy(rows: np.ndarray, cols: np.ndarray, n_rows: int, n_cols: int,
               heads: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``csr_side``'s crow (H * R + 1,), col (H * E,) and by_row (E,), in NumPy.

    The edges are sorted by row once (E keys, not H * E); every other array is one (H, E)
    or (H, R) broadcast written in order, with no scatter into fresh memory.
    """
    e = rows.shape[0]
    dtype = np.int32 if index_dtype(heads, n_rows, n_cols, e) == torch.int32 else np.int64
    if e >= TORCH_SORT_MIN_EDGES:
        by_row = torch.sort(torch.from_numpy(rows), stable=True).indices.numpy()  # (E,)
    else:
        by_row = np.argsort(rows, kind="stable")  # (E,)
    by_row = by_row.astype(np.int64, copy=False)
    deg = np.bincount(rows, minlength=n_rows)  # (R,) edges per row
    crow = np.zeros(n_rows * heads + 1, dtype=dtype)  # (H * R + 1,)
    end = crow[1:].reshape(heads, n_rows)  # (H, R) view: the end of each block row
    np.cumsum(deg, out=end[0])
    hs = np.arange(heads, dtype=dtype)[:, None]  # (H, 1)
    np.add(end[0], hs[1:] * e, out=end[1:])
    sorted_cols = cols[by_row].astype(dtype, copy=False)  # (E,)
    if heads == 1:
        return crow, sorted_cols, by_row
    col = np.add(sorted_cols, hs * n_cols).ravel()  # (H * E,)
    return crow, col, by_row


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


def _head_major(x: Tensor) -> Tensor:
    """(N, H, D) node rows as the (H * N, D) rows of the layouts' columns: a copy, or a
    view where ``x`` is stored head-major already (the products' outputs are)."""
    return x.transpose(0, 1).reshape(-1, x.shape[-1])  # (H * N, D)


def _spmm(side: CSRSide, w: Tensor, x: Tensor) -> Tensor:
    """Per-edge weights (E, H) times node rows (C, H, D) -> (R, H, D), stored head-major."""
    return spmm(side, slot_values(side, w), x)


def spmm(side: CSRSide, values: Tensor, x: Tensor) -> Tensor:
    """The CSR matrix of ``side``'s pattern holding ``values`` (H * E,), in slot order,
    times node rows (C, H, D) -> (R, H, D), stored head-major."""
    a = csr_tensor(side, values)
    heads, width = x.shape[1], x.shape[-1]
    # into a fresh row-major result: ``a @ x`` zero-fills a column-major one and copies it
    # back, two passes over cold memory that cost more than the product itself
    out = x.new_empty(side.shape[0], width)  # (H * R, D)
    out.addmm_(a, _head_major(x), beta=0.0)  # beta 0: out's contents unread
    return out.view(heads, side.shape[0] // heads, width).transpose(0, 1)  # (R, H, D)


def _sddmm(side: CSRSide, a: Tensor, b: Tensor) -> Tensor:
    """<a_row, b_col> on every edge and head: a (R, H, D), b (C, H, D) -> (E, H)."""
    vals = sddmm(side, a, b)  # (H, E) in row order
    out = vals.new_empty(vals.shape).index_copy_(1, side.by_row, vals)  # (H, E)
    return out.t()  # (E, H)


def sddmm(side: CSRSide, a: Tensor, b: Tensor) -> Tensor:
    """<a_row, b_col> on every edge and head, head by head in ``side``'s slot order:
    a (R, H, D), b (C, H, D) -> (H, E)."""
    heads = a.shape[1]
    # zeros, not empty memory: torch's CPU kernel scales the pattern's values even with
    # beta 0, so a NaN there would stay; the product is written into them in place
    pattern = csr_tensor(side, a.new_zeros(side.col.numel()))
    torch.sparse.sampled_addmm(pattern, _head_major(a), _head_major(b).t(), beta=0.0,
                               out=pattern)
    return pattern.values().view(heads, -1)  # (H, E)


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
        # stored head-major once, for the two products below to read as it is
        grad_out = grad_out.transpose(0, 1).contiguous().transpose(0, 1)  # (Nq, H, Dv)
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
