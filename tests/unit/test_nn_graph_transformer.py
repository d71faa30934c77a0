"""hop_buckets against networkx / RDKit shortest paths, and DistanceBiasedBlock against a
float64 dense reference on padded matrices (molecules of distinct sizes, one of them in
two fragments)."""

from __future__ import annotations

import math

import networkx as nx
import pytest
import torch
import torch.nn.functional as F
from rdkit import Chem

from setattn.domains.molecules import mol_to_data
from setattn.nn import DistanceBiasedBlock, hop_buckets
from setattn.topology import complete, ptr_from_sizes

# distinct sizes: 1 atom, a ring with a tail, a long chain (diameter 11), a drug
SMILES = ["C", "c1ccccc1CCN", "CCCCCCCCCCCC", "CC(=O)Nc1ccc(O)cc1"]


def _batch_graph(graphs: list[nx.Graph]) -> tuple[torch.Tensor, torch.Tensor]:
    """(2, E) both directions, batch-numbered, and ptr (G + 1,) of networkx graphs."""
    ptr = ptr_from_sizes([g.number_of_nodes() for g in graphs])
    pairs = [(int(ptr[k]) + u, int(ptr[k]) + v) for k, g in enumerate(graphs)
             for u, v in g.edges]
    index = torch.tensor(pairs, dtype=torch.long).reshape(-1, 2).t()  # (2, E)
    return torch.cat([index, index.flip(0)], 1), ptr


def _expected(graphs: list[nx.Graph], k: int) -> torch.Tensor:
    """Canonical order of complete(ptr): graph, target i, source j ascending."""
    out = []
    for g in graphs:
        dist = dict(nx.all_pairs_shortest_path_length(g))
        n = g.number_of_nodes()
        out += [min(dist[i][j], k) if j in dist[i] else k + 1
                for i in range(n) for j in range(n)]
    return torch.tensor(out)


@pytest.mark.parametrize("k", [1, 2, 5, 30])
def test_hop_buckets_match_networkx(k):
    rng = torch.Generator().manual_seed(k)
    graphs = [nx.path_graph(9), nx.empty_graph(1), nx.cycle_graph(7)]
    graphs += [nx.gnp_random_graph(n, 0.15, seed=int(torch.randint(1000, (1,), generator=rng)))
               for n in (4, 11, 16)]  # some of these come in several pieces
    # two fragments (a salt): a triangle and a separate bond
    graphs.append(nx.disjoint_union(nx.complete_graph(3), nx.path_graph(2)))
    assert any(not nx.is_connected(g) for g in graphs)
    edge_index, ptr = _batch_graph(graphs)
    assert torch.equal(hop_buckets(edge_index, ptr, k), _expected(graphs, k))
    assert torch.equal(hop_buckets(edge_index[:, : edge_index.shape[1] // 2], ptr, k),
                       _expected(graphs, k))  # one direction per bond: the same


def test_hop_buckets_match_rdkit_distance_matrix():
    data = [mol_to_data(s) for s in SMILES]
    ptr = ptr_from_sizes([d.num_nodes for d in data])
    edge_index = torch.cat([d.edge_index + ptr[g] for g, d in enumerate(data)], 1)
    expected = torch.cat([torch.tensor(Chem.GetDistanceMatrix(Chem.MolFromSmiles(s)))
                          .clamp(max=6).long().reshape(-1) for s in SMILES])
    assert torch.equal(hop_buckets(edge_index, ptr, 6), expected)
    with pytest.raises(ValueError, match="max_hops must be >= 1"):
        hop_buckets(edge_index, ptr, 0)


def _layer_norm(h: torch.Tensor, norm: torch.nn.LayerNorm) -> torch.Tensor:
    return F.layer_norm(h, (h.shape[1],), norm.weight.double(), norm.bias.double())


def _linear(h: torch.Tensor, layer: torch.nn.Linear) -> torch.Tensor:
    return F.linear(h, layer.weight.double(), layer.bias.double())


def _reference(block: DistanceBiasedBlock, x: torch.Tensor, sizes: list[int],
               buckets: torch.Tensor) -> torch.Tensor:
    """The block in float64 on each molecule's (n, n) matrices with plain torch, post-norm:
    x = LN(x + W_O softmax(Q K^T / sqrt(d) + B) V), then LN(x + FF(x))."""
    attn, heads, table = block.attn, block.attn.heads, block.distance_bias.double()
    dh = attn.dim // heads
    out = []
    offset, edge = 0, 0
    for n in sizes:
        h = x[offset:offset + n].double()  # (n, D)
        q, k, v = (_linear(h, p).view(n, heads, dh).transpose(0, 1)
                   for p in (attn.q_proj, attn.k_proj, attn.v_proj))  # (H, n, dh)
        bias = table[buckets[edge:edge + n * n]].view(n, n, heads).permute(2, 0, 1)  # (H, i, j)
        p = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(dh) + bias, -1)  # (H, n, n)
        z = (p @ v).transpose(0, 1).reshape(n, attn.dim)  # (n, D)
        h = _layer_norm(h + _linear(z, attn.out_proj), block.norm1)
        f = _linear(F.gelu(_linear(h, block.ff[0])), block.ff[2])
        out.append(_layer_norm(h + f, block.norm2))
        offset, edge = offset + n, edge + n * n
    return torch.cat(out)


def test_distance_biased_block_matches_dense_float64_reference():
    torch.manual_seed(0)
    # distinct sizes; the last molecule is a salt in two fragments (no path between them)
    data = [mol_to_data(s) for s in SMILES]
    salt = mol_to_data("CC(=O)[O-]")
    salt_edges = torch.cat([salt.edge_index, torch.tensor([[4, 5], [5, 4]])], 1)  # + Na-Cl
    sizes = [d.num_nodes for d in data] + [salt.num_nodes + 2]
    ptr = ptr_from_sizes(sizes)
    edge_index = torch.cat([d.edge_index + ptr[g] for g, d in enumerate(data)]
                           + [salt_edges + ptr[-2]], 1)
    block = DistanceBiasedBlock(16, heads=4, max_hops=3).double()
    with torch.no_grad():
        block.distance_bias.normal_()  # a bias that matters, different per head
    buckets = hop_buckets(edge_index, ptr, 3)
    assert int(buckets.max()) == 4  # "no path" occurs
    x = torch.randn(int(ptr[-1]), 16, dtype=torch.float64)
    got = block(x, complete(ptr), buckets)
    assert (got - _reference(block, x, sizes, buckets)).abs().max() < 1e-10
    # float32, as the model runs it: same numbers to float32 precision
    got32 = block.float()(x.float(), complete(ptr), buckets)
    assert (got32.double() - got).abs().max() < 1e-4
    # the bias reaches the table's gradient, one row per bucket present
    got32.square().sum().backward()
    assert (block.distance_bias.grad.abs().sum(1) > 0).all()
