"""Molecule pictures drawn by RDKit: atoms coloured by an attention weight each.

- ``draw_atom_weights(smiles, weights, path)``: a molecule drawn by RDKit with its
  atoms coloured by a weight each (e.g. the readout's attention), one panel per row
  of ``weights``; PNG or SVG, no matplotlib involved.
- ``weight_colour(w)``: the white-to-red colour of one weight in [0, 1].
- ``draw_atom_contributions(smiles, values, path)``: atoms on discs coloured by a
  signed contribution each (diverging colours centred at zero, or at 1 for attention
  relative to uniform), a colour bar in the contributions' units and a title.
- ``contribution_colours`` and ``atom_disc_drawing``: its colours, and the RDKit drawing
  with the atoms' pixel positions.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from rdkit import Chem
from rdkit.Chem.Draw import rdMolDraw2D

from setattn.domains.molecules import keep_largest_fragment, parse_smiles
from setattn.viz.colours import contribution_colours

__all__ = ["atom_disc_drawing", "contribution_colours", "draw_atom_contributions",
           "draw_atom_discs", "draw_atom_weights", "weight_colour"]

_LOW = np.array([1.0, 1.0, 1.0])  # weight 0: white
_HIGH = np.array([0.84, 0.15, 0.16])  # the largest weight of a panel: red


def _picture_path(path: str | Path) -> Path:
    """``path`` as a ``Path``; a ValueError unless it ends in .png or .svg."""
    path = Path(path)
    if path.suffix.lower() not in (".png", ".svg"):
        raise ValueError(f"{path}: the picture must end in .png or .svg, not "
                         f"{path.suffix.lower()!r}")
    return path


def weight_colour(w: float) -> tuple[float, float, float]:
    """RGB colour of a weight in [0, 1], white (0) to red (1)."""
    w = min(max(float(w), 0.0), 1.0)
    return tuple(float(c) for c in _LOW + w * (_HIGH - _LOW))


def _panel_mol(mol: Chem.Mol, weights: np.ndarray, notes: bool) -> Chem.Mol:
    """A copy of ``mol`` carrying each atom's weight as a note under its label."""
    mol = Chem.Mol(mol)
    if notes:
        for atom, w in zip(mol.GetAtoms(), weights):
            atom.SetProp("atomNote", f"{w:.2f}")
    return mol


def draw_atom_weights(
    smiles: str,
    weights: torch.Tensor | np.ndarray | Sequence[float],
    path: str | Path,
    *,
    legends: Sequence[str] | None = None,
    panel_size: tuple[int, int] = (420, 340),
    notes: bool = True,
) -> Path:
    """Draw a molecule with atoms coloured by weight; PNG or SVG by ``path``'s suffix.

    The molecule is parsed as the featuriser does (largest fragment kept), so atom k
    of the drawing is node k of ``mol_to_data(smiles)``. Each panel is coloured from
    white (weight 0) to red (the panel's largest weight).

    Args:
        smiles: the molecule.
        weights: (N,) one weight per atom, or (P, N) for P panels side by side.
        path: output file, ending in ``.png`` or ``.svg``.
        legends: P captions, one per panel.
        panel_size: (width, height) of one panel in pixels.
        notes: write each atom's weight next to it.

    Returns:
        ``path`` as a ``Path``.

    Raises:
        InvalidSmilesError: if ``smiles`` does not parse.
        ValueError: for an unknown suffix, or weights that do not match the atoms.
    """
    path = _picture_path(path)
    mol = keep_largest_fragment(parse_smiles(smiles))
    w = np.asarray(torch.as_tensor(weights, dtype=torch.float64).detach().cpu())
    w = w[None] if w.ndim == 1 else w  # (P, N)
    n = mol.GetNumAtoms()
    if w.ndim != 2 or w.shape[1] != n:
        raise ValueError(f"{smiles!r} has {n} atoms but weights have shape {tuple(w.shape)}")
    panels = w.shape[0]
    legends = list(legends) if legends is not None else [""] * panels
    if len(legends) != panels:
        raise ValueError(f"{panels} panels but {len(legends)} legends")

    scale = w.max(1, keepdims=True)  # (P, 1)
    shade = np.divide(w, scale, out=np.zeros_like(w), where=scale > 0)  # (P, N) in [0, 1]
    mols = [_panel_mol(mol, w[p], notes) for p in range(panels)]
    atoms = [list(range(n)) for _ in range(panels)]
    colours = [{a: weight_colour(shade[p, a]) for a in range(n)} for p in range(panels)]
    radii = [{a: 0.45 for a in range(n)} for _ in range(panels)]

    columns = min(panels, 3)
    rows = math.ceil(panels / columns)
    width, height = panel_size
    if path.suffix.lower() == ".png":
        drawer = rdMolDraw2D.MolDraw2DCairo(width * columns, height * rows, width, height)
    else:
        drawer = rdMolDraw2D.MolDraw2DSVG(width * columns, height * rows, width, height)
    drawer.drawOptions().clearBackground = True
    drawer.DrawMolecules(
        mols,
        highlightAtoms=atoms,
        highlightAtomColors=colours,
        highlightAtomRadii=radii,
        highlightBonds=[[] for _ in range(panels)],
        legends=legends,
    )
    drawer.FinishDrawing()
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix.lower() == ".png":
        path.write_bytes(drawer.GetDrawingText())
    else:
        path.write_text(drawer.GetDrawingText(), encoding="utf-8")
    return path



def atom_disc_drawing(mol: Chem.Mol, colours: Sequence[tuple[float, float, float]],
                      size: tuple[int, int] = (560, 420), notes: Sequence[str] | None = None
                      ) -> tuple[bytes, list[tuple[float, float]]]:
    """A PNG of ``mol`` with a coloured disc on every atom, and the atoms' pixel centres.

    Args:
        mol: the molecule (atom k drawn with ``colours[k]``).
        colours: N RGB triples.
        size: (width, height) in pixels.
        notes: N short texts written beside the atoms (None: none).

    Returns:
        (PNG bytes, N (x, y) pixel positions of the atoms in that PNG).
    """
    drawer = rdMolDraw2D.MolDraw2DCairo(*size)
    points = draw_atom_discs(drawer, mol, colours, notes)
    return drawer.GetDrawingText(), points


def draw_atom_discs(drawer: rdMolDraw2D.MolDraw2D, mol: Chem.Mol,
                    colours: Sequence[tuple[float, float, float]],
                    notes: Sequence[str] | None = None) -> list[tuple[float, float]]:
    """Draw ``mol`` with a disc of ``colours[k]`` on atom k into an RDKit ``drawer``
    (PNG or SVG: the same picture) and finish it; returns the N atoms' pixel centres."""
    mol = Chem.Mol(mol)
    for atom, note in zip(mol.GetAtoms(), notes or []):
        atom.SetProp("atomNote", note)
    n = mol.GetNumAtoms()
    options = drawer.drawOptions()
    options.clearBackground = True
    options.annotationFontScale = 0.6
    options.fillHighlights = True
    rdMolDraw2D.PrepareAndDrawMolecule(
        drawer, mol, highlightAtoms=list(range(n)),
        highlightAtomColors={a: tuple(colours[a]) for a in range(n)},
        highlightAtomRadii={a: 0.42 for a in range(n)}, highlightBonds=[])
    drawer.FinishDrawing()
    points = [drawer.GetDrawCoords(a) for a in range(n)]
    return [(float(p.x), float(p.y)) for p in points]


def draw_atom_contributions(
    smiles: str,
    values: torch.Tensor | np.ndarray | Sequence[float],
    path: str | Path,
    *,
    title: str = "",
    unit: str = "contribution",
    centre: float = 0.0,
    limit: float | None = None,
    notes: bool = True,
) -> Path:
    """A molecule with each atom on a disc coloured by its contribution, and a colour bar.

    Diverging colours centred at ``centre`` (white): red above, blue below, full colour
    at the largest distance from it, symmetric so that equal and opposite contributions
    look equally strong. Atom k is atom k of ``Chem.MolFromSmiles(smiles)`` (all
    fragments drawn).

    Args:
        smiles: the molecule.
        values: (N,) one contribution per atom (NaN: grey).
        path: ``.png`` or ``.svg``.
        title: the picture's title (e.g. the prediction).
        unit: the colour bar's caption, in the contributions' units.
        centre: the neutral value.
        limit: the distance from ``centre`` drawn at full colour (default: the largest).
        notes: write each value beside its atom.

    Returns:
        ``path`` as a ``Path``.

    Raises:
        InvalidSmilesError: if ``smiles`` does not parse.
        ValueError: for an unknown suffix, or values that do not match the atoms.
    """
    path = _picture_path(path)
    mol, colours, texts, limit = contribution_discs(smiles, values, centre, limit, notes)
    png, _ = atom_disc_drawing(mol, colours, notes=texts)
    return _with_colour_bar(png, path, title, unit, centre, limit)


def contribution_discs(smiles: str, values: torch.Tensor | np.ndarray | Sequence[float],
                       centre: float, limit: float | None, notes: bool
                       ) -> tuple[Chem.Mol, list[tuple[float, float, float]],
                                  list[str] | None, float]:
    """What a contribution picture draws: the molecule, each atom's disc colour, its
    printed value (or None without ``notes``) and the colour scale's half-width
    (``limit``, or the largest distance of a value from ``centre``; 1 when all are equal).

    Raises:
        InvalidSmilesError: if ``smiles`` does not parse.
        ValueError: if ``values`` (N,) do not match the N atoms.
    """
    mol = parse_smiles(smiles)
    v = np.asarray(torch.as_tensor(values, dtype=torch.float64).detach().cpu())  # (N,)
    if v.shape != (mol.GetNumAtoms(),):
        raise ValueError(f"{smiles!r} has {mol.GetNumAtoms()} atoms but values have shape "
                         f"{tuple(v.shape)}")
    if limit is None:
        limit = float(np.nanmax(np.abs(v - centre), initial=0.0)) or 1.0
    form = "{:+.2f}" if centre == 0 else "{:.2f}"
    texts = [("n/a" if np.isnan(x) else form.format(x)) for x in v] if notes else None
    return mol, list(contribution_colours(v, centre, limit)), texts, limit


def _with_colour_bar(png: bytes, path: Path, title: str, unit: str, centre: float,
                     limit: float) -> Path:
    """The RDKit drawing beside a colour bar from ``centre - limit`` to ``centre + limit``."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.image
    import matplotlib.pyplot as plt
    from matplotlib import cm, colors

    image = matplotlib.image.imread(io.BytesIO(png), format="png")
    fig, ax = plt.subplots(figsize=(7.0, 5.0))
    ax.imshow(image)
    ax.axis("off")
    scale = cm.ScalarMappable(colors.Normalize(centre - limit, centre + limit), "RdBu_r")
    bar = fig.colorbar(scale, ax=ax, fraction=0.04, pad=0.02)
    bar.set_label(unit, fontsize=9)
    if title:
        ax.set_title(title, fontsize=8.5, wrap=True)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
