"""networkx interop: graphs <-> PyG ``Data``, and attention weights -> ``networkx.DiGraph``.

Naming rule shared by both directions, so that round trips are exact:

- node attribute ``a`` <-> ``Data`` field ``a`` (one row per node);
- edge attribute ``a`` <-> ``Data`` field ``edge_a`` (one row per edge), and a
  name already starting with ``edge_`` is kept as is. So networkx ``weight``
  becomes ``edge_weight`` (PyG's name for scalar edge weights) and back.

Nodes are numbered 0 .. N-1 in ``G.nodes`` order. Edges j -> i are stored with
row 0 = source j, row 1 = target i, in ``G.edges`` order (networkx groups edges by
source); an undirected graph gives both directions.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch_geometric.data import Data

if TYPE_CHECKING:  # networkx is optional (setattn[plots]): imported where a graph is built
    import networkx as nx

__all__ = ["attention_to_networkx", "from_networkx", "to_networkx"]

_EDGE_PREFIX = "edge_"
_STRUCTURE_KEYS = ("edge_index", "num_nodes", "batch", "ptr")


def _edge_field(name: str) -> str:
    return name if name.startswith(_EDGE_PREFIX) else _EDGE_PREFIX + name


def _common_keys(attribute_dicts: list[dict]) -> list[str]:
    """Attribute names present on every node (or edge), in first-seen order."""
    if not attribute_dicts:
        return []
    keys = list(attribute_dicts[0])
    return [k for k in keys if all(k in attrs for attrs in attribute_dicts)]


def _stack(values: list[Any], what: str) -> torch.Tensor:
    """Turn per-node (or per-edge) values (numbers, lists, tensors) into one tensor."""
    if values and isinstance(values[0], torch.Tensor):
        return torch.stack(values)
    try:
        return torch.tensor(values)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{what}: values cannot be stacked into a tensor ({err})") from None


def from_networkx(G: nx.Graph) -> Data:
    """Convert a networkx graph to a PyG ``Data``.

    Attributes present on every node (every edge) become tensors, following the
    module's naming rule; other attributes, and attributes that are not numeric,
    are left out (graph-level attributes are left out too).

    Args:
        G: a ``Graph``, ``DiGraph`` (or their multigraph forms) with any
            hashable node keys.

    Returns:
        ``Data`` with ``edge_index`` (2, E) long, ``num_nodes`` N, and one field
        per shared numeric attribute: (N, ...) for nodes, (E, ...) for edges.
        For an undirected graph E counts both directions (a self loop once),
        each edge u-v giving u -> v then v -> u.
    """
    index = {node: k for k, node in enumerate(G.nodes)}
    sources: list[int] = []
    targets: list[int] = []
    edge_attrs: list[dict] = []
    for u, v, attrs in G.edges(data=True):
        sources.append(index[u])
        targets.append(index[v])
        edge_attrs.append(attrs)
        if not G.is_directed() and u != v:
            sources.append(index[v])
            targets.append(index[u])
            edge_attrs.append(attrs)
    data = Data(
        edge_index=torch.tensor([sources, targets], dtype=torch.long).view(2, -1),  # (2, E)
        num_nodes=G.number_of_nodes(),
    )
    node_attrs = [attrs for _, attrs in G.nodes(data=True)]
    for key in _common_keys(node_attrs):
        _set_if_numeric(data, key, [attrs[key] for attrs in node_attrs], f"node attribute {key!r}")
    for key in _common_keys(edge_attrs):
        values = [attrs[key] for attrs in edge_attrs]
        _set_if_numeric(data, _edge_field(key), values, f"edge attribute {key!r}")
    return data


def _set_if_numeric(data: Data, field: str, values: list[Any], what: str) -> None:
    """Store ``values`` as ``data[field]`` unless they are not numbers (e.g. strings)."""
    first = values[0]
    if isinstance(first, str | bytes) or first is None:
        return
    data[field] = _stack(values, what)


def _node_and_edge_fields(data: Data) -> tuple[list[str], list[str]]:
    """Split the tensor fields of ``data`` into node-level and edge-level ones."""
    num_nodes = data.num_nodes
    num_edges = data.edge_index.shape[1] if data.edge_index is not None else 0
    node_fields, edge_fields = [], []
    for key, value in data.items():
        if key in _STRUCTURE_KEYS or not isinstance(value, torch.Tensor) or value.dim() == 0:
            continue
        if key.startswith(_EDGE_PREFIX) and value.shape[0] == num_edges:
            edge_fields.append(key)
        elif not key.startswith(_EDGE_PREFIX) and value.shape[0] == num_nodes:
            node_fields.append(key)
    return node_fields, edge_fields


def to_networkx(data: Data, *, undirected: bool = False) -> nx.DiGraph | nx.Graph:
    """Convert a PyG ``Data`` graph to networkx.

    Node-level tensors (first dimension N, name not starting with ``edge_``)
    become node attributes of the same name; edge-level tensors (first dimension
    E, name starting with ``edge_``) become edge attributes named without the
    prefix (``edge_weight`` -> ``weight``, ``edge_attr`` -> ``attr``). Values are
    plain Python numbers or (nested) lists, so the graph holds no tensors.

    Args:
        data: a graph with ``edge_index`` (2, E) and ``num_nodes`` N.
        undirected: return a ``Graph`` keeping, for each pair, the attributes of
            the edge with source <= target (the reverse edge is dropped);
            otherwise a ``DiGraph`` with every edge.

    Returns:
        The networkx graph with nodes 0 .. N-1 (isolated nodes included).
    """
    import networkx as nx

    graph: nx.Graph = nx.Graph() if undirected else nx.DiGraph()
    node_fields, edge_fields = _node_and_edge_fields(data)
    node_values = {key: data[key].tolist() for key in node_fields}
    graph.add_nodes_from(
        (k, {key: values[k] for key, values in node_values.items()})
        for k in range(data.num_nodes or 0)
    )
    if data.edge_index is None:
        return graph
    edge_values = {key[len(_EDGE_PREFIX) :]: data[key].tolist() for key in edge_fields}
    for e, (j, i) in enumerate(data.edge_index.t().tolist()):
        if undirected and j > i:
            continue
        graph.add_edge(j, i, **{name: values[e] for name, values in edge_values.items()})
    return graph


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
