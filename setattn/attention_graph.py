"""Attention weights as a weighted directed graph, and that graph in networkx.

The engine hands weights back as an :class:`AttentionGraph` (edge list + (E, H)
weights); :func:`attention_to_networkx` turns one into a ``networkx.DiGraph`` (networkx
is imported only then: it is an optional dependency, ``setattn[plots]``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

if TYPE_CHECKING:
    import networkx as nx

__all__ = ["AttentionGraph", "attention_to_networkx"]


@dataclass
class AttentionGraph:
    """Attention weights as a weighted directed graph.

    Attributes:
        edge_index: (2, E) long; row 0 = source j (key), row 1 = target i (query).
        weights: (E, H) attention weight of every edge and head; for each target and
            head the weights of its incoming edges sum to 1 (or are all 0).
        num_nodes: (num_kv, num_q), the sizes of the source and target node sets.
        bipartite: sources and targets are different node sets (cross attention,
            pooling, a bipartite edge list), so node j and target j are not the same node.
    """

    edge_index: Tensor
    weights: Tensor
    num_nodes: tuple[int, int]
    bipartite: bool = False

    def to_networkx(self):
        """A ``networkx.DiGraph`` with ``weight`` (mean over heads) and ``head0``... attributes."""
        return attention_to_networkx(self.edge_index, self.weights, num_nodes=self.num_nodes,
                                     bipartite=self.bipartite)

    def to_dense(self) -> Tensor:
        """(H, num_q, num_kv) weight matrix (zeros where there is no edge; repeated edges add)."""
        src, dst = self.edge_index
        h = self.weights.shape[1]
        dense = self.weights.new_zeros(h, self.num_nodes[1], self.num_nodes[0])
        heads = torch.arange(h, device=dense.device)[:, None]  # (H, 1)
        return dense.index_put_((heads, dst[None], src[None]), self.weights.t(), accumulate=True)


def _side_sizes(
    edge_index: torch.Tensor, num_nodes: int | tuple[int, int] | None
) -> tuple[int, int]:
    """(number of sources, number of targets), from ``num_nodes`` or the indices."""
    if isinstance(num_nodes, int):
        return num_nodes, num_nodes
    if num_nodes is not None:
        num_sources, num_targets = num_nodes
        return int(num_sources), int(num_targets)
    if edge_index.numel() == 0:
        return 0, 0
    return int(edge_index[0].max()) + 1, int(edge_index[1].max()) + 1


def _check_labels(labels: Sequence[Any] | None, count: int, argument: str) -> None:
    if labels is not None and len(labels) != count:
        raise ValueError(f"argument {argument} has {len(labels)} entries for {count} nodes")


def attention_to_networkx(
    edge_index: torch.Tensor,
    weights: torch.Tensor,
    num_nodes: int | tuple[int, int] | None = None,
    *,
    node_labels: Sequence[Any] | tuple[Sequence[Any], Sequence[Any]] | None = None,
    bipartite: bool | None = None,
) -> nx.DiGraph:
    """Attention weights as a weighted directed graph.

    Self attention (one node set: words of a document, atoms, patches, graph
    nodes) gives nodes 0 .. N-1. Cross attention (queries attending to a
    different set of keys) gives a bipartite graph: nodes ``("source", j)`` and
    ``("target", i)`` with networkx's ``bipartite`` node attribute (0 for
    sources, 1 for targets).

    Args:
        edge_index: (2, E) long, row 0 = source j (attended to, the key), row 1 =
            target i (attending, the query).
        weights: (E, H) or (E,) attention weights p_ij per edge and head.
        num_nodes: N for one node set, or (num_sources, num_targets) as the
            engine's ``AttentionGraph`` gives it. Defaults to the largest
            index + 1 (0 without edges).
        node_labels: optional labels (words, atom symbols, ...) stored as the
            node attribute ``label``: N of them, or for a bipartite graph a pair
            (source labels, target labels).
        bipartite: whether sources and targets are different node sets. The
            default, None, means: only when ``num_nodes`` is a pair of different
            sizes. Pass True for cross attention between sets of equal size.

    Returns:
        ``DiGraph`` with every node (isolated ones included) and an edge j -> i
        carrying ``weight`` (the mean over heads) and ``head0`` .. ``head{H-1}``.
        Duplicate edges are merged by summing their weights (the total attention
        i pays j).
    """
    if edge_index.dim() != 2 or edge_index.shape[0] != 2:
        raise ValueError(f"argument edge_index must be (2, E), got {tuple(edge_index.shape)}")
    per_head = weights.detach().float()
    if per_head.dim() == 1:
        per_head = per_head.unsqueeze(1)  # (E, 1)
    if per_head.dim() != 2 or per_head.shape[1] == 0:
        raise ValueError(f"argument weights must be (E, H) or (E,), got {tuple(weights.shape)}")
    if per_head.shape[0] != edge_index.shape[1]:
        raise ValueError(
            f"argument weights has {per_head.shape[0]} rows for {edge_index.shape[1]} edges"
        )
    num_sources, num_targets = _side_sizes(edge_index, num_nodes)
    if bipartite is None:
        bipartite = isinstance(num_nodes, tuple) and num_sources != num_targets
    import networkx as nx

    graph = nx.DiGraph()
    if bipartite:
        source_labels, target_labels = node_labels if node_labels is not None else (None, None)
        _check_labels(source_labels, num_sources, "node_labels[0]")
        _check_labels(target_labels, num_targets, "node_labels[1]")
        for side, count, labels, part in (
            ("source", num_sources, source_labels, 0),
            ("target", num_targets, target_labels, 1),
        ):
            for k in range(count):
                label = {} if labels is None else {"label": labels[k]}
                graph.add_node((side, k), bipartite=part, **label)
    else:
        num_all = max(num_sources, num_targets)
        _check_labels(node_labels, num_all, "node_labels")
        for k in range(num_all):
            graph.add_node(k, **({} if node_labels is None else {"label": node_labels[k]}))

    totals: dict[tuple[int, int], list[float]] = {}
    for (j, i), row in zip(edge_index.t().tolist(), per_head.tolist(), strict=True):
        if (j, i) in totals:
            row = [a + b for a, b in zip(totals[(j, i)], row, strict=True)]
        totals[(j, i)] = row
    for (j, i), row in totals.items():
        attrs = {f"head{h}": value for h, value in enumerate(row)}
        source, target = (("source", j), ("target", i)) if bipartite else (j, i)
        graph.add_edge(source, target, weight=sum(row) / len(row), **attrs)
    return graph
