"""The compiled CPU kernels of FUSED_GAT, FUSED_GATV2 and FUSED_DOT against the torch
ops that the same autograd nodes run elsewhere (CUDA, torch.compile): outputs, weights
and every gradient, in float64, on graphs with a target no edge enters, repeated edges,
self loops and huge logits; GAT's per-node terms; the counting sort that groups the edges
by target; and the default molecule network's attention, end to end."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch

from setattn import scores
from setattn.engine import cpu_kernels
from setattn.engine.attend import attend
from setattn.engine.fused_dot import DotEdges
from setattn.engine.fused_gat import (
    GATEdges,
    GATRows,
    HeadDots,
    gat_edges,
    node_terms,
    row_layout,
    target_layout,
)
from setattn.engine.fused_gatv2 import GATv2Edges
from setattn.engine.plan import CSR_SUM_MIN_EDGES, EnginePath, plan
from setattn.molprop.batching import collate_molecules
from setattn.molprop.config import NetworkConfig
from setattn.molprop.featurize import featurize
from setattn.molprop.network import MoleculeNetwork
from setattn.topology import edges

F64 = torch.float64
HEADS, WIDTH, DIM = 3, 5, 7
NQ, NK = 11, 13


def _graph(seed: int = 0, num_edges: int = 47):
    """Edges from 13 sources into 11 targets: target 10 gets none, (2 -> 4) is repeated."""
    gen = torch.Generator().manual_seed(seed)
    src = torch.randint(0, NK, (num_edges,), generator=gen)
    dst = torch.randint(0, NQ - 1, (num_edges,), generator=gen)
    src[:2], dst[:2] = 2, 4
    return edges(torch.stack([src, dst]), (NK, NQ))


def _leaf(*shape, scale=1.0, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return (scale * torch.randn(*shape, generator=gen, dtype=F64)).requires_grad_()


def _both(node, args: list, layout_at: int, top, inputs: list):
    """(outputs, weights, gradients) of ``node`` through the torch ops and through the
    CPU kernel (the layout passed), for one loss on the output and one on the weights."""
    results = []
    for layout in (None, target_layout(top)):
        call = list(args)
        call[layout_at] = layout
        out, w = node.apply(*call)
        gen = torch.Generator().manual_seed(1)
        loss = (out * torch.randn(out.shape, generator=gen, dtype=F64)).sum() + (w ** 3).sum()
        wanted = [t for t in inputs if t is not None]
        results.append((out, w, torch.autograd.grad(loss, wanted)))
    return results


@pytest.mark.parametrize("with_edge_attr", [False, True])
@pytest.mark.parametrize("scale", [1.0, 1e4])
def test_gat_kernel_equals_the_torch_ops(with_edge_attr, scale):
    """GAT: the same output, weights and gradients (node terms, values, edge terms), huge
    logits included (the max shift keeps them finite)."""
    top = _graph()
    pq, pk = _leaf(NQ, HEADS, scale=scale, seed=2), _leaf(NK, HEADS, scale=scale, seed=3)
    v = _leaf(NK, HEADS, DIM, seed=4)
    ea = _leaf(top.num_edges, HEADS, seed=5) if with_edge_attr else None
    args = [pq, pk, v, ea, top.index[0], top.index[1], NQ, 0.2, None]
    (out_t, w_t, g_t), (out_k, w_k, g_k) = _both(GATEdges, args, 8, top, [pq, pk, v, ea])
    assert torch.isfinite(out_k).all()
    torch.testing.assert_close(out_k, out_t, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(w_k, w_t, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(g_k, g_t, rtol=1e-10, atol=1e-10)
    assert (out_k[NQ - 1] == 0).all()  # no edge enters the last target


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("with_edge_attr", [False, True])
@pytest.mark.parametrize("scale", [1.0, 1e4])
def test_gat_rows_node_equals_the_torch_ops(compiled, with_edge_attr, scale):
    """GAT on a large graph (weights along the CSR rows, from the compiled kernels or
    from segment reductions; the sum and the values' gradient as CSR products): the same
    output, weights and gradients as ``gat_edges``' torch ops, huge logits included;
    second derivatives too."""
    top = _graph(seed=40)
    pq, pk = _leaf(NQ, HEADS, scale=scale, seed=41), _leaf(NK, HEADS, scale=scale, seed=42)
    v = _leaf(NK, HEADS, DIM, seed=46)
    ea = _leaf(top.num_edges, HEADS, seed=43) if with_edge_attr else None
    inputs = [t for t in (pq, pk, v, ea) if t is not None]
    src, dst = top.index[0], top.index[1]
    gen = torch.Generator().manual_seed(44)
    r = torch.randn(NQ, HEADS, DIM, generator=gen, dtype=F64)

    def run(kernel: bool, twice: bool = False):
        out, w = (GATRows.apply(pq, pk, v, ea, src, dst, NQ, 0.2, row_layout(top, HEADS),
                                compiled)
                  if kernel else gat_edges(pq, pk, v, ea, src, dst, NQ, 0.2)[:2])
        loss = (out * r).sum() + (w ** 3).sum()
        grads = torch.autograd.grad(loss, inputs, create_graph=twice)
        if twice:
            grads = torch.autograd.grad(sum(g.square().sum() for g in grads), inputs)
        return out, w, grads

    (out_k, w_k, g_k), (out_t, w_t, g_t) = run(True), run(False)
    assert torch.isfinite(out_k).all() and (out_k[NQ - 1] == 0).all()
    torch.testing.assert_close(out_k, out_t, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(w_k, w_t, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(g_k, g_t, rtol=1e-10, atol=1e-10)
    if scale == 1.0:
        torch.testing.assert_close(run(True, True)[2], run(False, True)[2], rtol=1e-10,
                                   atol=1e-10)


def test_a_large_graph_runs_fused_gat_with_the_csr_sum(monkeypatch):
    """From CSR_SUM_MIN_EDGES edges on plan() keeps FUSED_GAT on the eager CPU and the
    call runs ``GATRows``, through torch ops on a process's first pass (kernels not
    loaded), through the kernels on the graph's next; both give SPARSE_GATHER's output,
    weights and gradients (float64)."""
    gen = torch.Generator().manual_seed(45)
    n, heads, dim = 20000, 2, 3
    index = torch.randint(0, n, (2, CSR_SUM_MIN_EDGES), generator=gen)
    index[1, index[1] == n - 1] = 0  # the last target gets no edge
    top = edges(index, n)
    score = scores.GAT(heads, dim).double()
    q = torch.randn(n, heads, dim, generator=gen, dtype=F64, requires_grad=True)
    v = torch.randn(n, heads, dim, generator=gen, dtype=F64, requires_grad=True)
    ea = torch.randn(top.num_edges, heads, generator=gen, dtype=F64, requires_grad=True)
    assert plan(q, q, v, top, score, edge_attr=ea) is EnginePath.FUSED_GAT
    calls = []
    monkeypatch.setattr(GATRows, "apply", _recording(GATRows.apply, calls))

    def run(path):
        out, graph = attend(q, q, v, top, score, edge_attr=ea, return_weights=True, path=path)
        loss = out.square().sum() + graph.weights.square().sum()
        return out, graph.weights, torch.autograd.grad(loss, [q, v, ea, *score.parameters()])

    monkeypatch.delitem(sys.modules, "setattn.engine.cpu_kernels", raising=False)
    first, again = run("fused_gat"), run("fused_gat")
    # the first pass runs torch ops (no kernel to load for one pass), the next the kernels
    assert [call[-1] for call in calls] == [False, True]
    gathered = run("sparse_gather")
    torch.testing.assert_close(first, gathered, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(again, gathered, rtol=1e-10, atol=1e-10)
    assert (first[0][n - 1] == 0).all()


@pytest.mark.parametrize("with_edge_attr", [False, True])
@pytest.mark.parametrize("values_are_keys", [False, True])
def test_gatv2_kernel_equals_the_torch_ops(with_edge_attr, values_are_keys):
    """GATv2: the same output, weights and gradients (queries, keys, values, edge terms,
    ``att``), with values that are the keys themselves (their gradients add up) or their
    own tensor."""
    top = _graph(seed=6)
    pq, pk = _leaf(NQ, HEADS, WIDTH, seed=7), _leaf(NK, HEADS, WIDTH, seed=8)
    v = None if values_are_keys else _leaf(NK, HEADS, DIM, seed=9)
    ea = _leaf(top.num_edges, HEADS, WIDTH, seed=10) if with_edge_attr else None
    att = _leaf(HEADS, WIDTH, seed=11)
    args = [pq, pk, v, ea, att, top.index[0], top.index[1], NQ, 0.2, None]
    (out_t, w_t, g_t), (out_k, w_k, g_k) = _both(GATv2Edges, args, 9, top,
                                                  [pq, pk, v, ea, att])
    torch.testing.assert_close(out_k, out_t, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(w_k, w_t, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(g_k, g_t, rtol=1e-10, atol=1e-10)


def test_kernels_in_float32_match_float64():
    """float32 inputs run float32 kernels whose results are float64's to float32 rounding."""
    top = _graph(seed=12)
    pq, pk, v = _leaf(NQ, HEADS, seed=13), _leaf(NK, HEADS, seed=14), _leaf(NK, HEADS, DIM, seed=15)
    layout = target_layout(top)
    out64, w64 = GATEdges.apply(pq, pk, v, None, top.index[0], top.index[1], NQ, 0.2, layout)
    out32, w32 = GATEdges.apply(pq.float(), pk.float(), v.float(), None, top.index[0],
                                top.index[1], NQ, 0.2, layout)
    assert out32.dtype == w32.dtype == torch.float32
    torch.testing.assert_close(out32.double(), out64, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(w32.double(), w64, rtol=1e-5, atol=1e-6)


def test_a_graph_without_edges_gives_zeros():
    """No edge at all: zero outputs, an empty (0, H) weight tensor, zero gradients."""
    top = edges(torch.zeros(2, 0, dtype=torch.long), (NK, NQ))
    pq, pk, v = _leaf(NQ, HEADS), _leaf(NK, HEADS), _leaf(NK, HEADS, DIM)
    out, w = GATEdges.apply(pq, pk, v, None, top.index[0], top.index[1], NQ, 0.2,
                            target_layout(top))
    assert out.shape == (NQ, HEADS, DIM) and (out == 0).all() and w.shape == (0, HEADS)
    grads = torch.autograd.grad(out.sum(), [pq, pk, v])
    assert all((g == 0).all() for g in grads)


@pytest.mark.parametrize("num_q", [1, 5, 40])
def test_by_target_is_a_stable_counting_sort(num_q):
    """Row pointers count the edges of each target; the edge order is numpy's stable
    argsort of the targets."""
    rng = np.random.default_rng(num_q)
    dst = rng.integers(0, num_q, size=200)
    indptr, perm = cpu_kernels.by_target(dst, num_q)
    np.testing.assert_array_equal(perm, np.argsort(dst, kind="stable"))
    np.testing.assert_array_equal(np.diff(indptr), np.bincount(dst, minlength=num_q))
    assert indptr[0] == 0 and indptr[-1] == dst.size


def test_the_layout_is_built_once_per_topology():
    """The grouping by target is cached on the topology: a second call reuses it."""
    top = _graph()
    assert target_layout(top) is target_layout(top)


@pytest.mark.parametrize("terms", [1, 2])
def test_head_dots_equal_the_torch_ops(terms):
    """Per-head dot products with T vectors: the values and both gradients of
    ``(x * att).sum(-1)``, in float64."""
    x, att = _leaf(NK, HEADS, DIM, seed=16), _leaf(terms, HEADS, DIM, seed=17)
    gen = torch.Generator().manual_seed(18)
    weights = torch.randn(terms, NK, HEADS, generator=gen, dtype=F64)
    got = HeadDots.apply(x, att)  # (T, N, H)
    want = (x[None] * att[:, None]).sum(-1)  # (T, N, H)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    g_got = torch.autograd.grad((got * weights).sum(), [x, att])
    g_want = torch.autograd.grad((want * weights).sum(), [x, att])
    torch.testing.assert_close(g_got, g_want, rtol=1e-12, atol=1e-12)


def test_head_dots_differentiate_twice():
    """Under create_graph the backward is differentiable: second derivatives agree."""
    x, att = _leaf(NK, HEADS, DIM, seed=19), _leaf(2, HEADS, DIM, seed=20)

    def second(out):
        (g_x,) = torch.autograd.grad(out.square().sum(), [x], create_graph=True)
        return torch.autograd.grad(g_x.square().sum(), [x, att])

    torch.testing.assert_close(second(HeadDots.apply(x, att)),
                               second((x[None] * att[:, None]).sum(-1)),
                               rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("same_rows", [True, False])
def test_node_terms_are_the_scores_own(same_rows):
    """The compiled node terms of a GAT score are its ``prepare`` steps' values and
    gradients, for queries that are the keys (both vectors at once) or other rows."""
    score = scores.GAT(HEADS, DIM).double()
    q = _leaf(NQ, HEADS, DIM, seed=21)
    k = q if same_rows else _leaf(NQ, HEADS, DIM, seed=22)
    got = node_terms(score, q, k, compiled=True)
    want = node_terms(score, q, k, compiled=False)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    params = [q, score.att_src, score.att_dst]
    loss = [(a * b).sum() for a, b in (got, want)]  # pq * pk couples both terms
    torch.testing.assert_close(torch.autograd.grad(loss[0], params),
                               torch.autograd.grad(loss[1], params), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("values_are_keys", [False, True])
@pytest.mark.parametrize("scale", [0.25, 1e4])
def test_dot_kernel_equals_the_torch_ops(values_are_keys, scale):
    """Dot-product logits: the same output, weights and gradients (queries, keys,
    values), with values that are the keys (their gradients add up) and huge logits."""
    top = _graph(seed=23)
    pq, pk = _leaf(NQ, HEADS, WIDTH, seed=24), _leaf(NK, HEADS, WIDTH, seed=25)
    v = None if values_are_keys else _leaf(NK, HEADS, DIM, seed=26)
    args = [pq, pk, v, top.index[0], top.index[1], NQ, scale, None]
    (out_t, w_t, g_t), (out_k, w_k, g_k) = _both(DotEdges, args, 7, top, [pq, pk, v])
    assert torch.isfinite(out_k).all()
    torch.testing.assert_close(out_k, out_t, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(w_k, w_t, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(g_k, g_t, rtol=1e-10, atol=1e-10)
    assert (out_k[NQ - 1] == 0).all()  # no edge enters the last target


def test_dot_kernel_differentiates_twice():
    """Under create_graph the compiled node's backward is differentiable: second
    derivatives equal those of the torch ops."""
    top = _graph(seed=27)
    pq, pk = _leaf(NQ, HEADS, WIDTH, seed=28), _leaf(NK, HEADS, WIDTH, seed=29)
    v = _leaf(NK, HEADS, DIM, seed=30)

    def second(layout):
        out, _ = DotEdges.apply(pq, pk, v, top.index[0], top.index[1], NQ, 0.5, layout)
        g_q, = torch.autograd.grad(out.square().sum(), [pq], create_graph=True)
        return torch.autograd.grad(g_q.square().sum(), [pq, pk, v])

    torch.testing.assert_close(second(target_layout(top)), second(None), rtol=1e-12,
                               atol=1e-12)


def test_the_molecule_network_runs_its_attention_compiled(monkeypatch):
    """On CPU tensors the default molecule network's GAT layer gets its node terms from
    ``HeadDots`` and its readout runs ``DotEdges``; its outputs and every parameter's
    gradient equal those of the torch ops the same nodes run elsewhere (float64)."""
    torch.manual_seed(0)
    net = MoleculeNetwork(NetworkConfig()).double()
    batch = collate_molecules([featurize(s) for s in ("CCO", "c1ccccc1CCN", "CC(=O)Nc1ccccc1")])
    batch.x, batch.edge_attr = batch.x.double(), batch.edge_attr.double()
    spied = {node: [] for node in (HeadDots, DotEdges, GATEdges)}
    for node, calls in spied.items():
        monkeypatch.setattr(node, "apply", _recording(node.apply, calls))

    def run():
        net.zero_grad()
        out = net(batch)
        out.square().sum().backward()
        return out.detach(), [p.grad.clone() for p in net.parameters()]

    compiled = run()
    assert all(spied.values()), {n.__name__: len(c) for n, c in spied.items()}
    assert all(call[-1] is not None for call in spied[DotEdges] + spied[GATEdges])  # layouts
    for name in ("setattn.engine.fused_gat", "setattn.engine.fused_dot"):
        monkeypatch.setattr(sys.modules[name], "cpu_kernels_serve", lambda x: False)
    spied[HeadDots].clear()
    torch_ops = run()
    assert not spied[HeadDots]  # the score's own prepare steps
    torch.testing.assert_close(compiled, torch_ops, rtol=1e-10, atol=1e-10)


def _recording(apply, calls: list):
    """``apply`` that also appends its arguments to ``calls``."""
    def spy(*args):
        calls.append(args)
        return apply(*args)
    return spy
