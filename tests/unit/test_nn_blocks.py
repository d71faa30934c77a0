"""TransformerBlock, MAB, SAB, ISAB: equivariance, batching, masks and empty sets."""

from __future__ import annotations

import pytest
import torch

from setattn.nn import ISAB, SAB, TransformerBlock
from setattn.topology import complete, edges, ptr_from_sizes, window

TOL = 1e-5
SIZES = [3, 5, 7]


def within_set_perm(sizes: list[int]) -> torch.Tensor:
    ptr = ptr_from_sizes(sizes)
    return torch.cat([ptr[g] + torch.randperm(s) for g, s in enumerate(sizes)])


def batch_of(sizes: list[int]) -> torch.Tensor:
    return torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes))


@pytest.mark.parametrize("block", [SAB(8, 2), ISAB(8, 2, num_inducing=4)], ids=["sab", "isab"])
def test_set_blocks_equivariant_and_batched(block):
    block.eval()
    x = torch.randn(sum(SIZES), 8)
    out = block(x, batch_of(SIZES))
    assert out.shape == x.shape
    perm = within_set_perm(SIZES)
    assert (block(x[perm], batch_of(SIZES)) - out[perm]).abs().max() <= TOL
    ptr = ptr_from_sizes(SIZES)
    assert torch.equal(block(x, ptr=ptr), out)
    for g in range(len(SIZES)):
        single = block(x[ptr[g]:ptr[g + 1]])
        assert (single - out[ptr[g]:ptr[g + 1]]).abs().max() <= TOL


@pytest.mark.parametrize("block", [SAB(4, 2), ISAB(4, 2, num_inducing=3)], ids=["sab", "isab"])
def test_set_blocks_with_empty_sets(block):
    sizes = [0, 4, 0, 1]
    x = torch.randn(5, 4, requires_grad=True)
    out = block(x, ptr=ptr_from_sizes(sizes))
    assert torch.isfinite(out).all()
    out.sum().backward()
    assert torch.isfinite(x.grad).all()
    assert block(torch.randn(0, 4)).shape == (0, 4)


def test_transformer_block_same_on_dense_and_sparse_topologies():
    block = TransformerBlock(8, heads=2).eval()
    x = torch.randn(15, 8)
    top = complete(ptr_from_sizes(SIZES))
    dense = block(x, top)
    assert (block(x, edges(top.edge_index(), 15)) - dense).abs().max() <= TOL
    perm = within_set_perm(SIZES)
    assert (block(x[perm], top) - dense[perm]).abs().max() <= TOL
    win = window(ptr_from_sizes(SIZES), 2)
    assert (block(x, win) - block(x, edges(win.edge_index(), 15))).abs().max() <= TOL


def test_transformer_block_on_graph_neighbourhoods_equivariant():
    block = TransformerBlock(6, heads=3, ff_dim=10).eval()
    n = 9
    x = torch.randn(n, 6)
    ei = torch.randint(0, n, (2, 20))
    out = block(x, edges(ei, n))
    perm = torch.randperm(n)
    inv = torch.empty_like(perm)
    inv[perm] = torch.arange(n)
    assert (block(x[perm], edges(inv[ei], n)) - out[perm]).abs().max() <= TOL


def test_transformer_block_masks_give_no_nan():
    block = TransformerBlock(4, heads=2)
    x = torch.randn(5, 4, requires_grad=True)
    top = complete([0, 5])
    mask = torch.zeros(top.num_edges, 2, dtype=torch.bool)  # every edge masked
    out = block(x, top, mask=mask)
    assert torch.isfinite(out).all()
    out.sum().backward()
    assert torch.isfinite(x.grad).all()
