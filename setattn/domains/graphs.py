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

from typing import TYPE_CHECKING, Any

import torch
from torch_geometric.data import Data

from setattn.attention_graph import attention_to_networkx

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
