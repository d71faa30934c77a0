"""Images with one signed value per patch laid over them, and a colour bar.

- ``patch_contribution_map(values, grid_shape, patch_size, centre, limit)``: the RGB picture
  of one value per patch in diverging colours (``centre`` white, red above, blue below).
- ``plot_patch_contributions(images, values, grid_shape, patch_size, path)``: several
  images, each with its patch values drawn over it in those colours, the image's strokes
  as contour lines, one shared colour bar in the values' units and a title per image.

Meant for per-patch contributions to a prediction (``setattn.explain``): integrated
gradients (centre 0, units of the explained output) or attention relative to uniform
(weight x number of patches, centre 1).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from setattn.domains.images import patch_values_to_image
from setattn.viz.colours import contribution_colours, contribution_limit
from setattn.viz.plots import ArrayLike, _numpy, _pyplot, _save

__all__ = ["patch_contribution_map", "plot_patch_contributions"]

CMAP = "RdBu_r"  # diverging: blue below the centre, white at it, red above


def patch_contribution_map(values: ArrayLike, grid_shape: tuple[int, int], patch_size: int,
                           centre: float = 0.0, limit: float | None = None) -> np.ndarray:
    """One value per patch as an RGB picture in diverging colours centred at ``centre``.

    Args:
        values: (P,) one value per patch, row-major (as ``image_to_patches`` numbers them).
        grid_shape: (Gh, Gw) with Gh * Gw = P.
        patch_size: p.
        centre: the neutral value, drawn white (0, or 1 for attention relative to uniform).
        limit: the distance from ``centre`` drawn at full colour (default: the largest).

    Returns:
        (Gh * p, Gw * p, 3) RGB in [0, 1]: red above ``centre``, blue below (NaN: grey).
    """
    v = _numpy(values)
    if v.shape != (grid_shape[0] * grid_shape[1],):
        raise ValueError(f"values must be (P={grid_shape[0] * grid_shape[1]},) for a "
                         f"{grid_shape[0]} x {grid_shape[1]} grid, got {v.shape}")
    rgb = np.array(contribution_colours(v, centre, limit, CMAP))  # (P, 3), NaN grey
    pixels = patch_values_to_image(torch.from_numpy(rgb), grid_shape, patch_size)  # (3, H, W)
    return pixels.permute(1, 2, 0).numpy()  # (H, W, 3)


def plot_patch_contributions(
    images: ArrayLike,
    values: ArrayLike,
    grid_shape: tuple[int, int],
    patch_size: int,
    path: str | Path,
    *,
    titles: Sequence[str] | None = None,
    unit: str = "contribution",
    centre: float = 0.0,
    suptitle: str = "",
    columns: int = 6,
) -> Path:
    """Images with their per-patch values in diverging colours and one shared colour bar.

    Every panel is one image: its patches coloured by value (white at ``centre``, red
    above, blue below, full colour at the largest distance from ``centre`` over all
    panels, so that panels compare), its strokes drawn over them as black contour lines
    and faint lines between patches.

    Args:
        images: (K, H, W) grey-scale images, H = Gh * p and W = Gw * p.
        values: (K, P) one value per patch, row-major, P = Gh * Gw.
        grid_shape: (Gh, Gw).
        patch_size: p.
        path: the picture (``.png``, ``.svg``, ...).
        titles: K captions (e.g. label and prediction).
        unit: the colour bar's caption, in the values' units.
        centre: the neutral value.
        suptitle: the figure's title (e.g. the method).
        columns: images per row.

    Returns:
        ``path`` as a ``Path``.
    """
    imgs, v = _numpy(images), _numpy(values)
    k, (rows, cols) = imgs.shape[0], grid_shape
    if imgs.ndim != 3 or imgs.shape[1:] != (rows * patch_size, cols * patch_size):
        raise ValueError(f"images must be (K, {rows * patch_size}, {cols * patch_size}), "
                         f"got {imgs.shape}")
    if v.shape != (k, rows * cols):
        raise ValueError(f"values must be (K={k}, P={rows * cols}), got {v.shape}")
    limit = contribution_limit(v, centre)
    plt = _pyplot()
    columns = min(columns, k)
    n_rows = -(-k // columns)
    fig, axes = plt.subplots(n_rows, columns, figsize=(1.9 * columns + 1.0, 2.05 * n_rows + 0.4),
                             squeeze=False)
    for ax in axes.flat:
        ax.axis("off")
    for i, title in enumerate(titles if titles is not None else [""] * k):
        ax = axes.flat[i]
        _draw_panel(ax, imgs[i], patch_contribution_map(v[i], grid_shape, patch_size, centre,
                                                        limit), grid_shape, patch_size)
        ax.set_title(title, fontsize=8)
    _colour_bar(fig, axes, centre, limit, unit)
    if suptitle:
        fig.suptitle(suptitle, fontsize=9)
    return _save(fig, path)


def _draw_panel(ax, image: np.ndarray, rgb: np.ndarray, grid_shape: tuple[int, int],
                patch_size: int) -> None:
    """The coloured patches, the image's strokes as contours and the patch borders."""
    ax.imshow(rgb, interpolation="nearest")
    low, top = float(image.min()), float(image.max())
    if top > low:  # a flat image has no strokes
        ax.contour(image, levels=[low + 0.4 * (top - low)], colors="black", linewidths=0.8)
    for r in range(1, grid_shape[0]):
        ax.axhline(r * patch_size - 0.5, color="grey", linewidth=0.3, alpha=0.5)
    for c in range(1, grid_shape[1]):
        ax.axvline(c * patch_size - 0.5, color="grey", linewidth=0.3, alpha=0.5)


def _colour_bar(fig, axes: np.ndarray, centre: float, limit: float, unit: str) -> None:
    """One colour bar for all panels, from ``centre - limit`` to ``centre + limit``."""
    from matplotlib import cm, colors

    scale = cm.ScalarMappable(colors.Normalize(centre - limit, centre + limit), CMAP)
    bar = fig.colorbar(scale, ax=list(axes.flat), fraction=0.025, pad=0.02)
    bar.set_label(unit, fontsize=8)
    bar.ax.tick_params(labelsize=7)
