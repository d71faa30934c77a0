"""Molecule pictures drawn by RDKit: atoms coloured by an attention weight each.

- ``draw_atom_weights(smiles, weights, path)``: a molecule drawn by RDKit with its
  atoms coloured by a weight each (e.g. the readout's attention), one panel per row
  of ``weights``; PNG or SVG, no matplotlib involved.
- ``weight_colour(w)``: the white-to-red colour of one weight in [0, 1].
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

__all__ = ["draw_atom_weights", "weight_colour"]

_LOW = np.array([1.0, 1.0, 1.0])  # weight 0: white
_HIGH = np.array([0.84, 0.15, 0.16])  # the largest weight of a panel: red


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
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in (".png", ".svg"):
        raise ValueError(f"{path}: the picture must end in .png or .svg, not {suffix!r}")
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
    if suffix == ".png":
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
    if suffix == ".png":
        path.write_bytes(drawer.GetDrawingText())
    else:
        path.write_text(drawer.GetDrawingText(), encoding="utf-8")
    return path

