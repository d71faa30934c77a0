"""Symmetries, batching and edge cases of ``attend``, plus hypothesis-generated graphs.

* permuting the items of a set permutes the outputs (keys alone: outputs unchanged);
  relabelling the nodes of an edge list and shuffling its edges changes nothing else;
* a batch of sets equals its sets run one at a time;
* an empty set, a single item, a target with no edge, a fully masked row and logits of
  1e4 give finite, exact answers (zeros where there is nothing to attend to, never NaN).
"""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from reference import (
    DK,
    DV,
    EDGE_ATTR_WIDTH,
    HEADS,
    SCORES,
    SIZES,
    SIZES_KV,
    SIZES_Q,
    TOPOLOGIES,
    bipartite_edges,
    complete_edges,
    make_case,
    make_score,
    window_edges,
)
from reference import attend as ref_attend

from setattn import attend, bipartite, complete, edges, window
from setattn.topology import ptr_from_sizes

F64 = torch.float64
TIGHT = dict(rtol=1e-9, atol=1e-10)


def _qkv(nq, nk, dtype=F64, dq=DK, requires_grad=False):
    q = torch.randn(nq, HEADS, dq, dtype=dtype, requires_grad=requires_grad)
    k = torch.randn(nk, HEADS, dq, dtype=dtype, requires_grad=requires_grad)
    v = torch.randn(nk, HEADS, DV, dtype=dtype, requires_grad=requires_grad)
    return q, k, v


def _edge_attr(score_name, e, dtype=F64):
    if score_name not in EDGE_ATTR_WIDTH:
        return None
    width = EDGE_ATTR_WIDTH[score_name]
    return torch.randn(e, HEADS, dtype=dtype) if width is None else torch.randn(
        e, HEADS, width, dtype=dtype)


def _perm_within_sets(sizes, gen=None):
    ptr = ptr_from_sizes(sizes).tolist()
    return torch.cat([ptr[g] + torch.randperm(s, generator=gen)
                      for g, s in enumerate(sizes)] + [torch.zeros(0, dtype=torch.long)])


def _edge_lookup(src, tgt):
    """(j, i) -> canonical edge number."""
    return {(j, i): n for n, (j, i) in enumerate(zip(src, tgt, strict=True))}


# ---------------------------------------------------------------------------------------
# permutations


@pytest.mark.parametrize("return_weights", [False, True])
@pytest.mark.parametrize("score_name", list(SCORES))
def test_complete_is_permutation_equivariant(score_name, return_weights):
    """Per-edge inputs follow their (source, target) pair through the permutation."""
    score = make_score(score_name)
    top = complete(ptr_from_sizes(SIZES))
    src, tgt = complete_edges(SIZES)
    n, e = top.num_q, top.num_edges
    q, k, v = _qkv(n, n)
    bias, mask = torch.randn(e, HEADS, dtype=F64), torch.rand(e) > 0.3
    edge_attr = _edge_attr(score_name, e)
    perm = _perm_within_sets(SIZES)  # new node a is old node perm[a]
    # edge (j, i) of the permuted batch is edge (perm[j], perm[i]) of the original
    lookup = _edge_lookup(src, tgt)
    eperm = torch.tensor([lookup[(int(perm[j]), int(perm[i]))] for j, i in zip(src, tgt)])

    def run(q, k, v, bias, mask, edge_attr):
        res = attend(q, k, v, top, score, bias=bias, mask=mask, edge_attr=edge_attr,
                     return_weights=return_weights)
        return res if return_weights else (res, None)

    out, graph = run(q, k, v, bias, mask, edge_attr)
    out_p, graph_p = run(q[perm], k[perm], v[perm], bias[eperm], mask[eperm],
                         None if edge_attr is None else edge_attr[eperm])
    assert not torch.allclose(out_p, out)  # the permutation did move things
    torch.testing.assert_close(out_p, out[perm], **TIGHT)
    if return_weights:
        torch.testing.assert_close(graph_p.weights, graph.weights[eperm], **TIGHT)


@pytest.mark.parametrize("return_weights", [False, True])
@pytest.mark.parametrize("score_name", ["scaled_dot", "additive", "gatv2"])
def test_bipartite_keys_permutation_invariant_queries_equivariant(score_name, return_weights):
    score = make_score(score_name)
    top = bipartite(ptr_from_sizes(SIZES_Q), ptr_from_sizes(SIZES_KV))
    q, k, v = _qkv(top.num_q, top.num_kv)
    pq, pk = _perm_within_sets(SIZES_Q), _perm_within_sets(SIZES_KV)

    def run(q, k, v):
        res = attend(q, k, v, top, score, return_weights=return_weights)
        return res[0] if return_weights else res

    out = run(q, k, v)
    torch.testing.assert_close(run(q, k[pk], v[pk]), out, **TIGHT)
    torch.testing.assert_close(run(q[pq], k, v), out[pq], **TIGHT)


@pytest.mark.parametrize("score_name", list(SCORES))
def test_edges_relabel_nodes_and_shuffle_edges(score_name):
    score = make_score(score_name)
    case = make_case("edges")
    src, tgt = torch.tensor(case.src), torch.tensor(case.tgt)
    e = case.num_edges
    q, k, v = _qkv(case.num_q, case.num_kv)
    bias, mask = torch.randn(e, dtype=F64), torch.rand(e, HEADS) > 0.3
    edge_attr = _edge_attr(score_name, e)
    out, graph = attend(q, k, v, case.topology, score, bias=bias, mask=mask,
                        edge_attr=edge_attr, return_weights=True)

    perm_q, perm_k = torch.randperm(case.num_q), torch.randperm(case.num_kv)
    inv_q, inv_k = torch.argsort(perm_q), torch.argsort(perm_k)  # old label -> new label
    order = torch.randperm(e)  # new edge n is old edge order[n]
    index = torch.stack([inv_k[src[order]], inv_q[tgt[order]]])
    out_p, graph_p = attend(q[perm_q], k[perm_k], v[perm_k], edges(index, (case.num_kv,
                            case.num_q)), score, bias=bias[order], mask=mask[order],
                            edge_attr=None if edge_attr is None else edge_attr[order],
                            return_weights=True)
    torch.testing.assert_close(out_p, out[perm_q], **TIGHT)
    torch.testing.assert_close(graph_p.weights, graph.weights[order], **TIGHT)


@pytest.mark.parametrize("return_weights", [False, True])
@pytest.mark.parametrize("score_name", ["scaled_dot", "additive", "gat"])
def test_window_reversed_sequences(score_name, return_weights):
    """A window is symmetric: reversing every sequence reverses the outputs."""
    score = make_score(score_name)
    top = window(ptr_from_sizes(SIZES), 2)
    src, tgt = window_edges(SIZES, 2)
    n = top.num_q
    q, k, v = _qkv(n, n)
    bias = torch.randn(top.num_edges, HEADS, dtype=F64)
    ptr = ptr_from_sizes(SIZES).tolist()
    rev = torch.cat([torch.arange(ptr[g + 1] - 1, ptr[g] - 1, -1) for g in range(len(SIZES))])
    lookup = _edge_lookup(src, tgt)
    eperm = torch.tensor([lookup[(int(rev[j]), int(rev[i]))] for j, i in zip(src, tgt)])

    def run(q, k, v, bias):
        res = attend(q, k, v, top, score, bias=bias, return_weights=return_weights)
        return res[0] if return_weights else res

    torch.testing.assert_close(run(q[rev], k[rev], v[rev], bias[eperm]),
                               run(q, k, v, bias)[rev], **TIGHT)


# ---------------------------------------------------------------------------------------
# batching


def _split_sets(kind):
    """Per set: (topology alone, query rows, key rows, canonical edge rows), and the batch."""
    if kind == "edges":
        gen = torch.Generator().manual_seed(1)
        parts, offs = [], [0, 0, 0]  # query offset, key offset, edge offset
        all_src, all_tgt = [], []
        for nq, nk, ne in [(3, 5, 9), (0, 2, 0), (7, 4, 13), (2, 1, 3)]:
            s = torch.randint(0, nk, (ne,), generator=gen)
            t = torch.randint(0, nq, (ne,), generator=gen) if nq else s[:0]
            parts.append((edges(torch.stack([s, t]), (nk, nq)),
                          slice(offs[0], offs[0] + nq), slice(offs[1], offs[1] + nk),
                          slice(offs[2], offs[2] + ne)))
            all_src.append(s + offs[1])
            all_tgt.append(t + offs[0])
            offs = [offs[0] + nq, offs[1] + nk, offs[2] + ne]
        batch = edges(torch.stack([torch.cat(all_src), torch.cat(all_tgt)]), (offs[1], offs[0]))
        return batch, parts
    sq = SIZES_Q if kind == "bipartite" else SIZES
    sk = SIZES_KV if kind == "bipartite" else SIZES
    if kind == "complete":
        batch = complete(ptr_from_sizes(sq))
        singles = [complete([0, a]) for a in sq]
    elif kind == "bipartite":
        batch = bipartite(ptr_from_sizes(sq), ptr_from_sizes(sk))
        singles = [bipartite([0, a], [0, b]) for a, b in zip(sq, sk, strict=True)]
    else:
        batch = window(ptr_from_sizes(sq), 2)
        singles = [window([0, a], 2) for a in sq]
    per_set = [len(window_edges([a], 2)[0]) if kind == "window" else a * b
               for a, b in zip(sq, sk, strict=True)]  # edges of each set, counted apart
    pq, pk, pe = (ptr_from_sizes(x).tolist() for x in (sq, sk, per_set))
    parts = [(top, slice(pq[g], pq[g + 1]), slice(pk[g], pk[g + 1]), slice(pe[g], pe[g + 1]))
             for g, top in enumerate(singles)]
    return batch, parts


@pytest.mark.parametrize("return_weights", [False, True])
@pytest.mark.parametrize("score_name", ["dot", "bilinear", "additive", "gat", "user"])
@pytest.mark.parametrize("kind", TOPOLOGIES)
def test_batch_equals_sets_one_by_one(kind, score_name, return_weights):
    score = make_score(score_name)
    batch, parts = _split_sets(kind)
    q, k, v = _qkv(batch.num_q, batch.num_kv)
    e = batch.num_edges
    extras = dict(bias=torch.randn(e, HEADS, dtype=F64), mask=torch.rand(e) > 0.2,
                  edge_attr=_edge_attr(score_name, e))

    def run(top, q, k, v, rows):
        kw = {name: None if t is None else t[rows] for name, t in extras.items()}
        res = attend(q, k, v, top, score, return_weights=return_weights, **kw)
        return res if return_weights else (res, None)

    out, graph = run(batch, q, k, v, slice(None))
    for top, rq, rk, re in parts:
        out_g, graph_g = run(top, q[rq], k[rk], v[rk], re)
        torch.testing.assert_close(out[rq], out_g, **TIGHT)
        if return_weights:
            torch.testing.assert_close(graph.weights[re], graph_g.weights, **TIGHT)


# ---------------------------------------------------------------------------------------
# edge cases


@pytest.mark.parametrize("return_weights", [False, True])
@pytest.mark.parametrize("score_name", ["scaled_dot", "additive"])
@pytest.mark.parametrize("kind", ["complete", "bipartite", "window", "edges"])
def test_all_sets_empty(kind, score_name, return_weights):
    """No query, or queries with no key at all: right shapes, zeros, zero gradients."""
    top = {
        "complete": complete([0, 0, 0]),
        "bipartite": bipartite([0, 2, 5], [0, 0, 0]),  # queries, but no key anywhere
        "window": window([0, 0], 3),
        "edges": edges(torch.zeros(2, 0, dtype=torch.long), (0, 4)),
    }[kind]
    q, k, v = _qkv(top.num_q, top.num_kv, requires_grad=True)
    res = attend(q, k, v, top, make_score(score_name), return_weights=return_weights)
    out = res[0] if return_weights else res
    assert out.shape == (top.num_q, HEADS, DV)
    assert not out.any()
    if return_weights:
        assert res[1].weights.shape == (0, HEADS)
        assert res[1].edge_index.shape == (2, 0)
    out.sum().backward()
    assert q.grad is None or not q.grad.any()


@pytest.mark.parametrize("return_weights", [False, True])
@pytest.mark.parametrize("score_name", list(SCORES))
@pytest.mark.parametrize("kind", ["complete", "bipartite", "window", "edges"])
def test_single_item_gets_its_only_value(kind, score_name, return_weights):
    top = {
        "complete": complete([0, 1]),
        "bipartite": bipartite([0, 3], [0, 1]),  # three queries, one key
        "window": window([0, 1], 2),
        "edges": edges(torch.tensor([[0, 0, 0], [0, 1, 2]]), (1, 3)),
    }[kind]
    q, k, v = _qkv(top.num_q, top.num_kv, requires_grad=True)
    res = attend(q, k, v, top, make_score(score_name), return_weights=return_weights)
    out = res[0] if return_weights else res
    torch.testing.assert_close(out, v.expand(top.num_q, -1, -1), **TIGHT)
    if return_weights:
        torch.testing.assert_close(res[1].weights, torch.ones(top.num_q, HEADS, dtype=F64))
    out.sum().backward()
    assert not q.grad.any()  # a softmax over one key does not depend on the score


@pytest.mark.parametrize("score_name", ["scaled_dot", "additive", "gat"])
def test_node_without_incoming_edge(score_name):
    # targets 1 and 4 receive nothing; source 3 sends nothing
    index = torch.tensor([[0, 2, 1, 0, 2], [0, 0, 2, 3, 3]])
    top = edges(index, (4, 5))
    q, k, v = _qkv(5, 4, requires_grad=True)
    out, graph = attend(q, k, v, top, make_score(score_name), return_weights=True)
    assert not out[[1, 4]].any()
    assert out[[0, 2, 3]].abs().sum(-1).gt(0).all()
    torch.testing.assert_close(out[2], v[1])
    out.pow(2).sum().backward()
    for t in (q, k, v):
        assert torch.isfinite(t.grad).all()
    assert not q.grad[[1, 4]].any() and not k.grad[3].any() and not v.grad[3].any()


@pytest.mark.parametrize("score_name", ["scaled_dot", "additive"])
def test_multigraph_with_more_edges_than_node_pairs(score_name):
    """Repeated edges are separate edges, even when they outnumber the node pairs."""
    src, tgt = [0, 0, 1, 0, 1, 1, 0], [0, 0, 0, 1, 1, 1, 1]  # 7 edges over 2 x 2 pairs
    score = make_score(score_name)
    q, k, v = _qkv(2, 2, requires_grad=True)
    out, graph = attend(q, k, v, edges(torch.tensor([src, tgt]), 2), score,
                        return_weights=True)
    want, want_w = ref_attend(q, k, v, src, tgt, score)
    torch.testing.assert_close(out, want, **TIGHT)
    torch.testing.assert_close(graph.weights, want_w, **TIGHT)
    upstream = torch.randn_like(out)
    for a, b in zip(torch.autograd.grad(out, (q, k, v), upstream),
                    torch.autograd.grad(want, (q, k, v), upstream), strict=True):
        torch.testing.assert_close(a, b, **TIGHT)


@pytest.mark.parametrize("return_weights", [False, True])
@pytest.mark.parametrize("score_name", ["scaled_dot", "bilinear", "additive", "gat"])
@pytest.mark.parametrize("topology", TOPOLOGIES)
def test_fully_masked_rows_give_zeros_and_finite_gradients(topology, score_name,
                                                           return_weights):
    case = make_case(topology)
    q, k, v = _qkv(case.num_q, case.num_kv, requires_grad=True)
    # every edge of every even target is masked in every head; odd targets keep theirs
    mask = torch.tensor([t % 2 == 1 for t in case.tgt])
    score = make_score(score_name)
    res = attend(q, k, v, case.topology, score, mask=mask,
                 return_weights=return_weights)
    out = res[0] if return_weights else res
    assert torch.isfinite(out).all()
    assert not out[0::2].any()
    # masking an edge is removing it
    kept = mask.nonzero().flatten()
    index = torch.tensor([case.src, case.tgt])[:, kept]
    want = attend(q, k, v, edges(index, (case.num_kv, case.num_q)), score)
    torch.testing.assert_close(out, want, **TIGHT)
    if return_weights:
        assert not res[1].weights[~mask].any()
    out.pow(2).sum().backward()
    for t in (q, k, v):
        assert torch.isfinite(t.grad).all()
    assert not q.grad[0::2].any()


@pytest.mark.parametrize("return_weights", [False, True])
@pytest.mark.parametrize("score_name", ["scaled_dot", "dot", "additive"])
@pytest.mark.parametrize("topology", TOPOLOGIES)
def test_logits_of_1e4_stay_finite(topology, score_name, return_weights):
    """float32, huge logits: the softmax is one-hot on the largest, never inf or NaN."""
    case = make_case(topology)
    q, k, v = _qkv(case.num_q, case.num_kv, dtype=torch.float32, requires_grad=True)
    score = make_score(score_name, dtype=torch.float32)
    # per target, the first edge gets +1e4, every other edge of it -1e4 (+ noise)
    first = {}
    for n, t in enumerate(case.tgt):
        first.setdefault(t, n)
    winner = torch.tensor([first[t] == n for n, t in enumerate(case.tgt)])
    bias = torch.where(winner, 1e4, -1e4) + torch.randn(case.num_edges)
    res = attend(q, k, v, case.topology, score, bias=bias, return_weights=return_weights)
    out = res[0] if return_weights else res
    want = torch.zeros_like(out)
    for t, n in first.items():
        want[t] = v[case.src[n]]
    torch.testing.assert_close(out, want)
    out.pow(2).sum().backward()
    for t in (q, k, v):
        assert torch.isfinite(t.grad).all()

    # a common shift of 1e4 on every logit changes nothing (beyond float32 rounding of
    # logits near 1e4, about 1e-3)
    plain = attend(q.detach(), k.detach(), v.detach(), case.topology, score)
    shifted = attend(q.detach(), k.detach(), v.detach(), case.topology, score,
                     bias=torch.full((case.num_edges,), 1e4))
    assert torch.isfinite(shifted).all()
    torch.testing.assert_close(shifted, plain, rtol=0, atol=1e-2)


# ---------------------------------------------------------------------------------------
# hypothesis: random graphs and sizes against the reference

SCORE_NAMES = st.sampled_from(sorted(SCORES))


@settings(max_examples=50, deadline=None)
@given(
    num_q=st.integers(0, 7),
    num_kv=st.integers(1, 8),
    n_edges=st.integers(0, 30),
    score_name=SCORE_NAMES,
    per_head=st.booleans(),
    seed=st.integers(0, 2**31 - 1),
)
def test_random_graphs_match_reference(num_q, num_kv, n_edges, score_name, per_head, seed):
    gen = torch.Generator().manual_seed(seed)
    n_edges = n_edges if num_q else 0
    src = torch.randint(0, num_kv, (n_edges,), generator=gen)
    tgt = torch.randint(0, max(num_q, 1), (n_edges,), generator=gen)
    torch.manual_seed(seed)
    score = make_score(score_name)
    q, k, v = _qkv(num_q, num_kv, requires_grad=True)
    bias = torch.randn(n_edges, HEADS, dtype=F64) if per_head else torch.randn(n_edges,
                                                                                dtype=F64)
    mask = torch.rand(n_edges, HEADS, generator=gen) > 0.25
    mask = mask if per_head else mask[:, 0]
    top = edges(torch.stack([src, tgt]), (num_kv, num_q))
    out, graph = attend(q, k, v, top, score, bias=bias, mask=mask, return_weights=True)
    want, want_w = ref_attend(q, k, v, src, tgt, score, bias=bias, mask=mask)
    torch.testing.assert_close(out, want, **TIGHT)
    torch.testing.assert_close(graph.weights, want_w, **TIGHT)
    upstream = torch.randn_like(out)
    got = torch.autograd.grad(out, (q, k, v), upstream, allow_unused=True)
    ref = (torch.autograd.grad(want, (q, k, v), upstream, allow_unused=True)
           if want.requires_grad else (None, None, None))  # no edge: nothing to differentiate
    for a, b in zip(got, ref, strict=True):
        if b is None:
            assert a is None or not a.any()
        else:
            torch.testing.assert_close(a, b, **TIGHT)


@settings(max_examples=50, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 9), min_size=0, max_size=6),
    sizes_kv_seed=st.integers(0, 2**31 - 1),
    kind=st.sampled_from(["complete", "bipartite", "window"]),
    radius=st.integers(0, 4),
    score_name=SCORE_NAMES,
    return_weights=st.booleans(),
)
def test_random_set_sizes_match_reference(sizes, sizes_kv_seed, kind, radius, score_name,
                                          return_weights):
    gen = torch.Generator().manual_seed(sizes_kv_seed)
    torch.manual_seed(sizes_kv_seed)
    if kind == "complete":
        top, (src, tgt) = complete(ptr_from_sizes(sizes)), complete_edges(sizes)
        nq = nk = sum(sizes)
    elif kind == "bipartite":
        sizes_kv = torch.randint(0, 10, (len(sizes),), generator=gen).tolist()
        top = bipartite(ptr_from_sizes(sizes), ptr_from_sizes(sizes_kv))
        src, tgt = bipartite_edges(sizes, sizes_kv)
        nq, nk = sum(sizes), sum(sizes_kv)
    else:
        top, (src, tgt) = window(ptr_from_sizes(sizes), radius), window_edges(sizes, radius)
        nq = nk = sum(sizes)
    assert top.edge_index().tolist() == [src, tgt]
    score = make_score(score_name)
    q, k, v = _qkv(nq, nk)
    e = len(src)
    bias, mask = torch.randn(e, HEADS, dtype=F64), torch.rand(e, generator=gen) > 0.2
    res = attend(q, k, v, top, score, bias=bias, mask=mask, return_weights=return_weights)
    want, want_w = ref_attend(q, k, v, src, tgt, score, bias=bias, mask=mask)
    out = res[0] if return_weights else res
    torch.testing.assert_close(out, want, **TIGHT)
    if return_weights:
        torch.testing.assert_close(res[1].weights, want_w, **TIGHT)
    sparse = attend(q, k, v, edges(torch.tensor([src, tgt], dtype=torch.long).reshape(2, -1),
                                   (nk, nq)), score, bias=bias, mask=mask)
    torch.testing.assert_close(sparse, out, **TIGHT)
