"""Per-node explanations of any graph model's output (``Attribution`` per graph).

Domain-agnostic: ``setattn.molprop.explain`` builds on it for molecules (atoms removed
by an RDKit edit, descriptors split over atoms), the examples for words and patches.
"""

from setattn.explain.attribution import Attribution
from setattn.explain.methods import (
    METHODS,
    attention_contributions,
    integrated_gradients,
    mask_node,
    occlusion,
    readout_contributions,
    remove_node,
)

__all__ = ["METHODS", "Attribution", "attention_contributions", "integrated_gradients",
           "mask_node", "occlusion", "readout_contributions", "remove_node"]
