"""Layers built on the one engine, ``setattn.attend``.

Pooling (``GlobalAttentionPool``, ``PMA``), multi-head attention over any topology
(``MultiHeadAttention``), graph attention with PyG's call (``GATConv``, ``GATv2Conv``),
blocks (``TransformerBlock``, ``MAB``, ``SAB``, ``ISAB``), graph transformer layers
(``DistanceBiasedBlock``: global attention biased by ``hop_buckets``) and positional
encodings.
Set layers take PyG's ``(x, batch)`` or ``(x, ptr=ptr)``.

The conv layers are PyG ``MessagePassing`` modules and the pools PyG ``Aggregation``
modules (``to_hetero``, explainers, ``aggr=``); ``load_pyg_state_dict`` /
``pyg_state_dict`` convert a model's weights from / to PyG's parameter names.
"""

from setattn.nn.attention import MultiHeadAttention, set_ptr
from setattn.nn.blocks import ISAB, MAB, SAB, TransformerBlock
from setattn.nn.conv import GATConv, GATv2Conv
from setattn.nn.conv_base import AttentionConv, load_pyg_state_dict, pyg_state_dict
from setattn.nn.graph_transformer import DistanceBiasedBlock, hop_buckets
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
    "AttentionConv",
    "DistanceBiasedBlock",
    "GATConv",
    "GATv2Conv",
    "GlobalAttentionPool",
    "LearnedPositionalEncoding",
    "MultiHeadAttention",
    "Sinusoidal2DEncoding",
    "SinusoidalEncoding",
    "TransformerBlock",
    "grid_positions",
    "hop_buckets",
    "load_pyg_state_dict",
    "pyg_state_dict",
    "set_positions",
    "set_ptr",
]
