"""MultiHeadAttention against torch.nn.MultiheadAttention, masks, empty sets, invariances."""

from __future__ import annotations

import pytest
import torch

import setattn
from setattn import scores
from setattn.nn import MultiHeadAttention
from setattn.topology import bipartite, complete, edges, ptr_from_sizes, window

TOL = 1e-5


def pad(x: torch.Tensor, sizes: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Flat (N, D) sets -> padded (G, L, D) and key_padding_mask (G, L), True = padding."""
    length = max(sizes)
    out = x.new_zeros(len(sizes), length, x.shape[1])
    pad_mask = torch.ones(len(sizes), length, dtype=torch.bool)
    start = 0
    for g, s in enumerate(sizes):
        out[g, :s] = x[start:start + s]
        pad_mask[g, :s] = False
        start += s
    return out, pad_mask


def unpad(y: torch.Tensor, sizes: list[int]) -> torch.Tensor:
    return torch.cat([y[g, :s] for g, s in enumerate(sizes)])


def randomize(module: torch.nn.Module) -> None:
    with torch.no_grad():
        for p in module.parameters():
            p.normal_(0.0, 0.3)


@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("sizes", [[3, 5, 7], [1, 11], [4]])
def test_self_attention_matches_torch(batch_first, bias, sizes):
    ref = torch.nn.MultiheadAttention(12, 3, bias=bias, batch_first=batch_first).eval()
    randomize(ref)
    mine = MultiHeadAttention.from_torch(ref).eval()
    x = torch.randn(sum(sizes), 12)
    xp, pad_mask = pad(x, sizes)
    inp = xp if batch_first else xp.transpose(0, 1)
    y, _ = ref(inp, inp, inp, key_padding_mask=pad_mask)
    y = y if batch_first else y.transpose(0, 1)
    out = mine(x, complete(ptr_from_sizes(sizes)))
    assert (out - unpad(y, sizes)).abs().max() <= TOL


@pytest.mark.parametrize("sizes_q,sizes_kv", [([3, 5, 7], [2, 6, 4]), ([2, 1], [9, 5])])
def test_cross_attention_kdim_vdim_matches_torch(sizes_q, sizes_kv):
    ref = torch.nn.MultiheadAttention(8, 2, kdim=5, vdim=7, batch_first=True).eval()
    randomize(ref)
    mine = MultiHeadAttention.from_torch(ref).eval()
    q, k, v = torch.randn(sum(sizes_q), 8), torch.randn(sum(sizes_kv), 5), torch.randn(
        sum(sizes_kv), 7)
    (qp, _), (kp, pad_mask), (vp, _) = pad(q, sizes_q), pad(k, sizes_kv), pad(v, sizes_kv)
    y, _ = ref(qp, kp, vp, key_padding_mask=pad_mask)
    out = mine(q, bipartite(ptr_from_sizes(sizes_q), ptr_from_sizes(sizes_kv)), k, v)
    assert (out - unpad(y, sizes_q)).abs().max() <= TOL


def test_causal_mask_matches_torch():
    n = 6
    ref = torch.nn.MultiheadAttention(8, 4, batch_first=True).eval()
    randomize(ref)
    mine = MultiHeadAttention.from_torch(ref).eval()
    x = torch.randn(n, 8)
    causal = torch.triu(torch.ones(n, n, dtype=torch.bool), 1)  # True = not allowed
    y, _ = ref(x[None], x[None], x[None], attn_mask=causal)
    top = complete([0, n])
    src, tgt = top.edge_index()
    out = mine(x, top, mask=src <= tgt)
    assert (out - y[0]).abs().max() <= TOL


def test_from_torch_rejects_extra_key_rows():
    with pytest.raises(NotImplementedError):
        MultiHeadAttention.from_torch(torch.nn.MultiheadAttention(8, 2, add_bias_kv=True))
    with pytest.raises(NotImplementedError):
        MultiHeadAttention.from_torch(torch.nn.MultiheadAttention(8, 2, add_zero_attn=True))


@pytest.mark.parametrize("score", [None, scores.Additive(2, 4, hidden=5),
                                   scores.Bilinear(2, 4), scores.GATv2(2, 4)])
def test_empty_sets_and_masked_rows_give_no_nan(score):
    mha = MultiHeadAttention(8, 2, score=score)
    sizes = [3, 0, 5, 0]
    x = torch.randn(8, 8, requires_grad=True)
    top = complete(ptr_from_sizes(sizes))
    src, tgt = top.edge_index()
    mask = tgt != 0  # node 0 sees nothing
    out = mha(x, top, mask=mask)
    assert torch.isfinite(out).all()
    # a query with nothing to attend to gets zeros before W_O, i.e. W_O's bias
    assert torch.allclose(out[0], mha.out_proj.bias, atol=1e-6)
    out.sum().backward()
    assert torch.isfinite(x.grad).all()


def test_fully_empty_key_side():
    mha = MultiHeadAttention(4, 1)
    q, k = torch.randn(3, 4), torch.randn(0, 4)
    out = mha(q, bipartite([0, 3], [0, 0]), k)
    assert torch.isfinite(out).all() and out.shape == (3, 4)


def test_self_attention_equivariant_within_sets():
    mha = MultiHeadAttention(6, 3).eval()
    sizes = [4, 7]
    x = torch.randn(11, 6)
    perm = torch.cat([torch.randperm(4), 4 + torch.randperm(7)])
    top = complete(ptr_from_sizes(sizes))
    assert (mha(x[perm], top) - mha(x, top)[perm]).abs().max() <= TOL


def test_dense_and_sparse_topologies_agree():
    """Self attention over complete(ptr) equals the same pairs given as an edge list,
    and a window topology equals its edge list too."""
    mha = MultiHeadAttention(6, 2).eval()
    x = torch.randn(9, 6)
    top = complete([0, 4, 9])
    sparse = edges(top.edge_index(), 9)
    assert (mha(x, top) - mha(x, sparse)).abs().max() <= TOL
    win = window([0, 4, 9], 1)
    assert (mha(x, win) - mha(x, edges(win.edge_index(), 9))).abs().max() <= TOL


def test_dropout_only_in_training_and_weights_clean():
    mha = MultiHeadAttention(8, 2, dropout=0.5)
    x = torch.randn(5, 8)
    top = complete([0, 5])
    mha.eval()
    a = mha(x, top)
    mha.train()
    b, graph = mha(x, top, return_weights=True)
    assert torch.isfinite(b).all() and not torch.allclose(a, b)
    sums = torch.zeros(5, 2).index_add_(0, graph.edge_index[1], graph.weights)
    assert torch.allclose(sums, torch.ones(5, 2), atol=1e-5)


def test_weights_captured():
    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.attn = MultiHeadAttention(4, 2)

        def forward(self, x, top):
            return self.attn(x, top)

    with setattn.capture() as att:
        Model()(torch.randn(5, 4), complete([0, 2, 5]))
    assert set(att) == {"attn"}
    assert att["attn"].weights.shape == (2 * 2 + 3 * 3, 2)
