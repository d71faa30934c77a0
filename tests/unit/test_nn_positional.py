"""Positional encodings: formulas, shapes, set positions, PyG graph encodings."""

from __future__ import annotations

import math

import torch
from torch_geometric.data import Data

from setattn.nn import (
    AddRandomWalkPE,
    LearnedPositionalEncoding,
    Sinusoidal2DEncoding,
    SinusoidalEncoding,
    TransformerBlock,
    grid_positions,
    set_positions,
)
from setattn.topology import edges, ptr_from_sizes


def test_sinusoidal_formula():
    pe = SinusoidalEncoding(6)(torch.tensor([0, 3]))
    assert pe.shape == (2, 6)
    for i in range(3):
        w = 10000 ** (-2 * i / 6)
        assert math.isclose(pe[1, 2 * i].item(), math.sin(3 * w), abs_tol=1e-6)
        assert math.isclose(pe[1, 2 * i + 1].item(), math.cos(3 * w), abs_tol=1e-6)
    assert torch.equal(pe[0, 1::2], torch.ones(3))
    assert SinusoidalEncoding(5)(torch.arange(4)).shape == (4, 5)  # odd widths work


def test_set_positions_restart_in_each_set():
    pos = set_positions(ptr_from_sizes([3, 0, 2]))
    assert pos.tolist() == [0, 1, 2, 0, 1]


def test_2d_encoding_halves_are_row_and_column():
    pos = grid_positions(3, 4)
    assert pos.shape == (12, 2) and pos[5].tolist() == [1, 1]
    pe = Sinusoidal2DEncoding(8)(pos)
    assert pe.shape == (12, 8)
    one_d = SinusoidalEncoding(4)
    assert torch.allclose(pe[:, :4], one_d(pos[:, 0]))
    assert torch.allclose(pe[:, 4:], one_d(pos[:, 1]))


def test_learned_encoding():
    enc = LearnedPositionalEncoding(10, 4)
    out = enc(torch.tensor([0, 9, 9]))
    assert out.shape == (3, 4) and torch.equal(out[1], out[2])
    out.sum().backward()
    assert enc.table.weight.grad is not None


def test_graph_encoding_through_pyg_transform():
    ei = torch.tensor([[0, 1, 1, 2, 2, 3], [1, 0, 2, 1, 3, 2]])
    data = AddRandomWalkPE(walk_length=4)(Data(x=torch.randn(4, 8), edge_index=ei, num_nodes=4))
    assert data.random_walk_pe.shape == (4, 4)
    proj = torch.nn.Linear(4, 8)
    x = data.x + proj(data.random_walk_pe)
    out = TransformerBlock(8, heads=2)(x, edges(data.edge_index, 4))
    assert out.shape == (4, 8) and torch.isfinite(out).all()
