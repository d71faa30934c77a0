"""setattn: every attention mechanism is message passing over a weighted graph.

Shape letters used throughout: N items (nodes), E edges, G graphs (sets), H heads,
D features (Dk for queries/keys, Dv for values), L padded set length.
"""

__version__ = "0.1.0"
