"""Options of ``attend``: hard attention, dropout, returned weights, a user's score,
window radii, and the errors a wrong call gets."""

import pytest
import torch
from reference import (
    DK,
    DV,
    HEADS,
    SIZES,
    TOPOLOGIES,
    UserScore,
    complete_edges,
    dense_weights,
    make_case,
    make_score,
)
from reference import attend as ref_attend

from setattn import AttentionGraph, attend, bipartite, complete, edges, window
from setattn import scores as S
from setattn.topology import ptr_from_sizes

F64 = torch.float64
TIGHT = dict(rtol=1e-9, atol=1e-10)


def _qkv(nq, nk, dtype=F64, requires_grad=False):
    q = torch.randn(nq, HEADS, DK, dtype=dtype, requires_grad=requires_grad)
    k = torch.randn(nk, HEADS, DK, dtype=dtype, requires_grad=requires_grad)
    v = torch.randn(nk, HEADS, DV, dtype=dtype, requires_grad=requires_grad)
    return q, k, v


def _out(res):
    return res[0] if isinstance(res, tuple) else res


# ---------------------------------------------------------------------------------------
# hard attention


@pytest.mark.parametrize("return_weights", [False, True])
@pytest.mark.parametrize("hard", ["argmax", 2, 3])
@pytest.mark.parametrize("score_name", ["scaled_dot", "additive"])
@pytest.mark.parametrize("topology", TOPOLOGIES)
def test_hard_attention_values(topology, score_name, hard, return_weights):
    case = make_case(topology)
    score = make_score(score_name)
    q, k, v = _qkv(case.num_q, case.num_kv)
    mask = torch.rand(case.num_edges, HEADS) > 0.3  # some targets keep fewer than k edges
    k_top = 1 if hard == "argmax" else hard
    res = attend(q, k, v, case.topology, score, mask=mask, hard=hard,
                 return_weights=return_weights)
    want, want_w = ref_attend(q, k, v, case.src, case.tgt, score, mask=mask, hard=k_top)
    torch.testing.assert_close(_out(res), want, **TIGHT)
    if return_weights:
        w = res[1].weights
        torch.testing.assert_close(w, want_w, **TIGHT)
        per_target = torch.zeros(case.num_q, HEADS, dtype=torch.long).index_add_(
            0, torch.tensor(case.tgt), (w > 0).long())
        assert int(per_target.max()) == k_top  # k weights kept where k edges are alive


@pytest.mark.parametrize("hard", ["argmax", 2])
@pytest.mark.parametrize("score_name", ["scaled_dot", "additive", "gat"])
@pytest.mark.parametrize("topology", TOPOLOGIES)
def test_hard_attention_straight_through_gradient(topology, score_name, hard):
    """Forward is hard; the gradient reaching the logits (so q, k, bias and the score's
    parameters) is the soft attention's, while v is weighted by the hard weights."""
    case = make_case(topology)
    score = make_score(score_name)
    q, k, v = _qkv(case.num_q, case.num_kv, requires_grad=True)
    bias = torch.randn(case.num_edges, HEADS, dtype=F64, requires_grad=True)
    logit_leaves = [q, k, bias, *score.parameters()]
    hard_out = attend(q, k, v, case.topology, score, bias=bias, hard=hard)
    soft_out = attend(q, k, v, case.topology, score, bias=bias)
    upstream = torch.randn_like(soft_out)
    g_hard = torch.autograd.grad(hard_out, logit_leaves + [v], upstream)
    g_soft = torch.autograd.grad(soft_out, logit_leaves, upstream)
    for a, b in zip(g_hard[:-1], g_soft, strict=True):
        torch.testing.assert_close(a, b, **TIGHT)
    assert any(g.abs().sum() > 0 for g in g_hard[:-1])  # the logits do get a gradient

    k_top = 1 if hard == "argmax" else hard
    want, _ = ref_attend(q, k, v, case.src, case.tgt, score, bias=bias, hard=k_top)
    torch.testing.assert_close(hard_out, want, **TIGHT)
    (g_v_ref,) = torch.autograd.grad(want, [v], upstream)
    torch.testing.assert_close(g_hard[-1], g_v_ref, **TIGHT)


@pytest.mark.parametrize("topology", TOPOLOGIES)
def test_hard_with_k_beyond_every_degree_is_soft(topology):
    case = make_case(topology)
    q, k, v = _qkv(case.num_q, case.num_kv)
    soft = attend(q, k, v, case.topology)
    torch.testing.assert_close(attend(q, k, v, case.topology, hard=1000), soft, **TIGHT)


@pytest.mark.parametrize("hard", [0, -1, True, "max", 1.5])
def test_hard_rejects_bad_values(hard):
    q, k, v = _qkv(3, 3)
    with pytest.raises(ValueError, match="hard"):
        attend(q, k, v, complete([0, 3]), hard=hard)


# ---------------------------------------------------------------------------------------
# dropout


@pytest.mark.parametrize("score_name", ["scaled_dot", "additive"])
@pytest.mark.parametrize("topology", TOPOLOGIES)
def test_dropout_changes_output_not_weights(topology, score_name):
    case = make_case(topology)
    score = make_score(score_name)
    q, k, v = _qkv(case.num_q, case.num_kv)
    clean, clean_graph = attend(q, k, v, case.topology, score, return_weights=True)

    # training=False: dropout off, deterministic, on both paths
    for return_weights in (False, True):
        evals = [_out(attend(q, k, v, case.topology, score, dropout=0.5, training=False,
                             return_weights=return_weights)) for _ in range(2)]
        assert torch.equal(evals[0], evals[1])
        torch.testing.assert_close(evals[0], clean, **TIGHT)

    # training=True: the output moves, the returned weights do not
    fast = attend(q, k, v, case.topology, score, dropout=0.5, training=True)
    assert not torch.allclose(fast, clean)
    dropped, graph = attend(q, k, v, case.topology, score, dropout=0.5, training=True,
                            return_weights=True)
    assert not torch.allclose(dropped, clean)
    torch.testing.assert_close(graph.weights, clean_graph.weights, **TIGHT)


@pytest.mark.parametrize("return_weights", [False, True])
@pytest.mark.parametrize("kind", ["complete", "bipartite", "window", "edges"])
def test_dropout_drops_whole_weights_and_rescales(kind, return_weights):
    """With one edge per target (weight 1), each output row is 0 or v / (1 - p)."""
    n, p = 40, 0.25
    top = {
        "complete": complete(torch.arange(n + 1)),  # n sets of one item
        "bipartite": bipartite(torch.arange(n + 1), torch.arange(n + 1)),
        "window": window([0, n], 0),
        "edges": edges(torch.stack([torch.arange(n), torch.arange(n)]), n),
    }[kind]
    q, k, v = _qkv(n, n)
    res = attend(q, k, v, top, dropout=p, training=True, return_weights=return_weights)
    out = _out(res)
    kept = torch.isclose(out, v / (1 - p)).all(-1)  # (N, H)
    dropped = (out == 0).all(-1)
    assert bool((kept | dropped).all())
    assert 0 < int(dropped.sum()) < n * HEADS  # some of each
    if return_weights:
        assert torch.equal(res[1].weights, torch.ones(n, HEADS, dtype=F64))


# ---------------------------------------------------------------------------------------
# returned weights


@pytest.mark.parametrize("return_weights_path", ["scaled_dot", "gatv2"])
@pytest.mark.parametrize("topology", TOPOLOGIES + ["window0", "window_wide"])
def test_weights_sum_to_one_per_target_and_head(topology, return_weights_path):
    case = make_case(topology)
    q, k, v = _qkv(case.num_q, case.num_kv)
    mask = torch.rand(case.num_edges, HEADS) > 0.3
    first = [n for n, t in enumerate(case.tgt) if t == case.tgt[0]]
    mask[first, 1] = False  # target tgt[0] has nothing in head 1
    _, graph = attend(q, k, v, case.topology, make_score(return_weights_path), mask=mask,
                      return_weights=True)
    assert isinstance(graph, AttentionGraph)
    w = graph.weights
    assert w.shape == (case.num_edges, HEADS)
    assert bool((w >= 0).all()) and not bool(w[~mask].any())
    sums = torch.zeros(case.num_q, HEADS, dtype=F64).index_add_(0, torch.tensor(case.tgt), w)
    alive = torch.zeros(case.num_q, HEADS, dtype=torch.long).index_add_(
        0, torch.tensor(case.tgt), mask.long())
    torch.testing.assert_close(sums, (alive > 0).to(F64), **TIGHT)
    assert sums[case.tgt[0], 1] == 0


@pytest.mark.parametrize("topology", TOPOLOGIES)
def test_to_dense(topology):
    case = make_case(topology)
    q, k, v = _qkv(case.num_q, case.num_kv)
    out, graph = attend(q, k, v, case.topology, return_weights=True)
    dense = graph.to_dense()
    assert dense.shape == (HEADS, case.num_q, case.num_kv)
    torch.testing.assert_close(
        dense, dense_weights(case.src, case.tgt, graph.weights, case.num_q, case.num_kv),
        **TIGHT)
    # the dense matrix is the attention: out = W v per head
    torch.testing.assert_close(torch.einsum("hij,jhd->ihd", dense, v), out, **TIGHT)
    has_edge = torch.zeros(case.num_q, dtype=torch.bool)
    has_edge[case.tgt] = True
    torch.testing.assert_close(dense.sum(-1), has_edge.to(F64).expand(HEADS, -1), **TIGHT)


def test_to_dense_of_a_bipartite_graph_with_different_sizes():
    top = bipartite([0, 2, 3], [0, 3, 7])  # 3 queries, 7 keys
    q, k, v = _qkv(3, 7)
    _, graph = attend(q, k, v, top, return_weights=True)
    dense = graph.to_dense()
    assert dense.shape == (HEADS, 3, 7)
    assert not dense[:, :2, 3:].any() and not dense[:, 2:, :3].any()  # across sets: 0
    assert bool((dense[:, :2, :3] > 0).all()) and bool((dense[:, 2:, 3:] > 0).all())


def test_weights_are_detached_and_do_not_change_the_output():
    top = complete([0, 3, 8])
    q, k, v = _qkv(8, 8, requires_grad=True)
    plain = attend(q, k, v, top)
    out, graph = attend(q, k, v, top, return_weights=True)
    assert not graph.weights.requires_grad
    torch.testing.assert_close(out, plain, **TIGHT)


# ---------------------------------------------------------------------------------------
# a user's score, window radii, different query and key sets


@pytest.mark.parametrize("topology", TOPOLOGIES)
def test_user_score_module_gets_gradients(topology):
    case = make_case(topology)
    score = UserScore(HEADS).double()
    q, k, v = _qkv(case.num_q, case.num_kv)
    out = attend(q, k, v, case.topology, score)
    want, _ = ref_attend(q, k, v, case.src, case.tgt, score)
    torch.testing.assert_close(out, want, **TIGHT)
    upstream = torch.randn_like(out)
    (g,) = torch.autograd.grad(out, [score.temperature], upstream)
    (g_ref,) = torch.autograd.grad(want, [score.temperature], upstream)
    assert g.abs().sum() > 0
    torch.testing.assert_close(g, g_ref, **TIGHT)


def test_user_score_sees_queries_first():
    """The engine calls score(q, k): a score that ignores k must follow the query."""

    class QueryOnly(torch.nn.Module):
        def forward(self, q, k):
            return q[..., 0] + 0 * k[..., 0]  # (..., H): the first query feature

    top = edges(torch.tensor([[0, 1, 2], [0, 0, 0]]), (3, 1))
    q, k, v = _qkv(1, 3)
    # every edge of the one target has the same logit: uniform weights
    out = attend(q, k, v, top, QueryOnly())
    torch.testing.assert_close(out[0], v.mean(0), **TIGHT)


@pytest.mark.parametrize("return_weights", [False, True])
@pytest.mark.parametrize("score_name", ["scaled_dot", "additive"])
def test_window_radius_zero_is_identity(score_name, return_weights):
    top = window(ptr_from_sizes(SIZES), 0)
    n = sum(SIZES)
    q, k, v = _qkv(n, n)
    res = attend(q, k, v, top, make_score(score_name), return_weights=return_weights)
    torch.testing.assert_close(_out(res), v, **TIGHT)
    if return_weights:
        assert res[1].edge_index.tolist() == [list(range(n)), list(range(n))]


@pytest.mark.parametrize("return_weights", [False, True])
@pytest.mark.parametrize("score_name", ["scaled_dot", "additive"])
def test_window_wider_than_every_set_is_complete(score_name, return_weights):
    n = sum(SIZES)
    q, k, v = _qkv(n, n)
    score = make_score(score_name)
    wide = attend(q, k, v, window(ptr_from_sizes(SIZES), 50), score,
                  return_weights=return_weights)
    full = attend(q, k, v, complete(ptr_from_sizes(SIZES)), score,
                  return_weights=return_weights)
    torch.testing.assert_close(_out(wide), _out(full), **TIGHT)
    if return_weights:
        assert wide[1].edge_index.tolist() == list(complete_edges(SIZES))
        torch.testing.assert_close(wide[1].weights, full[1].weights, **TIGHT)


@pytest.mark.parametrize("return_weights", [False, True])
def test_bipartite_sets_with_no_query_or_no_key(return_weights):
    # set 0: 0 queries, 4 keys; set 1: 3 queries, 0 keys; set 2: 2 queries, 5 keys
    top = bipartite([0, 0, 3, 5], [0, 4, 4, 9])
    q, k, v = _qkv(5, 9)
    res = attend(q, k, v, top, return_weights=return_weights)
    out = _out(res)
    assert out.shape == (5, HEADS, DV)
    assert not out[:3].any()
    want, _ = ref_attend(q[3:], k[4:], v[4:], [0, 1, 2, 3, 4] * 2, [0] * 5 + [1] * 5,
                         S.ScaledDot())
    torch.testing.assert_close(out[3:], want, **TIGHT)
    if return_weights:
        assert res[1].num_nodes == (9, 5)
        assert res[1].edge_index.shape == (2, 10)


# ---------------------------------------------------------------------------------------
# errors name the argument


def _bad_calls():
    top = complete([0, 3, 8])  # 8 nodes, 9 + 25 = 34 edges
    q, k, v = _qkv(8, 8)
    e = top.num_edges
    gat = S.GAT(HEADS, DK)
    return {
        "q is 2-D": (r"\bq\b", lambda: attend(q[:, 0], k, v, top)),
        "k is 2-D": (r"\bk\b", lambda: attend(q, k[:, 0], v, top)),
        "v is 4-D": (r"\bv\b", lambda: attend(q, k, v[..., None], top)),
        "k and v rows": (r"\bk\b.*\bv\b", lambda: attend(q, k, v[:7], top)),
        "k and v heads": (r"\bk\b.*\bv\b", lambda: attend(q, k, v[:, :1], top)),
        "q and k heads": (r"\bq\b.*heads", lambda: attend(q[:, :1], k, v, top)),
        "q rows": (r"\bq\b.*rows", lambda: attend(q[:7], k, v, top)),
        "k rows": (r"\bk\b.*rows", lambda: attend(q, k[:7], v[:7], top)),
        "bias edges": ("bias", lambda: attend(q, k, v, top, bias=torch.zeros(e - 1))),
        "bias heads": ("bias", lambda: attend(q, k, v, top, bias=torch.zeros(e, HEADS + 1))),
        "bias 3-D": ("bias", lambda: attend(q, k, v, top, bias=torch.zeros(e, HEADS, 1))),
        "mask edges": ("mask", lambda: attend(q, k, v, top, mask=torch.ones(e + 1).bool())),
        "mask heads": ("mask", lambda: attend(q, k, v, top, mask=torch.ones(e, 3).bool())),
        "mask float": ("mask", lambda: attend(q, k, v, top, mask=torch.ones(e))),
        "edge_attr edges": ("edge_attr", lambda: attend(q, k, v, top, gat,
                                                         edge_attr=torch.zeros(e - 1, HEADS))),
        "edge_attr heads": ("edge_attr", lambda: attend(q, k, v, top, gat,
                                                         edge_attr=torch.zeros(e, 3))),
        "edge_attr 1-D": ("edge_attr", lambda: attend(q, k, v, top, gat,
                                                       edge_attr=torch.zeros(e))),
        "window q rows": (r"\bq\b.*rows", lambda: attend(q[:5], k[:5], v[:5], window([0, 8], 1))),
        "edges k rows": (r"\bk\b.*rows", lambda: attend(
            q, k, v, edges(torch.tensor([[0], [0]]), (5, 8)))),
    }


BAD = _bad_calls()


@pytest.mark.parametrize("name", list(BAD))
def test_wrong_shapes_raise_value_errors_naming_the_argument(name):
    pattern, call = BAD[name]
    with pytest.raises(ValueError, match=pattern):
        call()


def test_float_mask_is_not_read_as_a_bias():
    """A 0/1 float mask must not silently become an additive bias on the SDPA path."""
    top = complete([0, 3, 6])  # uniform: the no-padding SDPA path
    q, k, v = _qkv(6, 6, dtype=torch.float32)
    mask = torch.ones(top.num_edges, dtype=torch.bool)
    mask[1] = False
    with pytest.raises(ValueError, match="mask"):
        attend(q, k, v, top, mask=mask.float())


def test_unknown_topology_is_a_type_error():
    q, k, v = _qkv(3, 3)
    with pytest.raises(TypeError, match="topology"):
        attend(q, k, v, torch.tensor([0, 3]))


@pytest.mark.parametrize("return_weights", [False, True])
@pytest.mark.parametrize("score_name", ["scaled_dot", "additive"])
@pytest.mark.parametrize("topology", TOPOLOGIES)
def test_non_contiguous_inputs(topology, score_name, return_weights):
    """Heads split off a projection as strided views give the same numbers."""
    case = make_case(topology)
    score = make_score(score_name)
    q, k, v = _qkv(case.num_q, case.num_kv)
    qt, kt, vt = (t.transpose(1, 2).contiguous().transpose(1, 2) for t in (q, k, v))
    assert not qt.is_contiguous() and not vt.is_contiguous()
    got = attend(qt, kt, vt, case.topology, score, return_weights=return_weights)
    want = attend(q, k, v, case.topology, score, return_weights=return_weights)
    torch.testing.assert_close(_out(got), _out(want), **TIGHT)


# ---------------------------------------------------------------------------------------
# GAT's per-node terms


@pytest.mark.parametrize("shape", [(7, 3, 5), (2, 9, 4, 6), (1, 1, 1)])
def test_head_dot_equals_the_elementwise_sum(shape):
    """``head_dot`` gives ``(x * att).sum(-1)`` with its gradients, for any leading
    dimensions, in float64."""
    x = torch.randn(*shape, dtype=F64, requires_grad=True)
    att = torch.randn(*shape[-2:], dtype=F64, requires_grad=True)
    got = S.head_dot(x, att)
    want = (x * att).sum(-1, keepdim=True)
    assert got.shape == want.shape == (*shape[:-1], 1)
    torch.testing.assert_close(got, want, **TIGHT)
    g = torch.randn_like(want)
    grads = torch.autograd.grad(got, (x, att), g)
    torch.testing.assert_close(grads, torch.autograd.grad(want, (x, att), g), **TIGHT)


def _one_node_set(name: str):
    """(topology, N) over one node set: a complete or window case, or a random graph on
    7 nodes with self loops, a repeated edge and a node no edge enters."""
    if name != "edges":
        case = make_case(name)
        assert case.num_q == case.num_kv
        return case.topology, case.num_q
    src = torch.tensor([0, 1, 2, 3, 4, 5, 6, 1, 3, 3, 0, 6])
    dst = torch.tensor([0, 1, 2, 3, 4, 5, 5, 0, 2, 2, 4, 1])  # nothing enters node 6
    return edges(torch.stack([src, dst]), 7), 7


@pytest.mark.parametrize("topology", ["complete", "window", "edges"])
def test_gat_self_attention_prepares_both_terms_at_once(topology):
    """With q the very tensor k (``prepare_both``), output and gradients equal those of
    q as a separate copy."""
    top, n = _one_node_set(topology)
    score = S.GAT(3, 4).double()
    x = torch.randn(n, 3, 4, dtype=F64, requires_grad=True)
    v = torch.randn(n, 3, 5, dtype=F64)
    shared = attend(x, x, v, top, score)
    separate = attend(x.clone(), x, v, top, score)
    torch.testing.assert_close(shared, separate, **TIGHT)
    g = torch.randn_like(shared)
    params = (x, score.att_src, score.att_dst)
    torch.testing.assert_close(torch.autograd.grad(shared, params, g),
                               torch.autograd.grad(separate, params, g), **TIGHT)
