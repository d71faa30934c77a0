"""Pictures of attention and of training: small functions, one picture each.

- ``molecules``: ``draw_atom_contributions`` (signed contributions on atom discs, colour
  bar, title), ``draw_atom_weights`` (RDKit drawing, PNG or SVG), ``contribution_colours``,
  ``atom_disc_drawing`` and ``weight_colour``.
- ``plots``: matplotlib pictures (Agg backend, no display needed):
  ``plot_training_curve``, ``plot_alignment``, ``plot_word_weights``, ``words_to_html``,
  ``plot_patch_attention`` and ``plot_node_attention``.
- ``text``: words shaded by signed contributions (diverging colours, colour bar):
  ``WordSection``, ``plot_word_contributions``, ``words_contributions_html``.
- ``images``: ``plot_patch_contributions`` (signed per-patch values over images, diverging
  colours, colour bar, titles) and ``patch_contribution_map``, its colours.
- ``colours``: ``contribution_colours`` and ``contribution_limit``, shared by them.
"""

from setattn.viz.colours import contribution_colours, contribution_limit
from setattn.viz.images import patch_contribution_map, plot_patch_contributions
from setattn.viz.plots import (
    plot_alignment,
    plot_node_attention,
    plot_patch_attention,
    plot_training_curve,
    plot_word_weights,
    words_to_html,
)
from setattn.viz.text import WordSection, plot_word_contributions, words_contributions_html

try:  # RDKit is optional (setattn[molecules]); the matplotlib pictures work without it
    from setattn.viz.molecules import (
        atom_disc_drawing,
        draw_atom_contributions,
        draw_atom_weights,
        weight_colour,
    )
except ModuleNotFoundError as err:
    if err.name != "rdkit":
        raise

    def __getattr__(name: str) -> object:
        """The RDKit names of ``__all__`` when RDKit is not installed: say what to install."""
        if name in __all__:
            message = f"setattn.viz.{name} needs RDKit: pip install 'setattn[molecules]'"
            raise ModuleNotFoundError(message, name="rdkit")
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "WordSection",
    "atom_disc_drawing",
    "contribution_colours",
    "contribution_limit",
    "draw_atom_contributions",
    "draw_atom_weights",
    "patch_contribution_map",
    "plot_alignment",
    "plot_node_attention",
    "plot_patch_attention",
    "plot_patch_contributions",
    "plot_training_curve",
    "plot_word_contributions",
    "plot_word_weights",
    "weight_colour",
    "words_contributions_html",
    "words_to_html",
]
