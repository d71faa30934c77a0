"""GlobalAttentionPool (against PyG's AttentionalAggregation) and PMA."""

from __future__ import annotations

import pytest
import torch
from torch_geometric.nn import MLP
from torch_geometric.nn.aggr import AttentionalAggregation

from setattn import scores
from setattn.nn import PMA, GlobalAttentionPool
from setattn.topology import ptr_from_sizes

TOL = 1e-5
SIZES = [3, 0, 5, 1, 7]  # an empty graph in the middle


def batch_of(sizes: list[int]) -> torch.Tensor:
    return torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes))


def within_set_perm(sizes: list[int]) -> torch.Tensor:
    ptr = ptr_from_sizes(sizes)
    return torch.cat([ptr[g] + torch.randperm(s) for g, s in enumerate(sizes)])


@pytest.mark.parametrize("gate_out,value", [(1, None), (1, 6), (6, 6), (4, None)])
@pytest.mark.parametrize("seed", [0, 1])
def test_matches_pyg_attentional_aggregation(gate_out, value, seed):
    torch.manual_seed(seed)
    d = 4
    gate = torch.nn.Sequential(torch.nn.Linear(d, 8), torch.nn.ReLU(),
                               torch.nn.Linear(8, gate_out))
    nn = torch.nn.Linear(d, value) if value else None
    ref = AttentionalAggregation(gate, nn)
    mine = GlobalAttentionPool.from_pyg(ref)
    x = torch.randn(sum(SIZES), d) * 3
    batch = batch_of(SIZES)
    expect = ref(x, batch, dim_size=len(SIZES))
    out = mine(x, batch, num_graphs=len(SIZES))
    assert out.shape == expect.shape
    assert (out - expect).abs().max() <= TOL
    assert torch.equal(out[1], torch.zeros_like(out[1]))  # the empty graph
    # ptr instead of batch gives the same
    assert torch.equal(mine(x, ptr=ptr_from_sizes(SIZES)), out)


def test_matches_pyg_with_pyg_mlp():
    ref = AttentionalAggregation(MLP([4, 8, 1]), MLP([4, 8, 5]))
    ref.eval()
    mine = GlobalAttentionPool.from_pyg(ref).eval()
    x, batch = torch.randn(15, 4), batch_of([3, 5, 7])
    assert (mine(x, batch) - ref(x, batch)).abs().max() <= TOL


def test_from_pyg_copies():
    ref = AttentionalAggregation(torch.nn.Linear(4, 1))
    mine = GlobalAttentionPool.from_pyg(ref)
    assert mine.gate_nn is not ref.gate_nn


def make_pools() -> dict[str, torch.nn.Module]:
    return {
        "gate": GlobalAttentionPool(6, gate_nn=torch.nn.Linear(6, 2)),
        "query": GlobalAttentionPool(6, heads=3),
        "additive": GlobalAttentionPool(6, heads=2, key_dim=4,
                                        score=scores.Additive(2, 4, hidden=5)),
        "context": GlobalAttentionPool(6, heads=2, context_dim=5),
        "pma": PMA(6, heads=2, num_seeds=3),
    }


@pytest.mark.parametrize("name", list(make_pools()))
def test_pooling_permutation_invariant_and_empty_safe(name):
    pool = make_pools()[name].eval()
    x = torch.randn(sum(SIZES), 6, requires_grad=True)
    batch = batch_of(SIZES)
    kw = {"context": torch.randn(len(SIZES), 5)} if name == "context" else {}
    out = pool(x, batch, num_graphs=len(SIZES), **kw)
    perm = within_set_perm(SIZES)
    out_p = pool(x[perm], batch, num_graphs=len(SIZES), **kw)
    assert (out - out_p).abs().max() <= TOL
    assert out.shape[0] == len(SIZES)
    assert torch.isfinite(out).all()
    out.sum().backward()
    assert torch.isfinite(x.grad).all()


def test_batch_equals_graphs_one_by_one():
    pool = PMA(6, heads=2, num_seeds=2).eval()
    sizes = [3, 5, 7]
    x = torch.randn(15, 6)
    out = pool(x, batch_of(sizes))
    assert out.shape == (3, 2, 6)
    ptr = ptr_from_sizes(sizes)
    for g in range(3):
        single = pool(x[ptr[g]:ptr[g + 1]])
        assert (single[0] - out[g]).abs().max() <= TOL


def test_single_set_without_batch():
    pool = GlobalAttentionPool(6, heads=2)
    assert pool(torch.randn(4, 6)).shape == (1, 6)


def test_context_required():
    pool = GlobalAttentionPool(6, heads=2, context_dim=5)
    with pytest.raises(ValueError, match="context"):
        pool(torch.randn(4, 6))


def test_no_graphs_at_all():
    x = torch.randn(0, 6)
    assert GlobalAttentionPool(6, heads=2)(x, ptr=torch.tensor([0])).shape == (0, 6)
    assert PMA(6, heads=2, num_seeds=3)(x, ptr=torch.tensor([0])).shape == (0, 3, 6)


@pytest.mark.parametrize("score,scale", [(None, 0.5), (scores.ScaledDot(), 0.5),
                                         (scores.Dot(), 1.0), (scores.ScaledDot(0.3), 0.3)])
def test_a_learned_query_gives_the_projected_keys_pooling_and_gradients(score, scale):
    """The query folded into the key projection: the output and every gradient equal
    those of projecting the keys and scoring them against the query (float64)."""
    torch.manual_seed(4)
    pool = GlobalAttentionPool(8, heads=2, score=score).double()  # Dk 4: 1 / sqrt(4)
    x = torch.randn(sum(SIZES), 8, dtype=torch.float64, requires_grad=True)
    batch = batch_of(SIZES)
    out = pool(x, batch, num_graphs=len(SIZES))  # (G, 8)
    keys = pool.lin_k(x).view(-1, 2, 4)  # (N, H, Dk)
    logits = (keys * pool.query).sum(-1) * scale  # (N, H)
    expect = torch.zeros(len(SIZES), 2, 4, dtype=torch.float64)
    for g in range(len(SIZES)):
        rows = batch == g
        if rows.any():
            p = torch.softmax(logits[rows], 0)  # (n_g, H)
            expect[g] = (p[:, :, None] * x[rows].view(-1, 2, 4)).sum(0)
    expect = expect.flatten(1)  # (G, 8)
    assert torch.allclose(out, expect, atol=1e-12)
    weights = torch.randn_like(out)
    got = torch.autograd.grad((out * weights).sum(), [x, *pool.parameters()])
    want = torch.autograd.grad((expect * weights).sum(), [x, *pool.parameters()])
    for a, b in zip(got, want):
        assert torch.allclose(a, b, atol=1e-12)
    assert pool.query_logits(x) is not None  # the folded path ran


def test_a_score_that_is_no_dot_product_projects_the_keys():
    pool = GlobalAttentionPool(6, heads=2, key_dim=4, score=scores.Additive(2, 4, hidden=5))
    assert pool.query_logits(torch.randn(3, 6)) is None
