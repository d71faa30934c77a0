"""The throughput bound's stand-in layer: a graph attention layer's projections summed
over its edges, against a float64 loop over the edges, on graphs of distinct sizes."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from setattn.nn import GATConv, GATv2Conv

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture()
def bound(monkeypatch):
    """``benchmarks/throughput_bound.py``, importable for this test only."""
    monkeypatch.syspath_prepend(str(BENCH))
    import throughput_bound

    return throughput_bound


def _graph(n: int, e: int, f_bond: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 8, generator=g, dtype=torch.float64)
    edge_index = torch.randint(0, n, (2, e), generator=g)
    edge_attr = torch.randn(e, f_bond, generator=g, dtype=torch.float64)
    return x, edge_index, edge_attr


@pytest.mark.parametrize(("n", "e"), [(1, 1), (5, 12), (9, 30)])
def test_gatv2_messages_are_summed_over_edges(bound, n, e):
    conv = GATv2Conv(8, 4, heads=2, edge_dim=3, add_self_loops=False).double()
    torch.nn.init.normal_(conv.bias)
    x, edge_index, edge_attr = _graph(n, e, 3, seed=n)
    out = bound.SumOverEdges(conv)(x, edge_index, edge_attr)  # (N, 8)
    want = conv.lin_r(x) + conv.bias  # (N, 8)
    for k in range(e):
        j, i = edge_index[:, k].tolist()
        want[i] = want[i] + conv.lin_l(x[j]) + conv.lin_edge(edge_attr[k])
    torch.testing.assert_close(out, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(("n", "e"), [(2, 3), (7, 20)])
def test_gat_messages_are_summed_over_edges(bound, n, e):
    conv = GATConv(8, 4, heads=2, edge_dim=3, add_self_loops=False).double()
    torch.nn.init.normal_(conv.bias)
    x, edge_index, edge_attr = _graph(n, e, 3, seed=10 + n)
    out = bound.SumOverEdges(conv)(x, edge_index, edge_attr)  # (N, 8)
    want = conv.bias.expand(n, 8).clone()  # (N, 8)
    for k in range(e):
        j, i = edge_index[:, k].tolist()
        want[i] = want[i] + conv.lin(x[j])
    torch.testing.assert_close(out, want, rtol=1e-12, atol=1e-12)


def test_bound_models_keep_the_parameters_of_their_network(bound):
    for conv in ("gatv2", "gat"):
        full, bare = bound.build(conv, 0), bound.build(f"{conv} no scores", 0)
        assert all(isinstance(c, bound.SumOverEdges) for c in bare.convs)
        assert not any(isinstance(c, bound.SumOverEdges) for c in full.convs)
        count = sum(p.numel() for p in full.parameters())
        assert sum(p.numel() for p in bare.parameters()) == count


def test_epochs_below_chemprops_warm_up_are_refused(bound, capsys):
    with pytest.raises(SystemExit):
        bound.main(["--epochs", "2"])
    assert "argument --epochs: must be >= 3" in capsys.readouterr().err


@pytest.mark.parametrize("batch", [1, 3, 8])
def test_an_epoch_takes_one_step_per_batch_of_the_size_asked(bound, monkeypatch, batch):
    """``epoch_fn(..., batch)``: ceil(M / batch) optimiser steps over batches of at most
    ``batch`` molecules that together hold every training molecule once."""
    from setattn.domains.descriptors import descriptor_count
    from setattn.molprop.batching import PackedMolecules
    from setattn.molprop.featurize import featurize
    from setattn.molprop.model import MoleculeModel, MoleculeModelConfig

    smiles = ["CCO", "c1ccccc1O", "CC(=O)N", "CCCCl", "OCC(O)CO", "C1CCNCC1", "CC#N"]
    train = [featurize(s, descriptor_count()) for s in smiles]
    for i, d in enumerate(train):
        d.y = torch.tensor([[float(i)]])
    packed = PackedMolecules(train)
    seen = []
    cut = packed.batch
    monkeypatch.setattr(packed, "batch", lambda idx: seen.append(list(idx)) or cut(idx))
    torch.manual_seed(0)
    model = MoleculeModel(MoleculeModelConfig(descriptor_dim=descriptor_count()))
    steps = []
    monkeypatch.setattr(torch.optim.AdamW, "step", lambda self, *a, **k: steps.append(1))
    bound.epoch_fn(model, packed, train, batch)()
    assert len(steps) == -(-len(smiles) // batch) == len(seen)
    assert max(len(s) for s in seen) <= batch
    assert sorted(i for s in seen for i in s) == list(range(len(smiles)))
