"""Every setattn layer with a PyG twin takes PyG's call: the same parameters in the same
positional order with the same defaults, read from PyG's own ``inspect.signature`` (setattn
may add keyword-only parameters after them), and the same numbers when called
positionally and by keyword.
"""

from __future__ import annotations

import inspect

import pytest
import torch
import torch_geometric.nn as pyg_nn
from torch_geometric.nn.aggr import AttentionalAggregation, SetTransformerAggregation

from setattn.nn import PMA, GATConv, GATv2Conv, GlobalAttentionPool

TWINS = [(GATConv, pyg_nn.GATConv), (GATv2Conv, pyg_nn.GATv2Conv),
         (GlobalAttentionPool, AttentionalAggregation), (PMA, SetTransformerAggregation)]
IDS = ["gat", "gatv2", "attentional", "set_transformer"]


def _leading(fn) -> list[tuple[str, object, object]]:
    """(name, kind, default) of the parameters that may be given positionally."""
    params = list(inspect.signature(fn).parameters.values())[1:]  # without self
    return [(p.name, p.kind, p.default) for p in params
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]


@pytest.mark.parametrize(("ours", "theirs"), TWINS, ids=IDS)
def test_forward_signature_is_pygs(ours, theirs):
    assert _leading(ours.forward) == _leading(theirs.forward)
    extra = [p for p in list(inspect.signature(ours.forward).parameters.values())[1:]
             if p.name not in inspect.signature(theirs.forward).parameters]
    assert all(p.kind is p.KEYWORD_ONLY for p in extra), extra


@pytest.mark.parametrize(("ours", "theirs"), TWINS[2:], ids=IDS[2:])
def test_pool_call_signature_is_pygs_aggregation(ours, theirs):
    """The pools' ``__call__`` is PyG's ``Aggregation.__call__`` (older names keyword-only)."""
    assert _leading(ours.__call__) == _leading(theirs.__call__)


@pytest.mark.parametrize(("ours", "theirs"), TWINS[:2], ids=IDS[:2])
def test_conv_constructor_is_pygs(ours, theirs):
    """Constructor parameters: PyG's names and defaults, in PyG's order."""
    mine = _leading(ours.__init__)
    pyg = [p for p in _leading(theirs.__init__) if p[0] in {m[0] for m in mine}]
    assert mine == pyg


def _graph(seed=0, n=9, e=25, f=6, edge_dim=3):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(n, f, generator=g), torch.randint(0, n, (2, e), generator=g),
            torch.randn(e, edge_dim, generator=g))


@pytest.mark.parametrize(("ours", "theirs"), TWINS[:2], ids=IDS[:2])
def test_conv_positional_and_keyword_calls_match_pyg(ours, theirs):
    x, ei, ea = _graph()
    torch.manual_seed(0)
    pyg = theirs(6, 4, heads=2, edge_dim=3).eval()
    mine = ours.from_pyg(pyg).eval()
    # PyG's positional order: (x, edge_index, edge_attr, [size,] return_attention_weights)
    tail = (None, True) if ours is GATConv else (True,)
    out_p, (ei_p, a_p) = pyg(x, ei, ea, *tail)
    out_m, (ei_m, a_m) = mine(x, ei, ea, *tail)
    torch.testing.assert_close(out_m, out_p, atol=1e-5, rtol=1e-5)
    assert torch.equal(ei_m, ei_p)
    torch.testing.assert_close(a_m, a_p, atol=1e-5, rtol=1e-5)
    kw = dict(x=x, edge_index=ei, edge_attr=ea, return_attention_weights=None)
    torch.testing.assert_close(mine(**kw), pyg(**kw), atol=1e-5, rtol=1e-5)


def test_pools_positional_and_keyword_calls_match_pyg():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(11, 6, generator=g)
    index = torch.tensor([0, 0, 0, 1, 1, 3, 3, 3, 3, 3, 3])
    torch.manual_seed(0)
    pyg = AttentionalAggregation(torch.nn.Linear(6, 1), torch.nn.Linear(6, 4))
    mine = GlobalAttentionPool.from_pyg(pyg)
    torch.testing.assert_close(mine(x, index, None, 4, -2), pyg(x, index, None, 4, -2),
                               atol=1e-6, rtol=1e-6)
    kw = dict(x=x, index=index, dim_size=4, dim=0)
    torch.testing.assert_close(mine(**kw), pyg(**kw), atol=1e-6, rtol=1e-6)
    pma = PMA(6, heads=2, num_seeds=2, concat=True).eval()
    ptr = torch.tensor([0, 3, 5, 5, 11])
    want = pma(x, index, None, 4, -2)
    torch.testing.assert_close(pma(x, None, ptr, 4, -2, max_num_elements=6), want,
                               atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(pma(x=x, ptr=ptr, dim_size=4, max_num_elements=6), want,
                               atol=1e-6, rtol=1e-6)
