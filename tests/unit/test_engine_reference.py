"""Every score on every topology against the naive float64 reference (tests/reference.py).

Values, returned weights and gradients (inputs, score parameters, bias, edge_attr) are
compared on both engine paths: the fast one (no weights requested; dot-type scores on
complete/bipartite sets go through scaled_dot_product_attention) and the explicit one
(``return_weights=True``). ``gradcheck`` then checks the engine's own backward.
"""

import sys

import pytest
import torch
from reference import (
    DK,
    DOT_SCORES,
    DV,
    EDGE_ATTR_WIDTH,
    HEADS,
    SCORES,
    TOPOLOGIES,
    make_case,
    make_score,
)
from reference import attend as ref_attend

from setattn import scores as S
from setattn.engine import EnginePath, plan
from setattn.engine import attend as engine_attend
from setattn.engine.fused_gat import GATEdges
from setattn.engine.fused_gatv2 import GATv2Edges

F64 = torch.float64
TOL = dict(rtol=1e-9, atol=1e-10)
REF_TOPOLOGIES = [*TOPOLOGIES, "pool"]
attend = engine_attend  # in every test, the sparse_kernel fixture's attend_on_kernel


SPARSE_KERNELS = (EnginePath.SPARSE_CSR, EnginePath.SPARSE_GATHER)


@pytest.fixture(autouse=True, params=SPARSE_KERNELS, ids=["csr", "gather"])
def sparse_kernel(request, monkeypatch):
    """Every test runs on both sparse kernels: CSR products (which plan() picks for edge
    lists from ``CSR_MIN_EDGES`` or ``CSR_MIN_EDGES_FEW`` edges on) and gathered messages
    with index_add (below those sizes). The cases here are small, so wherever plan()
    picks one of the two, this module's ``attend`` forces each in turn."""
    calls = []

    def attend_on_kernel(q, k, v, topology, score=None, **kwargs):
        need = kwargs.get("return_weights", False)
        planned = plan(q, k, v, topology, score, need_weights=need,
                       **{n: t for n, t in kwargs.items() if n != "return_weights"})
        if planned in SPARSE_KERNELS:
            kwargs["path"] = request.param
        calls.append(planned)
        return engine_attend(q, k, v, topology, score, **kwargs)

    monkeypatch.setitem(globals(), "attend", attend_on_kernel)
    return calls


def _inputs(case, dtype=F64, dq=DK, dk=DK):
    q = torch.randn(case.num_q, HEADS, dq, dtype=dtype, requires_grad=True)
    k = torch.randn(case.num_kv, HEADS, dk, dtype=dtype, requires_grad=True)
    v = torch.randn(case.num_kv, HEADS, DV, dtype=dtype, requires_grad=True)
    return q, k, v


def _mask(case, per_head: bool) -> torch.Tensor:
    """Random mask that also removes every edge of the first target with edges (head 0
    only when per head), so a fully masked row is always present."""
    e = case.num_edges
    mask = torch.rand(e, HEADS if per_head else 1) > 0.3
    first = case.tgt[0]
    rows = [n for n in range(e) if case.tgt[n] == first]
    mask[rows, 0] = False
    return mask if per_head else mask[:, 0]


def _extras(name, case):
    e = case.num_edges
    if name == "plain":
        return {}
    if name == "bias_e_mask_eh":
        return dict(bias=torch.randn(e, dtype=F64, requires_grad=True), mask=_mask(case, True))
    if name == "bias_eh_mask_e":
        return dict(bias=torch.randn(e, HEADS, dtype=F64, requires_grad=True),
                    mask=_mask(case, False))
    raise KeyError(name)


def _grads(out, tensors, upstream):
    tensors = [t for t in tensors if t is not None and t.requires_grad]
    return torch.autograd.grad(out, tensors, upstream, allow_unused=True)


def _check_against_reference(case, score, q, k, v, **extras):
    """Engine on both paths vs reference: output, weights, every gradient."""
    ref_out, ref_w = ref_attend(q, k, v, case.src, case.tgt, score, **extras)
    leaves = [q, k, v, *score.parameters(), extras.get("bias"), extras.get("edge_attr")]
    upstream = torch.randn_like(ref_out)
    ref_grads = _grads(ref_out, leaves, upstream)
    for return_weights in (False, True):
        res = attend(q, k, v, case.topology, score, return_weights=return_weights, **extras)
        out = res[0] if return_weights else res
        torch.testing.assert_close(out, ref_out, **TOL)
        for got, want in zip(_grads(out, leaves, upstream), ref_grads, strict=True):
            if want is None:  # the reference never touched it: the engine must give 0
                assert got is None or not got.any()
            else:
                torch.testing.assert_close(got, want, **TOL)
        if return_weights:
            graph = res[1]
            assert graph.edge_index.tolist() == [case.src, case.tgt]
            assert graph.num_nodes == (case.num_kv, case.num_q)
            assert not graph.weights.requires_grad
            torch.testing.assert_close(graph.weights, ref_w, **TOL)


@pytest.mark.parametrize("extras", ["plain", "bias_e_mask_eh", "bias_eh_mask_e"])
@pytest.mark.parametrize("topology", REF_TOPOLOGIES)
@pytest.mark.parametrize("score_name", list(SCORES))
def test_score_on_topology_matches_reference(score_name, topology, extras):
    case = make_case(topology)
    score = make_score(score_name)
    q, k, v = _inputs(case)
    _check_against_reference(case, score, q, k, v, **_extras(extras, case))


@pytest.mark.parametrize("topology", REF_TOPOLOGIES)
@pytest.mark.parametrize("score_name", list(EDGE_ATTR_WIDTH))
def test_edge_attr_matches_reference(score_name, topology):
    case = make_case(topology)
    score = make_score(score_name)
    q, k, v = _inputs(case)
    width = EDGE_ATTR_WIDTH[score_name]
    shape = (case.num_edges, HEADS) if width is None else (case.num_edges, HEADS, width)
    edge_attr = torch.randn(*shape, dtype=F64, requires_grad=True)
    _check_against_reference(case, score, q, k, v, edge_attr=edge_attr,
                             bias=torch.randn(case.num_edges, HEADS, dtype=F64),
                             mask=_mask(case, True))


@pytest.mark.parametrize("topology", TOPOLOGIES)
@pytest.mark.parametrize("score_name", DOT_SCORES)
def test_dot_scores_refuse_edge_attr(score_name, topology):
    case = make_case(topology)
    q, k, v = _inputs(case)
    edge_attr = torch.randn(case.num_edges, HEADS, dtype=F64)
    with pytest.raises(ValueError, match="edge_attr"):
        attend(q, k, v, case.topology, make_score(score_name), edge_attr=edge_attr)


@pytest.mark.parametrize("topology", ["bipartite", "edges"])
@pytest.mark.parametrize("score_name", ["bilinear", "additive", "concat_additive"])
def test_queries_and_keys_of_different_widths(score_name, topology):
    dq, dk = 3, 7
    score = {
        "bilinear": lambda: S.Bilinear(HEADS, dq, dk),
        "additive": lambda: S.Additive(HEADS, dq, dk, hidden=5),
        "concat_additive": lambda: S.ConcatAdditive(HEADS, dq, dk, hidden=5),
    }[score_name]().double()
    case = make_case(topology)
    q, k, v = _inputs(case, dq=dq, dk=dk)
    _check_against_reference(case, score, q, k, v)


# ---------------------------------------------------------------------------------------
# gradcheck: the engine's backward against its own finite differences

TINY = dict(sizes=[2, 3, 1], sizes_q=[1, 0, 2], sizes_kv=[3, 2, 0])


def _tiny_case(topology):
    from reference import Case, bipartite_edges, complete_edges, window_edges

    from setattn import topology as T

    if topology == "complete":
        return Case(T.complete([0, 2, 5, 6]), *complete_edges(TINY["sizes"]), 6, 6)
    if topology == "bipartite":
        return Case(T.bipartite([0, 1, 1, 3], [0, 3, 5, 5]),
                    *bipartite_edges(TINY["sizes_q"], TINY["sizes_kv"]), 3, 5)
    if topology == "window":
        return Case(T.window([0, 2, 5, 6], 1), *window_edges(TINY["sizes"], 1), 6, 6)
    if topology == "pool":
        return Case(T.bipartite([0, 1, 1, 2], [0, 3, 5, 5]),
                    *bipartite_edges([1, 0, 1], TINY["sizes_kv"]), 2, 5)
    src, tgt = [0, 2, 1, 3, 0, 2], [1, 0, 1, 2, 2, 1]  # target 3 has no edge
    return Case(T.edges(torch.tensor([src, tgt]), (4, 4)), src, tgt, 4, 4)


GRADCHECK = [(name, False) for name in SCORES] + [(name, True) for name in DOT_SCORES]
FULL_GRADCHECK = {"scaled_dot", "additive", "gat"}  # the others: gradcheck's fast mode


@pytest.mark.parametrize("topology", REF_TOPOLOGIES)
@pytest.mark.parametrize(("score_name", "return_weights"), GRADCHECK)
def test_gradcheck(score_name, return_weights, topology):
    """Non-dot scores always take the explicit path, dot scores are checked on both.

    Fast mode compares the Jacobian along random directions instead of entry by entry.
    """
    case = _tiny_case(topology)
    score = make_score(score_name, dk=2, hidden=3)
    q = torch.randn(case.num_q, HEADS, 2, dtype=F64, requires_grad=True)
    k = torch.randn(case.num_kv, HEADS, 2, dtype=F64, requires_grad=True)
    v = torch.randn(case.num_kv, HEADS, 3, dtype=F64, requires_grad=True)
    bias = torch.randn(case.num_edges, HEADS, dtype=F64, requires_grad=True)
    mask = torch.ones(case.num_edges, dtype=torch.bool)
    mask[-1] = False

    def fn(q, k, v, bias):
        res = attend(q, k, v, case.topology, score, bias=bias, mask=mask,
                     return_weights=return_weights)
        return res[0] if return_weights else res

    fast = score_name not in FULL_GRADCHECK
    assert torch.autograd.gradcheck(fn, (q, k, v, bias), fast_mode=fast)


@pytest.mark.parametrize("topology", TOPOLOGIES)
@pytest.mark.parametrize(("score_name", "return_weights"),
                         [("scaled_dot", False), ("scaled_dot", True), ("additive", False)])
def test_gradgradcheck(score_name, return_weights, topology):
    """Second derivatives (gradient penalties, Hessian-vector products) are right too."""
    case = _tiny_case(topology)
    score = make_score(score_name, dk=2, hidden=3)
    q = torch.randn(case.num_q, HEADS, 2, dtype=F64, requires_grad=True)
    k = torch.randn(case.num_kv, HEADS, 2, dtype=F64, requires_grad=True)
    v = torch.randn(case.num_kv, HEADS, 3, dtype=F64, requires_grad=True)
    bias = torch.randn(case.num_edges, dtype=F64, requires_grad=True)

    def fn(q, k, v, bias):
        res = attend(q, k, v, case.topology, score, bias=bias, return_weights=return_weights)
        return res[0] if return_weights else res

    assert torch.autograd.gradgradcheck(fn, (q, k, v, bias), fast_mode=True)


def _spied(monkeypatch, node) -> list:
    """The argument tuples of every ``node.apply`` call from now on (passed through)."""
    calls = []
    apply = node.apply

    def spy(*args):
        calls.append(args)
        return apply(*args)

    monkeypatch.setattr(node, "apply", spy)
    return calls


@pytest.fixture
def fused_calls(monkeypatch):
    """Counts the calls that went through ``GATv2Edges`` (the FUSED_GATV2 path's node)."""
    return _spied(monkeypatch, GATv2Edges)


@pytest.mark.parametrize("with_edge_attr", [False, True])
@pytest.mark.parametrize(("score_name", "values"), [
    ("gatv2", "own"),  # projected keys are never the values
    ("gatv2_unprojected", "keys"), ("gatv2_unprojected", "own")])
def test_fused_gatv2_matches_reference(score_name, with_edge_attr, values, fused_calls,
                                       sparse_kernel):
    """GATv2 over an edge list with no bias, mask, dropout or hard attention runs as one
    autograd node with its own backward: values, weights and every gradient (queries,
    keys, values, ``att``, the projections, edge features) equal the reference, whether
    the values are the keys themselves (as in ``GATv2Conv``) or their own tensor."""
    case = make_case("edges")
    score = make_score(score_name)
    q, k, v = _inputs(case)
    if values == "keys":
        v = k
    width = EDGE_ATTR_WIDTH[score_name]
    edge_attr = (torch.randn(case.num_edges, HEADS, width, dtype=F64, requires_grad=True)
                 if with_edge_attr else None)
    _check_against_reference(case, score, q, k, v, edge_attr=edge_attr)
    assert sparse_kernel == [EnginePath.FUSED_GATV2] * 2  # what plan() said
    assert len(fused_calls) == 2  # with and without weights returned
    assert (fused_calls[0][2] is None) == (values == "keys" and score_name == "gatv2_unprojected")


def test_fused_gatv2_first_and_second_derivatives(fused_calls):
    """gradcheck and gradgradcheck through the fused node, including a loss on the
    returned weights (their gradient enters the softmax backward) and keys that are
    the values; second derivatives go through the plain ops."""
    case = make_case("edges")
    score = make_score("gatv2_unprojected", dk=2)
    k = torch.randn(case.num_kv, HEADS, 2, dtype=F64, requires_grad=True)
    q = torch.randn(case.num_q, HEADS, 2, dtype=F64, requires_grad=True)
    edge_attr = torch.randn(case.num_edges, HEADS, 2, dtype=F64, requires_grad=True)

    def fn(q, k, edge_attr):
        return attend(q, k, k, case.topology, score, edge_attr=edge_attr,
                      return_weights=True)[0]

    def fn_weights(q, k, edge_attr):  # the weights' own gradient path
        return GATv2Edges.apply(q, k, None, edge_attr, score.att, case.topology.index[0],
                                case.topology.index[1], case.num_q, score.negative_slope)[1]

    for f in (fn, fn_weights):
        assert torch.autograd.gradcheck(f, (q, k, edge_attr))
        assert torch.autograd.gradgradcheck(f, (q, k, edge_attr), fast_mode=True)
    assert fused_calls


@pytest.fixture
def fused_gat_calls(monkeypatch):
    """Counts the calls that went through ``GATEdges`` (the FUSED_GAT path's node)."""
    return _spied(monkeypatch, GATEdges)


@pytest.mark.parametrize("with_edge_attr", [False, True])
@pytest.mark.parametrize("values", ["keys", "own"])
def test_fused_gat_matches_reference(with_edge_attr, values, fused_gat_calls, sparse_kernel,
                                     monkeypatch):
    """GAT over an edge list with no bias, mask, dropout or hard attention runs as one
    autograd node with its own backward off the eager CPU (as there: the CSR kernels
    declared not to serve): values, weights and every gradient (queries, keys, values,
    both attention vectors, edge features) equal the reference."""
    monkeypatch.setattr(sys.modules["setattn.engine.plan"], "csr_kernels_serve",
                        lambda x: False)
    case = make_case("edges")
    score = make_score("gat")
    q, k, v = _inputs(case)
    if values == "keys":
        v = k
    edge_attr = (torch.randn(case.num_edges, HEADS, dtype=F64, requires_grad=True)
                 if with_edge_attr else None)
    _check_against_reference(case, score, q, k, v, edge_attr=edge_attr)
    assert sparse_kernel == [EnginePath.FUSED_GAT] * 2  # what plan() said
    assert len(fused_gat_calls) == 2  # with and without weights returned


def test_fused_gat_first_and_second_derivatives(fused_gat_calls):
    """gradcheck and gradgradcheck through the fused GAT node, a loss on the returned
    weights included; second derivatives go through the plain ops."""
    case = make_case("edges")
    src, dst = case.topology.index
    pq = torch.randn(case.num_q, HEADS, dtype=F64, requires_grad=True)
    pk = torch.randn(case.num_kv, HEADS, dtype=F64, requires_grad=True)
    v = torch.randn(case.num_kv, HEADS, 3, dtype=F64, requires_grad=True)
    edge_attr = torch.randn(case.num_edges, HEADS, dtype=F64, requires_grad=True)

    def out(pq, pk, v, edge_attr):
        return GATEdges.apply(pq, pk, v, edge_attr, src, dst, case.num_q, 0.2)[0]

    def weights(pq, pk, v, edge_attr):
        return GATEdges.apply(pq, pk, v, edge_attr, src, dst, case.num_q, 0.2)[1]

    for f in (out, weights):
        assert torch.autograd.gradcheck(f, (pq, pk, v, edge_attr))
        assert torch.autograd.gradgradcheck(f, (pq, pk, v, edge_attr), fast_mode=True)
    assert fused_gat_calls


@pytest.mark.parametrize("extras", ["bias", "mask", "dropout", "hard", "negative_slope"])
def test_fused_gatv2_only_when_it_applies(extras, fused_calls, sparse_kernel):
    """Bias, mask, dropout, hard attention or a negative LeakyReLU slope take the
    general path (and still match the reference)."""
    case = make_case("edges")
    score = make_score("gatv2")
    q, k, v = _inputs(case)
    kwargs = {"bias": dict(bias=torch.randn(case.num_edges, dtype=F64)),
              "mask": dict(mask=_mask(case, False)),
              "dropout": dict(dropout=0.5, training=True),
              "hard": dict(hard=1),
              "negative_slope": {}}[extras]
    if extras == "negative_slope":
        score.negative_slope = -0.1
    out = attend(q, k, v, case.topology, score, **kwargs)
    assert sparse_kernel == [EnginePath.SPARSE_GATHER]  # what plan() said
    assert not fused_calls
    if extras in ("bias", "mask", "negative_slope"):
        want, _ = ref_attend(q, k, v, case.src, case.tgt, score, **kwargs)
        torch.testing.assert_close(out, want, **TOL)
