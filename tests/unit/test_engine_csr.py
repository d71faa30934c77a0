"""csr_side: the CSR layout of an edge list, NumPy (CPU) and torch (other devices) alike.

* each layout, filled with per-edge, per-head values in slot order, is the per-head
  block-diagonal matrix those values make (duplicate edges summed), checked against a
  dense matrix built by index_put on distinct sizes, heads and edge orders;
* the NumPy and torch computations give identical tensors, and ``csr_side`` returns
  int32 CSR indices (int64 where an index would not fit) on the edges' device.
"""

import pytest
import torch

from setattn.engine.csr import (
    _csr_numpy,
    _csr_torch,
    csr_side,
    csr_tensor,
    index_dtype,
    slot_values,
)


def _edges(n_rows: int, n_cols: int, e: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    rows = torch.randint(0, n_rows, (e,), generator=g)  # (E,) with repeats and gaps
    cols = torch.randint(0, n_cols, (e,), generator=g)  # (E,)
    return rows, cols


def _dense(rows, cols, values, n_rows, n_cols, heads):
    """(H * R, H * C) float64: head h of edge e at (h * R + rows[e], h * C + cols[e])."""
    hs = torch.arange(heads)
    r = (rows[:, None] + hs * n_rows).flatten()  # (E * H,)
    c = (cols[:, None] + hs * n_cols).flatten()  # (E * H,)
    out = torch.zeros(n_rows * heads, n_cols * heads, dtype=torch.float64)
    return out.index_put_((r, c), values.flatten(), accumulate=True)


@pytest.mark.parametrize("n_rows,n_cols,e,heads", [(7, 5, 23, 1), (13, 13, 61, 4),
                                                   (3, 11, 0, 2), (40, 9, 200, 3)])
def test_layout_is_the_block_diagonal_matrix(n_rows, n_cols, e, heads):
    rows, cols = _edges(n_rows, n_cols, e, seed=n_rows + e)
    values = torch.randn(e, heads, dtype=torch.float64)  # (E, H)
    side = csr_side(rows, cols, n_rows, n_cols, heads)
    assert side.shape == (n_rows * heads, n_cols * heads)
    assert side.crow.shape == (n_rows * heads + 1,) and side.col.shape == (e * heads,)
    got = csr_tensor(side, slot_values(side, values)).to_dense()
    torch.testing.assert_close(got, _dense(rows, cols, values, n_rows, n_cols, heads),
                               rtol=0, atol=1e-12)
    # within a row the slots keep the edges' order (the layout is deterministic)
    for row in range(n_rows):
        slots = side.by_row[side.crow[row]:side.crow[row + 1]]
        assert torch.all(slots[1:] > slots[:-1])


@pytest.mark.parametrize("n_rows,e,heads", [(1, 1, 1), (9, 31, 4), (50, 300, 2), (6, 0, 3),
                                         (500, 40_000, 3), (7, 33_000, 1)])  # torch sort
def test_numpy_and_torch_agree(n_rows, e, heads):
    rows, cols = _edges(n_rows, n_rows + 2, e, seed=3 * e + heads)
    by_numpy = _csr_numpy(rows.numpy(), cols.numpy(), n_rows, n_rows + 2, heads)
    by_torch = _csr_torch(rows, cols, n_rows, n_rows + 2, heads)
    for a, b in zip(by_numpy, by_torch):
        assert torch.equal(torch.from_numpy(a), b)
    side = csr_side(rows, cols, n_rows, n_rows + 2, heads)
    assert side.crow.dtype == side.col.dtype == torch.int32
    assert side.by_row.dtype == torch.int64
    assert side.col.device == rows.device


def test_indices_beyond_int32_are_int64():
    assert index_dtype(4, 1000, 1000, 10**6) == torch.int32
    assert index_dtype(4, 10, 10, 2**29) == torch.int64  # 4 * E slots
    assert index_dtype(2, 2**30, 5, 7) == torch.int64  # 2 * R rows
