"""networkx interop: exact round trips both ways, and attention weights as a DiGraph."""

from __future__ import annotations

import networkx as nx
import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.utils import softmax

from setattn.datasets import load_cora
from setattn.domains.graphs import attention_to_networkx, from_networkx, to_networkx


def test_digraph_round_trip_keeps_attributes():
    G = nx.DiGraph()
    G.add_node("a", x=[1.0, 2.0], y=0)
    G.add_node("b", x=[3.0, 4.0], y=1)
    G.add_node("c", x=[5.0, 6.0], y=1)  # isolated
    G.add_edge("a", "b", weight=0.5)
    G.add_edge("b", "a", weight=2.0)
    G.add_edge("b", "b", weight=1.0)

    data = from_networkx(G)
    assert data.num_nodes == 3
    assert data.edge_index.tolist() == [[0, 1, 1], [1, 0, 1]]
    assert data.x.tolist() == [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]
    assert data.y.tolist() == [0, 1, 1] and data.y.dtype == torch.long
    assert data.edge_weight.tolist() == [0.5, 2.0, 1.0]

    back = to_networkx(data)
    relabelled = nx.relabel_nodes(G, {"a": 0, "b": 1, "c": 2})
    assert nx.utils.graphs_equal(back, relabelled)


def test_undirected_graph_gives_both_directions():
    G = nx.Graph()
    G.add_nodes_from(range(4))  # node 3 isolated
    G.add_edge(0, 1, weight=3)
    G.add_edge(1, 2, weight=4)
    G.add_edge(2, 2, weight=5)  # self loop: once
    data = from_networkx(G)
    assert data.edge_index.tolist() == [[0, 1, 1, 2, 2], [1, 0, 2, 1, 2]]
    assert data.edge_weight.tolist() == [3, 3, 4, 4, 5]
    back = to_networkx(data, undirected=True)
    assert isinstance(back, nx.Graph) and not back.is_directed()
    assert nx.utils.graphs_equal(back, G)


def test_data_round_trip_through_networkx():
    gen = torch.Generator().manual_seed(3)
    data = Data(
        x=torch.randn(5, 3, generator=gen),
        y=torch.tensor([0, 2, 1, 1, 0]),
        edge_index=torch.tensor([[0, 1, 2, 3, 4, 4, 0], [1, 2, 3, 4, 0, 2, 0]]),
        edge_attr=torch.randn(7, 2, generator=gen),
    )
    G = to_networkx(data)
    assert G.number_of_nodes() == 5 and G.number_of_edges() == 7
    assert set(G.edges[4, 2]) == {"attr"}
    again = from_networkx(G)
    assert set(again.keys()) == {"x", "y", "edge_index", "edge_attr", "num_nodes"}
    assert torch.equal(again.x, data.x) and torch.equal(again.y, data.y)
    # networkx lists edges grouped by source: compare edges in a canonical order
    ours, theirs = _by_source(data), _by_source(again)
    assert torch.equal(theirs.edge_index, ours.edge_index)
    assert torch.equal(theirs.edge_attr, ours.edge_attr)


def _by_source(data: Data) -> Data:
    """Edges sorted by (source, target), edge attributes permuted along."""
    num_nodes = data.num_nodes
    order = torch.argsort(data.edge_index[0] * num_nodes + data.edge_index[1])
    return Data(edge_index=data.edge_index[:, order], edge_attr=data.edge_attr[order])


def test_string_attributes_are_left_out():
    G = nx.karate_club_graph()  # node attribute "club" is a string
    data = from_networkx(G)
    assert data.num_nodes == 34
    assert data.edge_index.shape == (2, 2 * 78)
    assert "club" not in data and data.edge_weight.shape == (156,)


def test_cora_through_networkx():
    cora = load_cora()
    G = to_networkx(Data(edge_index=cora.edge_index, num_nodes=cora.num_nodes), undirected=True)
    assert G.number_of_nodes() == 2708
    assert G.number_of_edges() == 5278
    assert nx.number_connected_components(G) == 78
    back = from_networkx(G)
    key = lambda ei: sorted(map(tuple, ei.t().tolist()))  # noqa: E731
    assert key(back.edge_index) == key(cora.edge_index)


def test_attention_weights_as_digraph():
    edge_index = torch.tensor([[0, 1, 2, 0, 3], [1, 1, 1, 0, 0]])  # source j -> target i
    weights = torch.tensor([[0.2, 0.4], [0.3, 0.3], [0.5, 0.3], [0.6, 1.0], [0.4, 0.0]])  # (E, H)
    G = attention_to_networkx(edge_index, weights, num_nodes=5, node_labels=list("abcde"))
    assert isinstance(G, nx.DiGraph)
    assert G.number_of_nodes() == 5 and G.number_of_edges() == 5  # node 4 isolated
    assert G.nodes[4]["label"] == "e"
    edge = G.edges[2, 1]
    assert edge["head0"] == pytest.approx(0.5) and edge["head1"] == pytest.approx(0.3)
    assert edge["weight"] == pytest.approx(0.4)
    assert set(edge) == {"weight", "head0", "head1"}


def test_attention_weights_sum_to_one_per_target():
    gen = torch.Generator().manual_seed(0)
    edge_index = torch.randint(0, 7, (2, 40), generator=gen)
    edge_index = torch.unique(edge_index, dim=1)
    scores = torch.randn(edge_index.shape[1], 3, generator=gen, requires_grad=True)  # (E, H)
    weights = softmax(scores, edge_index[1], num_nodes=7)  # per target i
    G = attention_to_networkx(edge_index, weights, num_nodes=7)
    for i in set(edge_index[1].tolist()):
        for head in ("head0", "head1", "head2", "weight"):
            total = sum(attrs[head] for _, _, attrs in G.in_edges(i, data=True))
            assert total == pytest.approx(1.0, abs=1e-6)


def test_attention_duplicates_and_shapes():
    edge_index = torch.tensor([[0, 0], [1, 1]])
    G = attention_to_networkx(edge_index, torch.tensor([0.25, 0.5]))  # (E,) one head
    assert G.number_of_nodes() == 2
    assert G.edges[0, 1]["weight"] == pytest.approx(0.75)  # duplicates summed
    assert G.edges[0, 1]["head0"] == pytest.approx(0.75)
    empty = attention_to_networkx(torch.zeros(2, 0, dtype=torch.long), torch.zeros(0, 4), 3)
    assert empty.number_of_nodes() == 3 and empty.number_of_edges() == 0
    with pytest.raises(ValueError, match="weights"):
        attention_to_networkx(edge_index, torch.ones(3, 2))
    with pytest.raises(ValueError, match="edge_index"):
        attention_to_networkx(torch.zeros(3, 2, dtype=torch.long), torch.ones(2, 1))
    with pytest.raises(ValueError, match="node_labels"):
        attention_to_networkx(edge_index, torch.ones(2, 1), node_labels=["a"])


def test_attention_num_nodes_pair_from_the_engine():
    edge_index = torch.tensor([[0, 1, 2], [0, 1, 1]])
    weights = torch.tensor([[1.0], [0.5], [0.5]])
    same = attention_to_networkx(edge_index, weights, num_nodes=(3, 3))  # self attention
    assert sorted(same.nodes) == [0, 1, 2] and same.edges[2, 1]["weight"] == 0.5

    cross = attention_to_networkx(edge_index, weights, num_nodes=(4, 2), node_labels=("wxyz", "ab"))
    assert cross.number_of_nodes() == 6
    assert cross.edges[("source", 2), ("target", 1)]["head0"] == 0.5
    assert cross.nodes[("source", 3)] == {"bipartite": 0, "label": "z"}
    assert cross.nodes[("target", 0)] == {"bipartite": 1, "label": "a"}
    assert nx.is_bipartite(cross.to_undirected())
    forced = attention_to_networkx(edge_index, weights, num_nodes=(3, 3), bipartite=True)
    assert forced.number_of_nodes() == 6 and forced.has_edge(("source", 0), ("target", 0))
    inferred = attention_to_networkx(edge_index, weights, bipartite=True)
    assert inferred.number_of_nodes() == 3 + 2
