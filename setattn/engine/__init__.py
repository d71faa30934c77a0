"""The one attention engine: scores on edges, softmax per target node, weighted sum.

``attend`` (:mod:`setattn.engine.attend`) is the entry; :func:`plan`
(:mod:`setattn.engine.plan`) decides which path computes a call, and its module
docstring tables the paths: dense size buckets (SDPA or explicit), window blocks,
and edge lists (fused GATv2, CSR products or gathered messages).

The functions ``attend`` and ``plan`` re-exported here share their names with their
modules: reach a module's other names with ``from setattn.engine.plan import ...``.
"""

from setattn.engine.attend import AttentionGraph, attend
from setattn.engine.dense import size_buckets
from setattn.engine.plan import EnginePath, plan
from setattn.engine.precompute import precompute
from setattn.engine.softmax import masked_softmax, segment_softmax

__all__ = [
    "AttentionGraph",
    "EnginePath",
    "attend",
    "masked_softmax",
    "plan",
    "precompute",
    "segment_softmax",
    "size_buckets",
]
