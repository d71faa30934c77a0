"""GATConv / GATv2Conv against PyG's layers with copied weights, plus invariances."""

from __future__ import annotations

import pytest
import torch
import torch_geometric.nn as pyg_nn

import setattn
from setattn.nn import GATConv, GATv2Conv

TOL = 1e-5
PAIRS = [(GATConv, pyg_nn.GATConv), (GATv2Conv, pyg_nn.GATv2Conv)]


def random_graph(seed: int, n: int, e: int, f: int, edge_dim: int = 3):
    """Random multigraph with duplicate edges, existing self loops and isolated nodes."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, f, generator=g)
    ei = torch.randint(0, n - 2, (2, e), generator=g)  # the last two nodes are isolated
    ei[:, :2] = torch.tensor([[1, 1], [1, 1]])  # a duplicated self loop
    ea = torch.randn(e, edge_dim, generator=g)
    return x, ei, ea


def randomize(module: torch.nn.Module) -> None:
    """Non-trivial values everywhere (PyG zero-initialises biases)."""
    with torch.no_grad():
        for p in module.parameters():
            p.normal_(0.0, 0.5)


def assert_close(a: torch.Tensor, b: torch.Tensor) -> None:
    assert a.shape == b.shape
    assert (a - b).abs().max().item() <= TOL


@pytest.mark.parametrize("ours,theirs", PAIRS, ids=["gat", "gatv2"])
@pytest.mark.parametrize("seed,n,e", [(0, 7, 19), (1, 11, 40), (2, 13, 3)])
@pytest.mark.parametrize("concat", [True, False])
@pytest.mark.parametrize("loops", [True, False])
@pytest.mark.parametrize("edge_dim", [None, 3])
def test_matches_pyg(ours, theirs, seed, n, e, concat, loops, edge_dim):
    x, ei, ea = random_graph(seed, n, e, f=5)
    ref = theirs(5, 4, heads=3, concat=concat, add_self_loops=loops, edge_dim=edge_dim)
    randomize(ref)
    mine = ours.from_pyg(ref)
    ea = ea if edge_dim is not None else None
    assert_close(mine(x, ei, ea), ref(x, ei, ea))


@pytest.mark.parametrize("ours,theirs", PAIRS, ids=["gat", "gatv2"])
@pytest.mark.parametrize("extra", [dict(residual=True), dict(bias=False),
                                   dict(fill_value="add"), dict(fill_value=0.5),
                                   dict(negative_slope=0.05)])
def test_matches_pyg_options(ours, theirs, extra):
    x, ei, ea = random_graph(3, 9, 25, f=6)
    ref = theirs(6, 5, heads=2, edge_dim=3, **extra)
    randomize(ref)
    mine = ours.from_pyg(ref)
    assert_close(mine(x, ei, ea), ref(x, ei, ea))


def test_gatv2_share_weights():
    x, ei, ea = random_graph(4, 8, 20, f=6)
    ref = pyg_nn.GATv2Conv(6, 5, heads=2, share_weights=True, edge_dim=3)
    randomize(ref)
    mine = GATv2Conv.from_pyg(ref)
    assert mine.lin_r is mine.lin_l
    assert_close(mine(x, ei, ea), ref(x, ei, ea))


@pytest.mark.parametrize("ours,theirs", PAIRS, ids=["gat", "gatv2"])
@pytest.mark.parametrize("in_channels", [(5, 7), 5])
@pytest.mark.parametrize("loops", [True, False])
def test_bipartite_matches_pyg(ours, theirs, in_channels, loops):
    """Sources and targets are different node sets (Ns=11, Nt=6)."""
    g = torch.Generator().manual_seed(5)
    f_dst = in_channels[1] if isinstance(in_channels, tuple) else in_channels
    x_src, x_dst = torch.randn(11, 5, generator=g), torch.randn(6, f_dst, generator=g)
    ei = torch.stack([torch.randint(0, 11, (23,), generator=g),
                      torch.randint(0, 6, (23,), generator=g)])
    ea = torch.randn(23, 2, generator=g)
    ref = theirs(in_channels, 3, heads=2, add_self_loops=loops, edge_dim=2, residual=True)
    randomize(ref)
    mine = ours.from_pyg(ref)
    assert_close(mine((x_src, x_dst), ei, ea), ref((x_src, x_dst), ei, ea))


@pytest.mark.parametrize("ours,theirs", PAIRS, ids=["gat", "gatv2"])
def test_gradients_and_weights_match_pyg(ours, theirs):
    x, ei, ea = random_graph(6, 10, 30, f=4)
    ref = theirs(4, 3, heads=2, edge_dim=3)
    randomize(ref)
    mine = ours.from_pyg(ref)
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    out_ref, (ei_ref, alpha) = ref(xa, ei, ea, return_attention_weights=True)
    out, graph = mine(xb, ei, ea, return_weights=True)
    assert torch.equal(graph.edge_index, ei_ref)
    assert_close(graph.weights, alpha)
    (out_ref.sin().sum()).backward()
    (out.sin().sum()).backward()
    assert_close(xb.grad, xa.grad)


@pytest.mark.parametrize(("n", "e"), [(6, 20), (11, 40)])
def test_gat_edge_weights_get_pygs_gradients(n, e):
    """GATConv folds att_edge into W_e (an (A, H) matrix): the gradients of both still
    equal PyG's, which projects every edge to (E, H * C) first."""
    x, ei, ea = random_graph(8 + n, n, e, f=4)
    ref = pyg_nn.GATConv(4, 3, heads=2, edge_dim=3)
    randomize(ref)
    mine = GATConv.from_pyg(ref)
    ref(x, ei, ea).sin().sum().backward()
    mine(x, ei, ea).sin().sum().backward()
    assert_close(mine.lin_edge.weight.grad, ref.lin_edge.weight.grad)
    assert_close(mine.att_edge.grad, ref.att_edge.grad.view(2, 3))


@pytest.mark.parametrize("ours", [GATConv, GATv2Conv])
def test_no_edges_gives_bias(ours):
    layer = ours(4, 3, heads=2, add_self_loops=False)
    with torch.no_grad():
        layer.bias.normal_()
    out = layer(torch.randn(5, 4), torch.empty(2, 0, dtype=torch.long))
    assert torch.isfinite(out).all()
    assert torch.allclose(out, layer.bias.expand(5, -1))


@pytest.mark.parametrize("ours", [GATConv, GATv2Conv])
def test_equivariant_and_edge_order_free(ours):
    x, ei, ea = random_graph(7, 12, 35, f=4)
    layer = ours(4, 3, heads=2, edge_dim=3)
    out = layer(x, ei, ea)
    perm = torch.randperm(12)  # new node perm[i] is old node i... invert for indices
    inv = torch.empty_like(perm)
    inv[perm] = torch.arange(12)
    x_p = x[perm]  # row r of x_p is old node perm[r]
    eorder = torch.randperm(ei.shape[1])
    ei_p = inv[ei][:, eorder]
    assert_close(layer(x_p, ei_p, ea[eorder]), out[perm])


def test_attention_weights_are_captured():
    x, ei, _ = random_graph(8, 9, 20, f=4)
    conv = GATConv(4, 3, heads=2)
    with setattn.capture() as att:
        conv(x, ei)
    (graph,) = att.values()
    assert graph.weights.shape == (graph.edge_index.shape[1], 2)
    sums = torch.zeros(9, 2).index_add_(0, graph.edge_index[1], graph.weights)
    assert torch.allclose(sums, torch.ones(9, 2), atol=1e-5)  # self loops: no empty row


@pytest.mark.parametrize("ours", [GATConv, GATv2Conv])
def test_empty_graph(ours):
    layer = ours(4, 3, heads=2, edge_dim=2)
    out = layer(torch.randn(0, 4), torch.empty(2, 0, dtype=torch.long), torch.randn(0, 2))
    assert out.shape == (0, 6)


@pytest.mark.parametrize("ours", [GATConv, GATv2Conv])
def test_dropout_only_when_training(ours):
    x, ei, _ = random_graph(9, 10, 30, f=4)
    layer = ours(4, 3, heads=2, dropout=0.5)
    layer.eval()
    assert torch.equal(layer(x, ei), layer(x, ei))
    layer.train()
    out = layer(x, ei)
    assert torch.isfinite(out).all() and not torch.allclose(out, layer.eval()(x, ei))


@pytest.mark.parametrize("ours,theirs", PAIRS, ids=["gat", "gatv2"])
def test_self_loop_memo_follows_the_edge_tensor(ours, theirs):
    """Repeated calls reuse the looped edge list; a changed tensor is never served stale."""
    x, ei, _ = random_graph(10, 9, 20, f=4)
    ref = theirs(4, 3, heads=2)
    mine = ours.from_pyg(ref)
    _, first = mine(x, ei, return_weights=True)
    _, again = mine(x, ei, return_weights=True)
    assert again.edge_index is first.edge_index
    ei[0, :5] = 8  # in place: the memo must notice
    assert_close(mine(x, ei), ref(x, ei))
    assert_close(mine(x[:8], ei.clamp_max(7)), ref(x[:8], ei.clamp_max(7)))


@pytest.mark.parametrize("ours,theirs", PAIRS)
def test_a_graph_without_self_loops_matches_pyg_exactly_and_keeps_its_edges(ours, theirs):
    from torch_geometric.utils import remove_self_loops

    from setattn.nn.conv_base import _without_self_loops

    x, ei, ea = random_graph(5, 12, 40, 4)
    ei, ea = remove_self_loops(ei, ea)  # a molecule's graph: no self loops
    assert _without_self_loops(ei, ea)[0] is ei  # nothing to remove: no copy
    looped = torch.cat([ei, torch.tensor([[2], [2]])], 1)  # one self loop
    got, want = _without_self_loops(looped, None), remove_self_loops(looped, None)
    assert torch.equal(got[0], want[0]) and got[1] is None
    ref = theirs(4, 3, heads=2, edge_dim=3)
    randomize(ref)
    layer = ours.from_pyg(ref)
    torch.testing.assert_close(layer(x, ei, ea), ref(x, ei, ea), rtol=0, atol=TOL)
