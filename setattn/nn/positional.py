"""Positional encodings: where an item sits in its sequence, grid or graph.

Sequences and patch grids get fixed sinusoids or a learned table here. Graph
positions come from PyG's transforms, re-exported unchanged:
``AddLaplacianEigenvectorPE`` (Dwivedi et al. 2020, ``data.laplacian_eigenvector_pe``)
and ``AddRandomWalkPE`` (Dwivedi et al. 2022, ``data.random_walk_pe``); project the
attribute with an ``nn.Linear`` and add it to ``x``.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn
from torch_geometric.transforms import AddLaplacianEigenvectorPE, AddRandomWalkPE

__all__ = [
    "AddLaplacianEigenvectorPE",
    "AddRandomWalkPE",
    "LearnedPositionalEncoding",
    "SinusoidalEncoding",
    "Sinusoidal2DEncoding",
    "grid_positions",
    "set_positions",
]


def set_positions(ptr: Tensor) -> Tensor:
    """(G + 1,) set offsets -> (N,) position of every item inside its own set (0, 1, ...)."""
    sizes = ptr[1:] - ptr[:-1]  # (G,)
    start = torch.repeat_interleave(ptr[:-1], sizes)  # (N,)
    return torch.arange(int(ptr[-1]), device=ptr.device) - start


def grid_positions(height: int, width: int, device: torch.device | str | None = None) -> Tensor:
    """(height * width, 2) (row, column) of every patch, row-major, on ``device`` (the CPU
    by default)."""
    rows, cols = torch.meshgrid(torch.arange(height, device=device),
                                torch.arange(width, device=device), indexing="ij")
    return torch.stack([rows.flatten(), cols.flatten()], dim=1)


def _sinusoid(pos: Tensor, dim: int, base: float) -> Tensor:
    """(N,) positions -> (N, dim): sin on even, cos on odd features."""
    freq = base ** (-torch.arange(0, dim, 2, device=pos.device, dtype=torch.float32) / dim)
    angle = pos.to(torch.float32)[:, None] * freq  # (N, ceil(dim / 2))
    out = torch.zeros(pos.shape[0], dim, device=pos.device)
    out[:, 0::2] = torch.sin(angle)
    out[:, 1::2] = torch.cos(angle[:, : dim // 2])
    return out


class SinusoidalEncoding(nn.Module):
    """Fixed 1-D sinusoids (Vaswani et al. 2017): PE(p, 2i) = sin(p / base^(2i/D)),
    PE(p, 2i+1) = cos(p / base^(2i/D)).

    Args:
        dim: D.
        base: the wavelength base (10000 in the paper).
    """

    def __init__(self, dim: int, base: float = 10000.0):
        super().__init__()
        self.dim, self.base = dim, base

    def forward(self, pos: Tensor) -> Tensor:
        """(N,) integer or real positions (e.g. ``set_positions(ptr)``) -> (N, D)."""
        return _sinusoid(pos, self.dim, self.base)


class Sinusoidal2DEncoding(nn.Module):
    """Fixed 2-D sinusoids for patch grids (as in ViT / MAE, He et al. 2022): half of
    the features encode the row, half the column.

    Args:
        dim: D, divisible by 4.
        base: the wavelength base.
    """

    def __init__(self, dim: int, base: float = 10000.0):
        super().__init__()
        if dim % 4:
            raise ValueError(f"dim={dim} must be divisible by 4")
        self.dim, self.base = dim, base

    def forward(self, pos: Tensor) -> Tensor:
        """(N, 2) (row, column) positions (e.g. ``grid_positions(h, w)``) -> (N, D)."""
        half = self.dim // 2
        return torch.cat([_sinusoid(pos[:, 0], half, self.base),
                          _sinusoid(pos[:, 1], half, self.base)], dim=1)


class LearnedPositionalEncoding(nn.Module):
    """A learned table of position vectors (Gehring et al. 2017; BERT, Devlin et al. 2019).

    Args:
        max_len: number of positions P.
        dim: D.
    """

    def __init__(self, max_len: int, dim: int):
        super().__init__()
        self.table = nn.Embedding(max_len, dim)  # (P, D)
        nn.init.normal_(self.table.weight, std=1.0 / math.sqrt(dim))

    def forward(self, pos: Tensor) -> Tensor:
        """(N,) integer positions in [0, P) -> (N, D)."""
        return self.table(pos)
