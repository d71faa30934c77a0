"""Diverging colours of signed contributions, shared by the molecule and word pictures."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["contribution_colours", "contribution_limit"]


def contribution_limit(values: np.ndarray | Sequence[float], centre: float = 0.0) -> float:
    """The largest distance of ``values`` from ``centre`` (NaN ignored; 1 when all are at
    the centre): the distance drawn at full colour on a shared, symmetric scale."""
    v = np.asarray(values, dtype=np.float64) - centre
    return float(np.nanmax(np.abs(v), initial=0.0)) or 1.0


def contribution_colours(values: np.ndarray | Sequence[float], centre: float = 0.0,
                         limit: float | None = None, cmap: str = "RdBu_r"
                         ) -> list[tuple[float, float, float]]:
    """Diverging colours of contributions: ``centre`` white, above it red, below it blue.

    Args:
        values: (N,) contributions (NaN: grey, "could not be computed").
        centre: the neutral value (0, or 1 for attention relative to uniform).
        limit: the distance from ``centre`` drawn at full colour (default: the largest).
        cmap: a diverging matplotlib colour map.

    Returns:
        N RGB triples in [0, 1].
    """
    from matplotlib import colormaps

    v = np.asarray(values, dtype=np.float64) - centre  # (N,)
    if limit is None:
        limit = float(np.nanmax(np.abs(v), initial=0.0))
    limit = limit if limit > 0 else 1.0
    position = 0.5 + 0.5 * np.clip(v / limit, -1.0, 1.0)  # (N,) in [0, 1], centre at 0.5
    colours = colormaps[cmap](np.nan_to_num(position, nan=0.5))[:, :3]  # (N, 3)
    colours[np.isnan(v)] = 0.75
    return [tuple(float(c) for c in rgb) for rgb in colours]
