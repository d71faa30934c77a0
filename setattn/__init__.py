"""setattn: every attention mechanism is message passing over a weighted graph.

Shape letters used throughout: N items (nodes), E edges, G graphs (sets), H heads,
D features (Dk for queries/keys, Dv for values), L padded set length.
"""

__version__ = "0.2.0"

from setattn import nn, scores, topology
from setattn.capture import capture
from setattn.engine import AttentionGraph, attend, masked_softmax, precompute, segment_softmax
from setattn.topology import bipartite, complete, edges, ptr_from_batch, window

__all__ = [
    "AttentionGraph",
    "attend",
    "bipartite",
    "capture",
    "complete",
    "edges",
    "masked_softmax",
    "nn",
    "precompute",
    "ptr_from_batch",
    "scores",
    "segment_softmax",
    "topology",
    "window",
]
