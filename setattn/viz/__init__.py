"""Pictures of attention and of training: small functions, one picture each.

- ``molecules``: ``draw_atom_weights`` (RDKit drawing, PNG or SVG) and ``weight_colour``.
- ``plots``: matplotlib pictures (Agg backend, no display needed):
  ``plot_training_curve``, ``plot_alignment``, ``plot_word_weights``, ``words_to_html``,
  ``plot_patch_attention`` and ``plot_node_attention``.
"""

from setattn.viz.molecules import draw_atom_weights, weight_colour
from setattn.viz.plots import (
    plot_alignment,
    plot_node_attention,
    plot_patch_attention,
    plot_training_curve,
    plot_word_weights,
    words_to_html,
)

__all__ = [
    "draw_atom_weights",
    "plot_alignment",
    "plot_node_attention",
    "plot_patch_attention",
    "plot_training_curve",
    "plot_word_weights",
    "weight_colour",
    "words_to_html",
]
