"""A molecule's atom contributions as one SVG document: RDKit's SVG drawing of the atoms
on coloured discs, a title and a colour bar, for a web page.

``contribution_svg(smiles, values, ...)`` draws what ``draw_atom_contributions`` draws
into a PNG (the same discs by ``draw_atom_discs``, the same colours by
``contribution_colours``, the same RdBu_r colour bar from ``centre - limit`` to
``centre + limit`` with its caption), as vector text without matplotlib's figure (which
is not safe to use from several threads at once).
"""

from __future__ import annotations

from collections.abc import Sequence
from xml.sax.saxutils import escape, quoteattr

import numpy as np
import torch
from rdkit.Chem.Draw import rdMolDraw2D

from setattn.viz.colours import contribution_colours
from setattn.viz.molecules import contribution_discs, draw_atom_discs

__all__ = ["contribution_svg"]

_BAR_STOPS = 11  # colours sampled along the bar (the colour map is smooth between them)
_LINE = 15  # pixels per title line
_BAR = 86  # pixels right of the drawing: the bar, its ticks and its caption


def _hex(rgb: Sequence[float]) -> str:
    return "#" + "".join(f"{round(255 * c):02x}" for c in rgb)


def _bar(x: float, top: float, height: float, unit: str, centre: float, limit: float) -> str:
    """The colour bar: ``centre + limit`` at the top, ``centre - limit`` at the bottom."""
    positions = np.linspace(1.0, -1.0, _BAR_STOPS)  # top to bottom, in units of ``limit``
    colours = contribution_colours(centre + positions * limit, centre, limit)
    stops = "".join(f"<stop offset='{i / (_BAR_STOPS - 1):.3f}' stop-color='{_hex(c)}'/>"
                    for i, c in enumerate(colours))
    ticks = []
    for fraction in (0.0, 0.25, 0.5, 0.75, 1.0):
        y = top + fraction * height
        value = centre + (1.0 - 2.0 * fraction) * limit
        ticks.append(f"<line x1='{x + 14}' y1='{y:.1f}' x2='{x + 18}' y2='{y:.1f}' "
                     f"stroke='#333'/><text x='{x + 20}' y='{y + 4:.1f}'>{value:.3g}</text>")
    middle = top + height / 2
    caption = (f"<text x='{x + 66}' y='{middle:.1f}' text-anchor='middle' "
               f"transform='rotate(-90 {x + 66} {middle:.1f})'>{escape(unit)}</text>")
    return (f"<defs><linearGradient id='bar' x1='0' y1='0' x2='0' y2='1'>{stops}"
            f"</linearGradient></defs><rect x='{x}' y='{top}' width='14' height='{height}' "
            f"fill='url(#bar)' stroke='#333' stroke-width='0.5'/>{''.join(ticks)}{caption}")


def contribution_svg(smiles: str, values: torch.Tensor | np.ndarray | Sequence[float], *,
                     title: str = "", unit: str = "contribution", centre: float = 0.0,
                     limit: float | None = None, size: tuple[int, int] = (480, 360),
                     notes: bool = True) -> str:
    """An SVG document of a molecule's atoms coloured by a contribution each.

    Args:
        smiles: the molecule (atom k is atom k of ``Chem.MolFromSmiles(smiles)``).
        values: (N,) one contribution per atom (NaN: grey).
        title: lines above the drawing ("\\n" between them).
        unit: the colour bar's caption.
        centre: the neutral (white) value.
        limit: the distance from ``centre`` drawn at full colour (default: the largest).
        size: (width, height) of the molecule's drawing in pixels.
        notes: write each value beside its atom.

    Returns:
        The SVG text (``<svg ...>...</svg>``, no XML declaration: it can sit in HTML).

    Raises:
        InvalidSmilesError: if ``smiles`` does not parse.
        ValueError: if ``values`` do not match the atoms.
    """
    mol, colours, texts, limit = contribution_discs(smiles, values, centre, limit, notes)
    drawer = rdMolDraw2D.MolDraw2DSVG(*size)
    draw_atom_discs(drawer, mol, colours, texts)
    molecule = drawer.GetDrawingText()
    molecule = molecule[molecule.index("<svg"):]  # without the XML declaration
    lines = title.split("\n") if title else []
    top = _LINE * len(lines) + (8 if lines else 0)
    width, height = size[0] + _BAR, size[1] + top
    heading = "".join(f"<text x='{width / 2:.0f}' y='{_LINE * (i + 1)}' text-anchor='middle'>"
                      f"{escape(line)}</text>" for i, line in enumerate(lines))
    placed = molecule.replace("<svg", f"<svg x='0' y='{top}'", 1)
    label = quoteattr(f"atom contributions of {smiles}")
    return (f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' "
            f"viewBox='0 0 {width} {height}' role='img' aria-label={label} "
            f"font-family='sans-serif' font-size='11'>"
            f"<rect width='{width}' height='{height}' fill='white'/>{heading}{placed}"
            f"{_bar(size[0] + 8, top + 20, size[1] - 40, unit, centre, limit)}</svg>")
