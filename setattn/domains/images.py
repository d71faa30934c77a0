"""Images as patch sets: (C, H, W) tensor <-> PyG ``Data`` of P patches, and back.

An image is cut into a grid of Gh x Gw non-overlapping p x p patches (P = Gh * Gw),
numbered row-major: patch ``k`` sits at grid row ``k // Gw`` and column ``k % Gw``.
Each patch is a node with

- ``x`` (P, C * p * p): its pixels, flattened channel-major then row-major (the
  order of ``patch.reshape(-1)`` for a (C, p, p) patch);
- ``pos`` (P, 2) long: its (row, column) in the grid;
- optionally ``edge_index`` (2, E) long: the grid graph, an edge j -> i when patch
  j is patch i itself or one of its 4 (or 8) grid neighbours, sorted by target
  then source.

``patches_to_image`` inverts the cut (for overlays), and ``patch_values_to_image``
spreads one value per patch (e.g. an attention weight) over its pixels.

Example:
    >>> image = torch.rand(3, 32, 48)
    >>> data = image_to_patches(image, 8, grid_edges=4)
    >>> data.x.shape, data.pos.shape
    (torch.Size([24, 192]), torch.Size([24, 2]))
    >>> torch.equal(patches_to_image(data, (4, 6), 8), image)
    True
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch
from torch_geometric.data import Batch, Data

__all__ = [
    "grid_edge_index",
    "image_to_patches",
    "images_to_batch",
    "patch_values_to_image",
    "patches_to_image",
]

# (row, column) offsets of the neighbours a patch attends to, itself included;
# sorted so that, for a fixed target, sources come out in increasing order.
_NEIGHBOUR_OFFSETS = {
    4: ((-1, 0), (0, -1), (0, 0), (0, 1), (1, 0)),
    8: tuple((dr, dc) for dr in (-1, 0, 1) for dc in (-1, 0, 1)),
}


def _check_image(image: torch.Tensor, patch_size: int) -> tuple[int, int, int]:
    """Validate an image and a patch size; return (C, Gh, Gw)."""
    if not isinstance(image, torch.Tensor) or image.dim() != 3:
        shape = tuple(image.shape) if isinstance(image, torch.Tensor) else type(image).__name__
        raise ValueError(
            f"argument image must be a (C, H, W) tensor, got {shape}; "
            "add a channel axis with image.unsqueeze(0) for a grey-scale (H, W) image"
        )
    if not isinstance(patch_size, int) or patch_size < 1:
        raise ValueError(f"argument patch_size must be a positive int, got {patch_size!r}")
    channels, height, width = image.shape
    for side, length in (("height", height), ("width", width)):
        if length % patch_size:
            raise ValueError(
                f"argument image: {side} {length} is not divisible by "
                f"patch_size {patch_size}; crop or pad the image first"
            )
    return channels, height // patch_size, width // patch_size


def grid_edge_index(grid_shape: tuple[int, int], neighbours: Literal[4, 8] = 4, *,
                    device: torch.device | str | None = None) -> torch.Tensor:
    """The grid graph over a Gh x Gw grid of patches numbered row-major.

    Args:
        grid_shape: (Gh, Gw).
        neighbours: 4 (up, down, left, right) or 8 (also the diagonals); every
            patch also attends to itself.
        device: where the edges are built (the CPU by default).

    Returns:
        edge_index (2, E) long, row 0 = source j, row 1 = target i, sorted by
        target then source.
    """
    if neighbours not in _NEIGHBOUR_OFFSETS:
        raise ValueError(f"argument neighbours must be 4 or 8, got {neighbours!r}")
    rows, cols = grid_shape
    offsets = torch.tensor(_NEIGHBOUR_OFFSETS[neighbours], device=device)  # (K, 2)
    target_row = torch.arange(rows, device=device).repeat_interleave(cols)  # (P,)
    target_col = torch.arange(cols, device=device).repeat(rows)  # (P,)
    source_row = target_row.unsqueeze(1) + offsets[:, 0]  # (P, K)
    source_col = target_col.unsqueeze(1) + offsets[:, 1]  # (P, K)
    valid = (source_row >= 0) & (source_row < rows) & (source_col >= 0) & (source_col < cols)
    source = source_row * cols + source_col  # (P, K)
    target = torch.arange(rows * cols, device=device).unsqueeze(1).expand_as(source)  # (P, K)
    return torch.stack([source[valid], target[valid]])  # (2, E)


def image_to_patches(
    image: torch.Tensor,
    patch_size: int,
    *,
    grid_edges: Literal[4, 8] | None = None,
    y: int | None = None,
) -> Data:
    """Cut an image into a set of patches.

    Args:
        image: (C, H, W) tensor; H and W must be multiples of ``patch_size``.
        patch_size: p, the side of the square patches.
        grid_edges: None for a plain set, or 4 / 8 to add the grid graph
            (see ``grid_edge_index``).
        y: an optional class label, stored as ``y`` of shape (1,).

    Returns:
        ``Data`` with ``x`` (P, C * p * p), ``pos`` (P, 2) long (grid row,
        column), and optionally ``edge_index`` (2, E) and ``y`` (1,), all on
        ``image``'s device.

    Raises:
        ValueError: if ``image`` is not 3-D, or H or W is not divisible by
            ``patch_size`` (the message names the argument and the side).
    """
    channels, rows, cols = _check_image(image, patch_size)
    if grid_edges not in (None, 4, 8):
        raise ValueError(f"argument grid_edges must be None, 4 or 8, got {grid_edges!r}")
    p = patch_size
    patches = image.reshape(channels, rows, p, cols, p).permute(1, 3, 0, 2, 4)  # (Gh, Gw, C, p, p)
    x = patches.reshape(rows * cols, channels * p * p)  # (P, C*p*p)
    device = image.device
    pos = torch.stack([torch.arange(rows, device=device).repeat_interleave(cols),
                       torch.arange(cols, device=device).repeat(rows)], dim=1)  # (P, 2)
    data = Data(x=x, pos=pos)
    if grid_edges is not None:
        data.edge_index = grid_edge_index((rows, cols), grid_edges, device=device)
    if y is not None:
        data.y = torch.tensor([y], dtype=torch.long, device=device)
    return data


def patches_to_image(
    patches: Data | torch.Tensor, grid_shape: tuple[int, int], patch_size: int
) -> torch.Tensor:
    """Reassemble an image from its patches (the inverse of ``image_to_patches``).

    Args:
        patches: a ``Data`` from ``image_to_patches`` or its ``x``, (P, C * p * p)
            with P = Gh * Gw patches in row-major grid order.
        grid_shape: (Gh, Gw).
        patch_size: p.

    Returns:
        The image, (C, Gh * p, Gw * p).

    Raises:
        ValueError: if the sizes do not fit together (naming the argument).
    """
    x = patches.x if isinstance(patches, Data) else patches
    rows, cols = grid_shape
    p = patch_size
    if x.dim() != 2 or x.shape[0] != rows * cols:
        raise ValueError(
            f"argument patches: expected ({rows * cols}, C * {p} * {p}) for grid_shape "
            f"{tuple(grid_shape)}, got {tuple(x.shape)}"
        )
    if x.shape[1] % (p * p):
        raise ValueError(
            f"argument patch_size: {p} * {p} does not divide the patch length {x.shape[1]}"
        )
    channels = x.shape[1] // (p * p)
    grid = x.reshape(rows, cols, channels, p, p).permute(2, 0, 3, 1, 4)  # (C, Gh, p, Gw, p)
    return grid.reshape(channels, rows * p, cols * p)


def patch_values_to_image(
    values: torch.Tensor, grid_shape: tuple[int, int], patch_size: int
) -> torch.Tensor:
    """Spread one value per patch over the patch's pixels, e.g. to overlay attention.

    Args:
        values: (P,) or (P, K), e.g. attention weights per patch (and head).
        grid_shape: (Gh, Gw).
        patch_size: p.

    Returns:
        (Gh * p, Gw * p) for (P,) values, or (K, Gh * p, Gw * p) for (P, K).
    """
    flat = values.dim() == 1
    per_patch = values.unsqueeze(1) if flat else values  # (P, K)
    pixels = per_patch.repeat_interleave(patch_size * patch_size, dim=1)  # (P, K*p*p)
    image = patches_to_image(pixels, grid_shape, patch_size)  # (K, H, W)
    return image[0] if flat else image


def images_to_batch(
    images: torch.Tensor | Sequence[torch.Tensor],
    patch_size: int,
    *,
    labels: Sequence[int] | torch.Tensor | None = None,
    grid_edges: Literal[4, 8] | None = None,
) -> Batch:
    """Cut several images into patch sets and batch them.

    Args:
        images: (G, C, H, W) tensor or G tensors (C, H, W) (sizes may differ).
        patch_size: p.
        labels: optional G class labels, stored as ``y`` (G,).
        grid_edges: as in ``image_to_patches``.

    Returns:
        ``Batch`` with ``x`` (P_total, C*p*p), ``pos`` (P_total, 2), ``batch``,
        ``ptr`` and optionally ``edge_index`` and ``y`` (G,).
    """
    if labels is not None and len(labels) != len(images):
        raise ValueError(f"argument labels has {len(labels)} entries for {len(images)} images")
    data_list = [
        image_to_patches(
            image,
            patch_size,
            grid_edges=grid_edges,
            y=None if labels is None else int(labels[k]),
        )
        for k, image in enumerate(images)
    ]
    return Batch.from_data_list(data_list)
