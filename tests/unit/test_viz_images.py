"""setattn.viz.images: per-patch values over images, diverging colours, a colour bar."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from matplotlib import colormaps

from setattn.viz.images import patch_contribution_map, plot_patch_contributions

GRID, P = (2, 3), 2  # 6 patches of 2 x 2 pixels: a 4 x 6 picture


TOP, BOTTOM = (np.array(colormaps["RdBu_r"](x)[:3]) for x in (1.0, 0.0))  # dark red, blue


def _redness(rgb: np.ndarray) -> np.ndarray:
    return rgb[..., 0] - rgb[..., 2]  # > 0 red, < 0 blue, 0 white or grey


def _near(rgb: np.ndarray, colour: np.ndarray) -> np.ndarray:
    """(..., 3) -> (...) whether each pixel is (about) ``colour``."""
    return np.abs(rgb - colour).max(-1) < 0.05


def test_the_extreme_patches_get_the_extreme_colours():
    values = torch.tensor([0.0, 3.0, -1.0, 0.5, -3.0, 1.0])  # patch 1 top, patch 4 bottom
    rgb = patch_contribution_map(values, GRID, P)
    assert rgb.shape == (4, 6, 3)
    corners = rgb[::P, ::P].reshape(-1, 3)  # (6, 3) one pixel per patch, row-major
    assert _near(corners, TOP).tolist() == [False, True, False, False, False, False]
    assert _near(corners, BOTTOM).tolist() == [False, False, False, False, True, False]
    assert np.allclose(rgb[0:2, 2:4], rgb[0, 2])  # a patch is one colour
    assert np.allclose(rgb[0, 0], rgb[0, 0].mean(), atol=0.03)  # 0: (near) white
    red = _redness(corners)
    assert red[5] > 0 > red[2] and red[3] > 0  # signs follow the values'


def test_the_centre_is_neutral_and_nan_is_grey():
    rgb = patch_contribution_map([1.0, 2.0, 0.0, 1.0, float("nan"), 1.5], GRID, P, centre=1.0)
    red = _redness(rgb)[::P, ::P].reshape(-1)
    assert abs(red[0]) < 0.03 and abs(red[3]) < 0.03  # at the centre: white
    assert red[1] > 0 > red[2]
    assert np.allclose(rgb[2, 2], 0.75)  # NaN (patch 4): grey
    # a given limit keeps a small value pale
    pale = _redness(patch_contribution_map([0.1] * 6, GRID, P, limit=10.0))
    full = _redness(patch_contribution_map([0.1] * 6, GRID, P))
    assert 0 < pale.max() < full.max()


def test_plot_renders_with_the_strongest_patch_reddest(tmp_path):
    from matplotlib.image import imread

    images = torch.zeros(1, 4, 6)
    images[0, :, 2:4] = 1.0  # a vertical stroke
    values = torch.tensor([[0.0, 0.0, 0.0, 0.0, 0.0, 2.0]])  # bottom-right patch only
    path = plot_patch_contributions(images, values, GRID, P, tmp_path / "p.png",
                                    titles=["label 1, pred 1"], unit="logit")
    assert path.stat().st_size > 5_000
    picture = imread(path)[..., :3]  # (h, w, 3)
    assert _near(picture, BOTTOM).any()  # the colour bar's bottom
    panel = picture[:, : int(0.7 * picture.shape[1])]  # left of the colour bar
    drawn = np.argwhere((panel < 0.9).any(-1))  # (M, 2) every non-white pixel
    red = np.argwhere(_near(panel, TOP))  # (R, 2) the full red ones
    assert len(red) > 50
    middle = (drawn.min(0) + drawn.max(0)) / 2  # (2,) centre of the drawing
    assert (red.mean(0) > middle).all()  # the red patch is at the bottom right


def test_bad_shapes_name_what_is_wrong(tmp_path):
    with pytest.raises(ValueError, match=r"values must be \(P=6,\)"):
        patch_contribution_map([1.0, 2.0], GRID, P)
    with pytest.raises(ValueError, match="images must be"):
        plot_patch_contributions(torch.zeros(1, 5, 6), torch.zeros(1, 6), GRID, P,
                                 tmp_path / "p.png")
    with pytest.raises(ValueError, match=r"values must be \(K=1, P=6\)"):
        plot_patch_contributions(torch.zeros(1, 4, 6), torch.zeros(1, 5), GRID, P,
                                 tmp_path / "p.png")
