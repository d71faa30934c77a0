"""setattn's GATConv / GATv2Conv and pools where PyG's are used, each checked against PyG.

to_hetero, GNNExplainer, AttentionExplainer, edge masks, ``return_attention_weights``,
sparse ``adj_t`` input, ``size``, lazy channels, state dicts under PyG's names,
``reset_parameters``, ``repr``, torch.jit.script (refused, as for PyG's own GAT layers),
and the pools under PyG's aggregation call.
"""

from __future__ import annotations

import pytest
import torch
import torch_geometric.nn as pyg_nn
from torch_geometric.explain import AttentionExplainer, Explainer, GNNExplainer
from torch_geometric.explain.algorithm.utils import clear_masks, set_masks
from torch_geometric.nn import to_hetero
from torch_geometric.nn.aggr import AttentionalAggregation
from torch_geometric.utils import to_torch_coo_tensor, to_torch_csc_tensor, to_torch_csr_tensor

from setattn.nn import (
    PMA,
    GATConv,
    GATv2Conv,
    GlobalAttentionPool,
    load_pyg_state_dict,
    pyg_state_dict,
)

TOL = 1e-5
PAIRS = [(GATConv, pyg_nn.GATConv), (GATv2Conv, pyg_nn.GATv2Conv)]
IDS = ["gat", "gatv2"]


def graph(seed: int = 0, n: int = 10, e: int = 30, f: int = 5):
    """Random graph with one existing self loop (node 3) and duplicate-free noise."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, f, generator=g)
    ei = torch.randint(0, n, (2, e), generator=g)
    ei[:, 0] = 3
    return x, ei


def randomize(module: torch.nn.Module) -> None:
    """Non-trivial values everywhere (PyG zero-initialises biases)."""
    with torch.no_grad():
        for p in module.parameters():
            p.normal_(0.0, 0.5)


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    assert a.shape == b.shape
    return (a - b).abs().max().item()


class TwoLayers(torch.nn.Module):
    """A two-layer GAT node classifier, written once for either library's layers."""

    def __init__(self, conv, in_channels=5, **kw):
        super().__init__()
        self.conv1 = conv(in_channels, 4, heads=2, **kw)
        self.conv2 = conv(-1 if in_channels == -1 else 8, 3, heads=1, **kw)

    def forward(self, x, edge_index):
        return self.conv2(self.conv1(x, edge_index).relu(), edge_index).log_softmax(-1)


def twin_models(ours, theirs, **kw):
    """The same model with PyG's layers and with setattn's, same weights, eval mode."""
    ref = TwoLayers(theirs, **kw).eval()
    randomize(ref)
    mine = TwoLayers(ours, **kw).eval()
    load_pyg_state_dict(mine, ref.state_dict())
    return mine, ref


# ---------------------------------------------------------------------------------------
# to_hetero


class HeteroNet(torch.nn.Module):
    def __init__(self, conv):
        super().__init__()
        self.conv1 = conv((-1, -1), 8, heads=2, add_self_loops=False)
        self.conv2 = conv((-1, -1), 4, heads=1, add_self_loops=False)

    def forward(self, x, edge_index):
        return self.conv2(self.conv1(x, edge_index).relu(), edge_index)


def hetero_graph():
    g = torch.Generator().manual_seed(1)
    x = {"paper": torch.randn(7, 5, generator=g), "author": torch.randn(4, 3, generator=g)}

    def rand_edges(ns, nt, e):
        return torch.stack([torch.randint(0, ns, (e,), generator=g),
                            torch.randint(0, nt, (e,), generator=g)])

    ei = {("author", "writes", "paper"): rand_edges(4, 7, 10),
          ("paper", "rev_writes", "author"): rand_edges(7, 4, 10),
          ("paper", "cites", "paper"): rand_edges(7, 7, 15)}
    return x, ei


@pytest.mark.parametrize("ours,theirs", PAIRS, ids=IDS)
def test_to_hetero_gives_pyg_keys_and_values(ours, theirs):
    """Two node types, three edge types: outputs keyed by node type, equal to PyG's."""
    x, ei = hetero_graph()
    metadata = (list(x), list(ei))
    ref = to_hetero(HeteroNet(theirs), metadata, aggr="sum")
    mine = to_hetero(HeteroNet(ours), metadata, aggr="sum")
    ref(x, ei), mine(x, ei)  # lazy channels take their widths
    randomize(ref)
    result = load_pyg_state_dict(mine, ref.state_dict())
    assert not result.missing_keys and not result.unexpected_keys
    out, expect = mine(x, ei), ref(x, ei)
    assert sorted(out) == sorted(expect) == ["author", "paper"]
    for node_type in expect:
        assert max_diff(out[node_type], expect[node_type]) <= TOL


# ---------------------------------------------------------------------------------------
# explainers


@pytest.mark.parametrize("ours,theirs", PAIRS, ids=IDS)
def test_edge_masks_act_as_in_pyg(ours, theirs):
    """set_masks (what GNNExplainer and PGExplainer use) scales the messages as in PyG,
    self loops of the graph replaced by unmasked ones."""
    x, ei = graph()
    mine, ref = twin_models(ours, theirs)
    plain = mine(x, ei)
    mask = torch.randn(ei.shape[1])
    for model in (mine, ref):
        set_masks(model, mask, ei, apply_sigmoid=True)
    masked = mine(x, ei)
    assert max_diff(masked, ref(x, ei)) <= TOL
    assert max_diff(masked, plain) > 1e-3  # the mask did something
    for model in (mine, ref):
        clear_masks(model)
    assert max_diff(mine(x, ei), plain) == 0.0


@pytest.mark.parametrize("ours,theirs", PAIRS, ids=IDS)
def test_gnn_explainer_matches_pyg(ours, theirs):
    x, ei = graph()
    mine, ref = twin_models(ours, theirs)
    config = dict(mode="multiclass_classification", task_level="node", return_type="log_probs")
    explanations = []
    for model in (mine, ref):
        torch.manual_seed(0)  # GNNExplainer's random initial masks
        explainer = Explainer(model, GNNExplainer(epochs=5), explanation_type="model",
                              node_mask_type="attributes", edge_mask_type="object",
                              model_config=config)
        explanations.append(explainer(x, ei, index=4))
    got, want = explanations
    assert got.node_mask.shape == x.shape and got.edge_mask.shape == (ei.shape[1],)
    assert got.edge_mask.abs().sum() > 0  # edges near node 4 got scores
    assert max_diff(got.edge_mask, want.edge_mask) <= 1e-4
    assert max_diff(got.node_mask, want.node_mask) <= 1e-4


@pytest.mark.parametrize("ours,theirs", PAIRS, ids=IDS)
def test_attention_explainer_matches_pyg(ours, theirs):
    x, ei = graph()
    mine, ref = twin_models(ours, theirs)
    config = dict(mode="multiclass_classification", task_level="node", return_type="log_probs")
    got, want = (Explainer(model, AttentionExplainer(), explanation_type="model",
                           edge_mask_type="object", model_config=config)(x, ei, index=4)
                 for model in (mine, ref))
    assert got.edge_mask.shape == (ei.shape[1],)
    assert got.edge_mask.sum() > 0
    assert max_diff(got.edge_mask, want.edge_mask) <= TOL


def test_message_hooks_may_read_but_not_replace():
    x, ei = graph()
    conv = GATConv(5, 4, heads=2)
    seen = []
    handle = conv.register_message_forward_hook(lambda m, kw, out: seen.append(kw[0]["alpha"]))
    conv(x, ei)
    looped = int((ei[0] != ei[1]).sum()) + 10  # the graph's loops replaced by one per node
    assert len(seen) == 1 and seen[0].shape == (looped, 2)
    handle.remove()
    conv.register_message_forward_hook(lambda m, kw, out: out * 0)
    with pytest.raises(NotImplementedError, match="read them, not replace"):
        conv(x, ei)
    other = GATConv(5, 4)
    other.register_propagate_forward_hook(lambda *a: None)
    with pytest.raises(NotImplementedError, match="no propagate"):
        other(x, ei)


# ---------------------------------------------------------------------------------------
# PyG's call and return conventions


@pytest.mark.parametrize("ours,theirs", PAIRS, ids=IDS)
@pytest.mark.parametrize("bipartite", [False, True])
def test_return_attention_weights_is_pygs_alpha(ours, theirs, bipartite):
    x, ei = graph(2, e=25)
    in_channels, args = 5, (x, ei)
    if bipartite:
        x_dst = torch.randn(6, 3)
        ei = torch.stack([ei[0], ei[1] % 6])
        in_channels, args = (5, 3), ((x, x_dst), ei)
    ref = theirs(in_channels, 4, heads=3, edge_dim=2).eval()
    randomize(ref)
    mine = ours.from_pyg(ref)
    ea = torch.randn(ei.shape[1], 2)
    out_ref, (ei_ref, alpha_ref) = ref(*args, ea, return_attention_weights=True)
    out, (ei_mine, alpha) = mine(*args, ea, return_attention_weights=True)
    assert torch.equal(ei_mine, ei_ref)
    assert max_diff(alpha, alpha_ref) <= TOL
    assert max_diff(out, out_ref) <= TOL
    with pytest.raises(ValueError, match="not both"):
        mine(*args, ea, return_attention_weights=True, return_weights=True)


@pytest.mark.parametrize("ours,theirs", PAIRS, ids=IDS)
@pytest.mark.parametrize("layout", [to_torch_coo_tensor, to_torch_csr_tensor], ids=["coo", "csr"])
def test_sparse_adjacency_matches_pyg(ours, theirs, layout):
    """PyG 2.8 without torch-sparse takes torch.sparse ``adj_t`` (targets as rows)."""
    x, ei = graph(3, n=8, e=20)
    ei = torch.unique(ei, dim=1)  # a sparse tensor holds each entry once
    adj_t = layout(ei.flip(0), size=(8, 8))
    ref = theirs(5, 4, heads=2).eval()
    randomize(ref)
    mine = ours.from_pyg(ref)
    out_ref, (adj_ref, alpha_ref) = ref(x, adj_t, return_attention_weights=True)
    out, (adj, alpha) = mine(x, adj_t, return_attention_weights=True)
    assert max_diff(out, out_ref) <= TOL
    assert adj.layout == adj_ref.layout and max_diff(alpha, alpha_ref) <= TOL
    assert max_diff(adj.to_dense(), adj_ref.to_dense()) <= TOL
    assert max_diff(out, mine(x, ei)) <= TOL  # the same graph as an edge list
    # CSC, which PyG's layer rejects, gives the same numbers in its own layout
    out_csc, (adj_csc, _) = mine(x, to_torch_csc_tensor(ei.flip(0), size=(8, 8)),
                                 return_attention_weights=True)
    assert adj_csc.layout == torch.sparse_csc and max_diff(out_csc, out) <= TOL
    assert max_diff(adj_csc.to_dense(), adj.to_dense()) <= TOL


def test_size_and_missing_target_features_match_pyg():
    """PyG's GATConv takes (x_src, None) with size=(Ns, Nt): the target term is absent."""
    x, _ = graph(4, n=6)
    ei = torch.tensor([[0, 1, 5, 2], [0, 2, 1, 2]])
    ref = pyg_nn.GATConv((5, 5), 3, heads=2, add_self_loops=False)
    randomize(ref)
    mine = GATConv.from_pyg(ref)
    out = mine((x, None), ei, size=(6, 3))
    assert out.shape == (3, 6)
    assert max_diff(out, ref((x, None), ei, size=(6, 3))) <= TOL
    assert max_diff(mine(x, ei, size=(6, 6)), ref(x, ei, size=(6, 6))) <= TOL
    with pytest.raises(ValueError, match="size=\\(6, 4\\)"):
        mine(x, ei, size=(6, 4))
    with pytest.raises(ValueError, match="GATv2Conv needs target features"):
        GATv2Conv(5, 3)((x, None), ei)


@pytest.mark.parametrize("ours,theirs", PAIRS, ids=IDS)
@pytest.mark.parametrize("in_channels", [-1, (-1, -1)], ids=["shared", "pair"])
def test_lazy_channels_match_pyg(ours, theirs, in_channels):
    x, ei = graph(5)
    ref = theirs(in_channels, 3, heads=2, edge_dim=2, residual=True)
    mine = ours(in_channels, 3, heads=2, edge_dim=2, residual=True)
    assert repr(mine) == repr(ref)
    ea = torch.randn(ei.shape[1], 2)
    ref(x, ei, ea), mine(x, ei, ea)  # the first call sizes the projections
    assert all(not isinstance(p, torch.nn.parameter.UninitializedParameter)
               for p in mine.parameters())
    randomize(ref)
    mine.load_pyg_state_dict(ref.state_dict())
    assert max_diff(mine(x, ei, ea), ref(x, ei, ea)) <= TOL


@pytest.mark.parametrize("ours,theirs", PAIRS, ids=IDS)
def test_state_dict_round_trip_through_pyg(ours, theirs):
    """setattn -> PyG names -> a PyG layer -> its state dict -> setattn: the same tensors."""
    x, ei = graph(6)
    mine = ours(5, 4, heads=3, edge_dim=2, residual=True)
    randomize(mine)
    ref = theirs(5, 4, heads=3, edge_dim=2, residual=True)
    ref.load_state_dict(mine.pyg_state_dict())  # strict: every name and shape fits
    assert "att_src" in ref.state_dict() or "att" in ref.state_dict()
    back = ours(5, 4, heads=3, edge_dim=2, residual=True)
    back.load_pyg_state_dict(ref.state_dict())
    for key, value in mine.state_dict().items():
        assert torch.equal(back.state_dict()[key], value), key
    ea = torch.randn(ei.shape[1], 2)
    assert max_diff(back(x, ei, ea), ref(x, ei, ea)) <= TOL
    # the module-level functions handle models holding the layers
    model = torch.nn.Sequential(mine)
    assert set(pyg_state_dict(model)) == {f"0.{k}" for k in ref.state_dict()}


@pytest.mark.parametrize("ours,theirs", PAIRS, ids=IDS)
def test_reset_parameters(ours, theirs):
    layer = ours(5, 4, heads=2, edge_dim=2, residual=True)
    randomize(layer)
    before = {k: v.clone() for k, v in layer.state_dict().items()}
    layer.reset_parameters()
    after = layer.state_dict()
    assert all(after[k].shape == v.shape for k, v in before.items())
    assert all(not torch.equal(after[k], v) for k, v in before.items())
    assert torch.equal(layer.bias, torch.zeros_like(layer.bias))  # as PyG's
    lazy = ours(-1, 4)
    lazy.reset_parameters()  # still waiting for its first call
    assert lazy(torch.randn(3, 7), torch.tensor([[0, 1], [1, 2]])).shape == (3, 4)


@pytest.mark.filterwarnings("ignore:`torch.jit.script:DeprecationWarning")
def test_torch_jit_script_is_refused_clearly():
    """TorchScript cannot compile the engine; PyG's own GAT layers fail to script too on
    torch 2.13 + PyG 2.8 (the README says so: this test keeps that claim honest)."""
    for layer in (GATConv(5, 4), GATv2Conv(5, 4), GlobalAttentionPool(4), PMA(4)):
        with pytest.raises(NotImplementedError, match="torch.compile"):
            torch.jit.script(layer)
    for layer in (pyg_nn.GATConv(5, 4), pyg_nn.GATv2Conv(5, 4)):
        with pytest.raises(RuntimeError, match="Optional\\[Tensor\\] to bool"):
            torch.jit.script(layer)


# ---------------------------------------------------------------------------------------
# pooling under PyG's aggregation call


def test_pool_takes_pygs_aggregation_arguments():
    sizes = [3, 0, 5, 2]
    batch = torch.repeat_interleave(torch.arange(4), torch.tensor(sizes))
    x = torch.randn(10, 6)
    pool = GlobalAttentionPool(6, heads=2).eval()
    want = pool(x, batch, num_graphs=5)  # setattn's older names; a trailing empty graph
    assert want.shape == (5, 6) and torch.equal(want[4], torch.zeros(6))
    assert torch.equal(pool(x, index=batch, dim_size=5), want)
    ptr = torch.tensor([0, 3, 3, 8, 10, 10])
    assert torch.equal(pool(x, ptr=ptr), want)
    assert torch.equal(pool(x, batch, dim=0, dim_size=5), want)
    perm = torch.randperm(10)  # nodes in any order: an aggregation's index is unsorted
    assert max_diff(pool(x[perm], index=batch[perm], dim_size=5), want) <= TOL
    with pytest.raises(ValueError, match="dim=1"):
        pool(x, batch, dim=1)
    with pytest.raises(ValueError, match="not both"):
        pool(x, batch, batch=batch)


def test_pool_as_the_aggregation_of_a_pyg_layer():
    """GlobalAttentionPool as SAGEConv's ``aggr``: the same layer as with PyG's
    AttentionalAggregation, whose ``index`` (edge targets) is unsorted."""
    torch.manual_seed(0)
    x, ei = graph(7, n=12, e=40, f=4)
    theirs = AttentionalAggregation(torch.nn.Linear(4, 1), torch.nn.Linear(4, 4))
    ref = pyg_nn.SAGEConv(4, 6, aggr=theirs)
    mine = pyg_nn.SAGEConv(4, 6, aggr=GlobalAttentionPool.from_pyg(theirs))
    mine.load_state_dict(ref.state_dict())
    assert max_diff(mine(x, ei), ref(x, ei)) <= TOL


def test_pma_concat_gives_pygs_flat_output():
    x, batch = torch.randn(9, 6), torch.tensor([0, 0, 0, 1, 1, 2, 2, 2, 2])
    pool = PMA(6, heads=2, num_seeds=3).eval()
    flat = PMA(6, heads=2, num_seeds=3, concat=True).eval()
    flat.load_state_dict(pool.state_dict())
    out = pool(x, batch)
    assert out.shape == (3, 3, 6)
    assert torch.equal(flat(x, index=batch, dim_size=3), out.reshape(3, 18))
