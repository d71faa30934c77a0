"""Contribution pictures: diverging colours centred at the neutral value, the right atoms
at the extremes (colours handed to RDKit and pixels at the atoms' positions)."""

from __future__ import annotations

import io

import matplotlib.image
import numpy as np
import pytest
from rdkit import Chem

from setattn.viz import atom_disc_drawing, contribution_colours, draw_atom_contributions


def test_colours_are_red_above_blue_below_white_at_the_centre():
    red, white, blue, grey = contribution_colours([2.0, 0.0, -1.0, float("nan")])
    assert red[0] > red[2] + 0.2 and red[1] < 0.1  # the largest distance: full (dark) red
    assert min(white) > 0.95  # the centre: white
    assert blue[2] > blue[0] and blue[2] > 0.6  # below the centre: blue, half strength
    assert grey == (0.75, 0.75, 0.75)


def test_colours_are_symmetric_around_any_centre():
    from matplotlib import colormaps

    up, down, half = contribution_colours([1.5, 0.5, 1.25], centre=1.0)
    cmap = colormaps["RdBu_r"]
    assert up == pytest.approx(cmap(1.0)[:3]) and down == pytest.approx(cmap(0.0)[:3])
    assert half == pytest.approx(cmap(0.75)[:3])


def test_a_given_limit_keeps_small_values_pale():
    (pale,) = contribution_colours([1.05], centre=1.0, limit=1.0)
    assert min(pale) > 0.9


def pixel(png: bytes, xy: tuple[float, float], radius: int = 10) -> np.ndarray:
    """The disc's colour around an atom: the median of the pixels within ``radius``
    that are not the black or grey of bonds and labels."""
    image = matplotlib.image.imread(io.BytesIO(png), format="png")[:, :, :3]  # (H, W, 3)
    x, y = int(round(xy[0])), int(round(xy[1]))
    patch = image[y - radius:y + radius + 1, x - radius:x + radius + 1].reshape(-1, 3)
    dark_grey = (np.ptp(patch, 1) < 0.1) & (patch.max(1) < 0.5)  # bonds, labels
    return np.median(patch[~dark_grey], 0)


def test_the_drawing_puts_the_extreme_colours_on_the_extreme_atoms():
    mol = Chem.MolFromSmiles("OCCc1ccccc1N")
    values = np.zeros(mol.GetNumAtoms())
    values[0], values[9] = 1.0, -1.0  # the O most positive, the N most negative
    png, points = atom_disc_drawing(mol, contribution_colours(values))
    r, _, b = pixel(png, points[0])
    assert r > b + 0.2  # red disc on the O
    r, _, b = pixel(png, points[9])
    assert b > r + 0.2  # blue disc on the N
    for k in (1, 4):  # neutral atoms stay white under the carbon labels
        assert pixel(png, points[k]).min() > 0.85


@pytest.mark.parametrize("suffix, magic", [(".png", b"\x89PNG"), (".svg", b"<?xml")])
def test_draw_atom_contributions_writes_the_picture(tmp_path, suffix, magic):
    path = draw_atom_contributions("CC(=O)[O-].[Na+]", [0.5, -0.2, 0.1, float("nan"), 0.0],
                                   tmp_path / f"m{suffix}", title="predicted 1.0",
                                   unit="contribution to y")
    assert path.read_bytes()[:5].startswith(magic)


def test_draw_atom_contributions_checks_its_input(tmp_path):
    with pytest.raises(ValueError, match="3 atoms"):
        draw_atom_contributions("CCO", [1.0, 2.0], tmp_path / "m.png")
    with pytest.raises(ValueError, match="must end in .png or .svg"):
        draw_atom_contributions("CCO", [1.0, 2.0, 3.0], tmp_path / "m.jpg")
