"""Images stored one a row in a CSV file (pixels, then the label): ``load_image_csv``."""

from __future__ import annotations

import io
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch

from setattn.datasets.files import PathLike, existing_file, open_text

__all__ = ["ImageSet", "load_image_csv"]


class ImageSet(NamedTuple):
    """Images with class labels.

    Attributes:
        images: (N, C, H, W) float32 pixel values, divided by the loader's ``scale``.
        labels: (N,) long class labels.
    """

    images: torch.Tensor
    labels: torch.Tensor


def load_image_csv(
    path: PathLike,
    height: int,
    width: int,
    *,
    channels: int = 1,
    scale: float = 1.0,
) -> ImageSet:
    """Read images stored one a row: C * H * W pixel values, then the label.

    Pixels are in channel-major, then row-major order (the order of
    ``image.reshape(-1)`` for a (C, H, W) image). No header line.

    Args:
        path: the CSV file (``.csv`` or ``.csv.gz``).
        height: H, pixel rows per image.
        width: W, pixel columns per image.
        channels: C, channels per image.
        scale: pixel values are divided by it (e.g. 255 for 8-bit images).

    Returns:
        An ``ImageSet``: images (N, C, H, W) float32, labels (N,) long.

    Raises:
        FileNotFoundError: if ``path`` does not exist.
        ValueError: if a row has the wrong number of values or a value is not a
            number (naming the line).
    """
    path = existing_file(path)
    expected = channels * height * width + 1
    with open_text(path) as handle:
        text = handle.read()
    try:
        table = np.loadtxt(io.StringIO(text), delimiter=",", dtype=np.float32, ndmin=2)
    except ValueError:
        table = None  # find and name the bad line below
    if table is None or (table.size and table.shape[1] != expected):
        raise ValueError(_first_bad_image_line(text, expected, path))
    pixels = torch.from_numpy(table[:, :-1] / np.float32(scale))
    images = pixels.reshape(-1, channels, height, width)  # (N, C, H, W)
    return ImageSet(images, torch.from_numpy(table[:, -1].astype(np.int64)))


def _first_bad_image_line(text: str, expected: int, path: Path) -> str:
    """Describe the first line of an image CSV that does not parse (slow path)."""
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        cells = line.split(",")
        if len(cells) != expected:
            return (
                f"{path.name}: line {number} has {len(cells)} values, expected {expected} "
                "(channels * height * width pixels, then the label)"
            )
        for column, cell in enumerate(cells):
            try:
                float(cell)
            except ValueError:
                return f"{path.name}: line {number}, column {column}: {cell!r} is not a number"
    return f"{path.name}: could not be parsed as comma-separated numbers"
