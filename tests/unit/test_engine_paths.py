"""The engine's paths give the same numbers.

* dense (complete / bipartite / window blocks) == sparse (the same graph as an edge list),
  to 1e-5 in float32;
* inside the dense set path: the scaled_dot_product_attention path (dot-type score, no
  weights requested) == the explicit path (weights requested), on ragged batches that
  fall into several size buckets and on a uniform batch (no padding at all).
"""

import pytest
import torch
import torch.nn.functional as F
from reference import (
    DK,
    DOT_SCORES,
    DV,
    EDGE_ATTR_WIDTH,
    HEADS,
    SCORES,
    bipartite_edges,
    complete_edges,
    make_score,
    window_edges,
)
from reference import attend as ref_attend

from setattn import attend, bipartite, complete, edges, ptr_from_batch, window
from setattn.engine import EnginePath, plan
from setattn.topology import ptr_from_sizes

F32 = dict(rtol=0.0, atol=1e-5)


def _ragged_sizes(n_sets=10, seed=3):
    gen = torch.Generator().manual_seed(seed)
    sizes = torch.randint(1, 41, (n_sets,), generator=gen).tolist()
    sizes.insert(4, 0)  # an empty set in the middle
    return sizes


RAGGED = _ragged_sizes()
RAGGED_KV = _ragged_sizes(seed=4)
UNIFORM = [6] * 5


def _dense_topology(kind, sizes, sizes_kv):
    if kind == "complete":
        return complete(ptr_from_sizes(sizes)), complete_edges(sizes)
    if kind == "bipartite":
        return (bipartite(ptr_from_sizes(sizes), ptr_from_sizes(sizes_kv)),
                bipartite_edges(sizes, sizes_kv))
    return window(ptr_from_sizes(sizes), 3), window_edges(sizes, 3)


def _qkv(nq, nk, dtype=torch.float32, requires_grad=False):
    q = torch.randn(nq, HEADS, DK, dtype=dtype, requires_grad=requires_grad)
    k = torch.randn(nk, HEADS, DK, dtype=dtype, requires_grad=requires_grad)
    v = torch.randn(nk, HEADS, DV, dtype=dtype, requires_grad=requires_grad)
    return q, k, v


class SdpaSpy:
    """Counts calls of F.scaled_dot_product_attention while passing them through."""

    def __init__(self, monkeypatch):
        self.calls = 0
        self._real = F.scaled_dot_product_attention
        monkeypatch.setattr(F, "scaled_dot_product_attention", self)

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self._real(*args, **kwargs)


@pytest.mark.parametrize("kind", ["complete", "bipartite", "window"])
@pytest.mark.parametrize("score_name", list(SCORES))
def test_dense_equals_sparse_float32(score_name, kind):
    top, (src, tgt) = _dense_topology(kind, RAGGED, RAGGED_KV)
    sparse = edges(top.edge_index(), (top.num_kv, top.num_q))
    assert sparse.edge_index().tolist() == [src, tgt]
    score = make_score(score_name, dtype=torch.float32)
    q, k, v = _qkv(top.num_q, top.num_kv, requires_grad=True)
    e = top.num_edges
    bias = torch.randn(e, HEADS)
    mask = torch.rand(e) > 0.2
    width = EDGE_ATTR_WIDTH.get(score_name, 0)
    edge_attr = None
    if width != 0:
        edge_attr = torch.randn(e, HEADS) if width is None else torch.randn(e, HEADS, width)

    kw = dict(bias=bias, mask=mask, edge_attr=edge_attr)
    want, want_graph = attend(q, k, v, sparse, score, return_weights=True, **kw)
    upstream = torch.randn_like(want)
    want_grads = torch.autograd.grad(want, (q, k, v), upstream)
    path, default = None, plan(q, k, v, top, score, **kw)
    if kind == "window":  # eager CPU runs send windows to the sparse paths: force the blocks
        assert default not in (EnginePath.WINDOW_BLOCKS, EnginePath.DENSE_SDPA,
                               EnginePath.DENSE_BLOCKS)
        path = EnginePath.WINDOW_BLOCKS
    else:
        assert default in (EnginePath.DENSE_SDPA, EnginePath.DENSE_BLOCKS)
    for return_weights in (False, True):
        res = attend(q, k, v, top, score, return_weights=return_weights, path=path, **kw)
        got = res[0] if return_weights else res
        torch.testing.assert_close(got, want, **F32)
        for g, w in zip(torch.autograd.grad(got, (q, k, v), upstream), want_grads, strict=True):
            torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)
        if return_weights:
            assert torch.equal(res[1].edge_index, want_graph.edge_index)
            torch.testing.assert_close(res[1].weights, want_graph.weights, **F32)


def _set_extras(extras, e, first_row):
    kw = {}
    if "bias" in extras:
        kw["bias"] = torch.randn(e, dtype=torch.float64)
    if "mask" in extras:
        kw["mask"] = torch.rand(e, HEADS) > 0.4
        kw["mask"][:first_row, 1] = False  # the first query sees nothing in head 1
    return kw


@pytest.mark.parametrize("extras", ["plain", "bias", "mask_per_head", "bias_and_mask"])
@pytest.mark.parametrize("batch", ["ragged", "uniform"])
@pytest.mark.parametrize("kind", ["complete", "bipartite"])
@pytest.mark.parametrize("score_name", DOT_SCORES)
def test_sdpa_path_equals_explicit_path(score_name, kind, batch, extras, monkeypatch):
    sizes, sizes_kv = (RAGGED, RAGGED_KV) if batch == "ragged" else (UNIFORM, [9] * 5)
    top, _ = _dense_topology(kind, sizes, sizes_kv)
    score = make_score(score_name)
    q, k, v = _qkv(top.num_q, top.num_kv, dtype=torch.float64, requires_grad=True)
    first_row = sizes[0] if kind == "complete" else sizes_kv[0]
    kw = _set_extras(extras, top.num_edges, first_row)

    spy = SdpaSpy(monkeypatch)
    fast = attend(q, k, v, top, score, **kw)
    n_fast = spy.calls
    slow, graph = attend(q, k, v, top, score, return_weights=True, **kw)
    assert n_fast >= (2 if batch == "ragged" else 1), "the fast path was not taken"
    assert spy.calls == n_fast, "weights were requested: the explicit path must run"

    tol = dict(rtol=1e-9, atol=1e-10)
    torch.testing.assert_close(fast, slow, **tol)
    upstream = torch.randn_like(fast)
    g_fast = torch.autograd.grad(fast, (q, k, v), upstream)
    g_slow = torch.autograd.grad(slow, (q, k, v), upstream)
    for a, b in zip(g_fast, g_slow, strict=True):
        torch.testing.assert_close(a, b, **tol)
    if "mask" in extras:
        assert not fast[0, 1].any() and not graph.weights[:first_row, 1].any()


@pytest.mark.parametrize("score_name", ["scaled_dot", "additive"])
@pytest.mark.parametrize("batch", ["ragged", "uniform"])
@pytest.mark.parametrize("kind", ["complete", "bipartite"])
def test_set_batches_match_reference(kind, batch, score_name):
    """Ragged sizes 1..40 (several buckets, padding) and a uniform batch (no padding)."""
    sizes, sizes_kv = (RAGGED, RAGGED_KV) if batch == "ragged" else (UNIFORM, [9] * 5)
    top, (src, tgt) = _dense_topology(kind, sizes, sizes_kv)
    score = make_score(score_name)
    q, k, v = _qkv(top.num_q, top.num_kv, dtype=torch.float64, requires_grad=True)
    first_row = sizes[0] if kind == "complete" else sizes_kv[0]
    kw = _set_extras("bias_and_mask", top.num_edges, first_row)
    ref_out, ref_w = ref_attend(q, k, v, src, tgt, score, **kw)
    upstream = torch.randn_like(ref_out)
    ref_grads = torch.autograd.grad(ref_out, (q, k, v), upstream)
    tol = dict(rtol=1e-9, atol=1e-10)
    for return_weights in (False, True):
        res = attend(q, k, v, top, score, return_weights=return_weights, **kw)
        out = res[0] if return_weights else res
        torch.testing.assert_close(out, ref_out, **tol)
        for g, w in zip(torch.autograd.grad(out, (q, k, v), upstream), ref_grads, strict=True):
            torch.testing.assert_close(g, w, **tol)
        if return_weights:
            torch.testing.assert_close(res[1].weights, ref_w, **tol)


@pytest.mark.parametrize("batch", ["ragged", "uniform"])
def test_sdpa_path_equals_explicit_path_float32(batch):
    sizes = RAGGED if batch == "ragged" else UNIFORM
    top = complete(ptr_from_sizes(sizes))
    q, k, v = _qkv(top.num_q, top.num_kv)
    fast = attend(q, k, v, top)
    slow, _ = attend(q, k, v, top, return_weights=True)
    torch.testing.assert_close(fast, slow, **F32)


def test_pyg_batch_vector_gives_the_same_sets():
    sizes = [3, 5, 7]
    batch = torch.repeat_interleave(torch.arange(3), torch.tensor(sizes))
    q, k, v = _qkv(15, 15, dtype=torch.float64)
    out = attend(q, k, v, complete(ptr_from_batch(batch)))
    want, _ = ref_attend(q, k, v, *complete_edges(sizes), make_score("scaled_dot"))
    torch.testing.assert_close(out, want)
