"""Images -> patch sets and back: exact round trips, positions, grid graph, errors."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch_geometric.data import Data

from setattn.datasets import load_digits
from setattn.domains.images import (
    grid_edge_index,
    image_to_patches,
    images_to_batch,
    patch_values_to_image,
    patches_to_image,
)


def test_round_trip_distinct_sizes():
    image = torch.randn(3, 10, 35, generator=torch.Generator().manual_seed(0))  # C, H, W
    data = image_to_patches(image, 5)
    assert data.x.shape == (2 * 7, 3 * 5 * 5)
    assert torch.equal(patches_to_image(data, (2, 7), 5), image)
    assert torch.equal(patches_to_image(data.x, (2, 7), 5), image)


def test_patch_contents_and_positions():
    image = torch.arange(2 * 6 * 9, dtype=torch.float32).reshape(2, 6, 9)
    data = image_to_patches(image, 3)
    assert data.pos.tolist() == [[r, c] for r in range(2) for c in range(3)]
    for k, (r, c) in enumerate(data.pos.tolist()):
        crop = image[:, 3 * r : 3 * r + 3, 3 * c : 3 * c + 3]  # (C, p, p)
        assert torch.equal(data.x[k], crop.reshape(-1)), k
    assert data.x[0, :3].tolist() == [0.0, 1.0, 2.0]  # channel 0, first pixel row
    assert data.x[0, 9].item() == 54.0  # channel 1 starts after 3 * 3 pixels


def test_digits_round_trip():
    digits = load_digits()
    images = digits.images[:5]  # (5, 1, 8, 8)
    for image in images:
        data = image_to_patches(image, 4)
        assert data.x.shape == (4, 16)
        assert torch.equal(patches_to_image(data, (2, 2), 4), image)
    batch = images_to_batch(images, 2, labels=digits.labels[:5], grid_edges=4)
    assert batch.num_graphs == 5 and batch.x.shape == (5 * 16, 4)
    assert batch.y.tolist() == digits.labels[:5].tolist()


def test_grid_edges_4_and_8():
    edge_index = grid_edge_index((2, 3), 4)
    # target 0 (row 0, col 0) sees itself, its right and lower neighbours
    assert edge_index[0, edge_index[1] == 0].tolist() == [0, 1, 3]
    assert edge_index[0, edge_index[1] == 4].tolist() == [1, 3, 4, 5]
    assert edge_index.shape == (2, 6 + 2 * (2 * 2 * 3 - 2 - 3))  # self + both directions
    assert torch.all(edge_index[1][1:] >= edge_index[1][:-1])  # sorted by target
    eight = grid_edge_index((3, 3), 8)
    assert eight.shape == (2, 4 * 4 + 4 * 6 + 9)  # corners 4, edges 6, centre 9
    assert eight[0, eight[1] == 4].tolist() == list(range(9))
    data = image_to_patches(torch.zeros(1, 4, 6), 2, grid_edges=8)
    assert torch.equal(data.edge_index, grid_edge_index((2, 3), 8))
    with pytest.raises(ValueError, match="neighbours"):
        grid_edge_index((2, 2), 6)


def test_patch_values_to_image_for_overlays():
    values = torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    overlay = patch_values_to_image(values, (2, 3), 2)
    assert overlay.shape == (4, 6)
    assert overlay[:2, :2].eq(1).all() and overlay[2:, 4:].eq(6).all()
    per_head = patch_values_to_image(torch.stack([values, -values], 1), (2, 3), 2)  # (P, 2)
    assert per_head.shape == (2, 4, 6)
    assert torch.equal(per_head[1], -overlay)


def test_errors_name_the_argument():
    with pytest.raises(ValueError, match=r"argument image: height 30 is not divisible by patch_"):
        image_to_patches(torch.zeros(1, 30, 32), 8)
    with pytest.raises(ValueError, match=r"width 30 is not divisible by patch_size 4"):
        image_to_patches(torch.zeros(1, 32, 30), 4)
    with pytest.raises(ValueError, match=r"\(C, H, W\).*unsqueeze"):
        image_to_patches(torch.zeros(28, 28), 4)
    with pytest.raises(ValueError, match="patch_size"):
        image_to_patches(torch.zeros(1, 4, 4), 0)
    with pytest.raises(ValueError, match="argument patches"):
        patches_to_image(torch.zeros(5, 16), (2, 2), 4)
    with pytest.raises(ValueError, match="argument patch_size"):
        patches_to_image(Data(x=torch.zeros(4, 10)), (2, 2), 3)
    with pytest.raises(ValueError, match="argument grid_edges"):
        image_to_patches(torch.zeros(1, 4, 4), 2, grid_edges=6)


def test_docstring_examples():
    import doctest

    from setattn.domains import images

    result = doctest.testmod(images, verbose=False)
    assert result.attempted > 0 and result.failed == 0


@settings(max_examples=40, deadline=None)
@given(
    channels=st.integers(1, 3),
    rows=st.integers(1, 4),
    cols=st.integers(1, 5),
    patch=st.integers(1, 4),
    neighbours=st.sampled_from([4, 8]),
)
def test_round_trip_and_edge_counts_any_size(channels, rows, cols, patch, neighbours):
    image = torch.randn(channels, rows * patch, cols * patch)
    data = image_to_patches(image, patch, grid_edges=neighbours)
    assert torch.equal(patches_to_image(data, (rows, cols), patch), image)
    # every patch attends to itself and to each neighbour it has on the grid
    pairs = 2 * (rows * (cols - 1) + (rows - 1) * cols)  # horizontal + vertical, both ways
    if neighbours == 8:
        pairs += 4 * (rows - 1) * (cols - 1)  # two diagonals per 2x2 block, both ways
    assert data.edge_index.shape == (2, rows * cols + pairs)
    assert (data.edge_index < rows * cols).all()
