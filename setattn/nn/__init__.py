"""Layers built on the one engine, ``setattn.attend``.

Pooling (``GlobalAttentionPool``, ``PMA``), multi-head attention over any topology
(``MultiHeadAttention``), graph attention with PyG's call (``GATConv``, ``GATv2Conv``),
blocks (``TransformerBlock``, ``MAB``, ``SAB``, ``ISAB``) and positional encodings.
Set layers take PyG's ``(x, batch)`` or ``(x, ptr=ptr)``.
"""

from setattn.nn.attention import MultiHeadAttention, set_ptr
from setattn.nn.blocks import ISAB, MAB, SAB, TransformerBlock
from setattn.nn.conv import GATConv, GATv2Conv
from setattn.nn.pooling import PMA, GlobalAttentionPool
from setattn.nn.positional import (
    AddLaplacianEigenvectorPE,
    AddRandomWalkPE,
    LearnedPositionalEncoding,
    Sinusoidal2DEncoding,
    SinusoidalEncoding,
    grid_positions,
    set_positions,
)

__all__ = [
    "ISAB",
    "MAB",
    "PMA",
    "SAB",
    "AddLaplacianEigenvectorPE",
    "AddRandomWalkPE",
    "GATConv",
    "GATv2Conv",
    "GlobalAttentionPool",
    "LearnedPositionalEncoding",
    "MultiHeadAttention",
    "Sinusoidal2DEncoding",
    "SinusoidalEncoding",
    "TransformerBlock",
    "grid_positions",
    "set_positions",
    "set_ptr",
]
