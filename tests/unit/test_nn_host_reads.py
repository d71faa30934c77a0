"""The forward (and backward) pass of every layer and engine path reads nothing back to the
host: it runs on ``meta`` tensors, which hold no values, with every way of reading a
tensor's value patched to count.

Sizes come from shapes and arguments (``num_nodes``, ``dim_size``, ``max_num_elements``)
or from a topology whose facts ``setattn.engine.precompute`` read once, on the CPU, before
it was moved to ``meta``. SPARSE_CSR is left out: torch's CSR kernels exist for CPU and
CUDA tensors only (``attend(..., path="sparse_csr")`` refuses ``meta``), and the CPU
builds its layouts with NumPy once per topology. Layers with self loops are left out as
PyG's are: ``remove_self_loops`` keeps a data-dependent number of edges.
"""

from __future__ import annotations

import contextlib

import pytest
import torch
from torch import nn

from setattn import attend, scores
from setattn.engine import precompute
from setattn.nn import (
    ISAB,
    MAB,
    PMA,
    SAB,
    DistanceBiasedBlock,
    GATConv,
    GATv2Conv,
    GlobalAttentionPool,
    MultiHeadAttention,
    TransformerBlock,
)
from setattn.topology import bipartite, complete, edges, pooling, window

META = torch.device("meta")
PTR = [0, 3, 3, 7, 12]  # four sets, one empty
N, G, D, H = 12, 4, 8, 2


@contextlib.contextmanager
def counted_reads():
    """Counts every read of a tensor's value into Python (``.item()``, ``int()``,
    ``float()``, ``bool()``, ``.tolist()``, ``__index__``, ``.numpy()``)."""
    names = ["item", "__int__", "__float__", "__bool__", "tolist", "__index__", "numpy"]
    saved = {name: getattr(torch.Tensor, name) for name in names}
    reads: list[str] = []

    def wrap(name):
        def read(self, *args, **kwargs):
            reads.append(name)
            return saved[name](self, *args, **kwargs)
        return read

    for name in names:
        setattr(torch.Tensor, name, wrap(name))
    try:
        yield reads
    finally:
        for name, fn in saved.items():
            setattr(torch.Tensor, name, fn)


def run_meta(fn, *params: torch.Tensor) -> None:
    """``fn()`` on meta tensors, then a backward pass; no host read in either."""
    with counted_reads() as reads:
        out = fn()
        out = out[0] if isinstance(out, tuple) else out
        assert out.device == META
        out.sum().backward()
    assert reads == [], f"host reads: {reads}"
    for p in params:
        assert p.grad is not None and p.grad.device == META


def qkv(nq: int, nk: int, d: int = D) -> tuple[torch.Tensor, ...]:
    return tuple(torch.randn(n, H, d, device=META, requires_grad=True) for n in (nq, nk, nk))


def meta_ptr(ptr: list[int]) -> torch.Tensor:
    return torch.tensor(ptr).to(META)


@pytest.mark.parametrize("path", ["dense_sdpa", "dense_blocks"])
@pytest.mark.parametrize("build", ["precompute", "max_size"])
def test_dense_paths(path, build):
    """Complete topologies: facts precomputed on the CPU, or bounds given by the caller."""
    if build == "precompute":
        top = precompute(complete(PTR), META)
    else:
        top = complete(meta_ptr(PTR), N, max_size=5, validate=False)
    q, k, v = qkv(N, N)
    run_meta(lambda: attend(q, k, v, top, path=path), q, k, v)


def test_dense_bipartite_with_bias_and_mask():
    top = precompute(bipartite([0, 2, 4, 6, 8], PTR), META)
    q, k, v = qkv(8, N)
    e = top.num_edges
    bias = torch.randn(e, H, device=META, requires_grad=True)
    mask = torch.ones(e, H, dtype=torch.bool, device=META)
    run_meta(lambda: attend(q, k, v, top, bias=bias, mask=mask), q, k, v, bias)


def test_window_blocks():
    top = precompute(window(PTR, 2), META)
    q, k, v = qkv(N, N)
    run_meta(lambda: attend(q, k, v, top, path="window_blocks"), q, k, v)


@pytest.mark.parametrize("score", ["dot", "gat", "gatv2"])
def test_edge_paths(score):
    """SPARSE_GATHER (dot, GAT) and FUSED_GATV2 (GATv2) over an explicit edge list."""
    ei = torch.randint(0, N, (2, 40)).to(META)
    top = edges(ei, N, validate=False)
    q, k, v = qkv(N, N)
    module = {"dot": None, "gat": scores.GAT(H, D), "gatv2": scores.GATv2(H, D)}[score]
    if module is not None:
        module = module.to(META)
    run_meta(lambda: attend(q, k, v, top, module), q, k, v)


def test_one_query_per_set_runs_as_edges():
    top = precompute(bipartite([0, 1, 2, 3, 4], PTR), META)
    q, k, v = qkv(G, N)
    run_meta(lambda: attend(q, k, v, top), q, k, v)


def test_pooling_edges():
    index = torch.randint(0, G, (N,)).to(META)
    q, k, v = qkv(G, N)
    run_meta(lambda: attend(q, k, v, pooling(index, G, validate=False)), q, k, v)


def meta_module(module: nn.Module) -> nn.Module:
    return module.to(META)


@pytest.mark.parametrize("cls", [GATConv, GATv2Conv])
@pytest.mark.parametrize("edge_dim", [None, 3])
def test_convs(cls, edge_dim):
    conv = meta_module(cls(D, 4, heads=H, add_self_loops=False, edge_dim=edge_dim))
    x = torch.randn(N, D, device=META, requires_grad=True)
    ei = torch.randint(0, N, (2, 40)).to(META)
    ea = None if edge_dim is None else torch.randn(40, edge_dim, device=META)
    run_meta(lambda: conv(x, ei, ea), x, *conv.parameters())


def test_bipartite_conv():
    conv = meta_module(GATConv((D, 5), 4, heads=H, add_self_loops=False))
    xs = torch.randn(N, D, device=META, requires_grad=True)
    xd = torch.randn(6, 5, device=META)
    ei = torch.stack([torch.randint(0, N, (30,)), torch.randint(0, 6, (30,))]).to(META)
    run_meta(lambda: conv((xs, xd), ei), xs)


@pytest.mark.parametrize("kind", ["gate", "query", "context"])
def test_global_attention_pool(kind):
    args = {"gate": dict(gate_nn=nn.Linear(D, 1)), "query": {},
            "context": dict(context_dim=3)}[kind]
    pool = meta_module(GlobalAttentionPool(D, heads=H if kind != "gate" else 1, **args))
    x = torch.randn(N, D, device=META, requires_grad=True)
    index = torch.randint(0, G, (N,)).to(META)
    context = torch.randn(G, 3, device=META) if kind == "context" else None
    kw = {} if context is None else {"context": context}
    run_meta(lambda: pool(x, index, dim_size=G, **kw), x)
    run_meta(lambda: pool(x, ptr=meta_ptr(PTR), **kw), x)


@pytest.mark.parametrize("seeds", [1, 3])
def test_pma(seeds):
    pool = meta_module(PMA(D, heads=H, num_seeds=seeds))
    x = torch.randn(N, D, device=META, requires_grad=True)
    index = torch.tensor([0, 0, 0, 2, 2, 2, 2, 3, 3, 3, 3, 3]).to(META)
    run_meta(lambda: pool(x, index, dim_size=G, max_num_elements=5), x, pool.seeds)
    run_meta(lambda: pool(x, ptr=meta_ptr(PTR), max_num_elements=5), x)


@pytest.mark.parametrize("cls", [SAB, ISAB])
def test_set_blocks(cls):
    block = meta_module(cls(D, heads=H))
    x = torch.randn(N, D, device=META, requires_grad=True)
    run_meta(lambda: block(x, ptr=meta_ptr(PTR), max_num_elements=5), x)
    batch = torch.tensor([0, 0, 0, 2, 2, 2, 2, 3, 3, 3, 3, 3]).to(META)
    run_meta(lambda: block(x, batch, num_graphs=G, max_num_elements=5), x)


def test_topology_layers():
    """Layers that take a topology: one precomputed on the CPU and moved to ``meta``."""
    top = precompute(complete(PTR), META)
    x = torch.randn(N, D, device=META, requires_grad=True)
    buckets = torch.zeros(top.num_edges, dtype=torch.long, device=META)
    layers = [(MultiHeadAttention(D, H), ()), (TransformerBlock(D, H), ()),
              (MAB(D, H), ()), (DistanceBiasedBlock(D, H, 3), (buckets,))]
    for layer, extra in layers:
        layer = meta_module(layer)
        run_meta(lambda layer=layer, extra=extra: layer(x, top, *extra), x)


def test_precompute_keeps_numbers():
    """A topology precomputed and moved gives the numbers of the one it came from."""
    q, k, v = (torch.randn(N, H, D, generator=torch.Generator().manual_seed(i))
               for i in range(3))
    for top in (complete(PTR), window(PTR, 1), bipartite([0, 1, 2, 3, 4], PTR)):
        nq = top.num_q
        want = attend(q[:nq], k, v, top)
        got = attend(q[:nq], k, v, precompute(top, "cpu"))
        assert torch.equal(want, got)


def test_max_size_gives_the_same_numbers():
    """Padding every set to the caller's bound gives the bucketed numbers."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(N, H, D, generator=g) for _ in range(3))
    for path in ("dense_sdpa", "dense_blocks"):
        want = attend(q, k, v, complete(PTR), path=path)
        got = attend(q, k, v, complete(torch.tensor(PTR), N, max_size=6, validate=False),
                     path=path)
        torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-6)
    pool = PMA(D, heads=H, num_seeds=2).eval()
    x = torch.randn(N, D, generator=g)
    torch.testing.assert_close(pool(x, ptr=torch.tensor(PTR), max_num_elements=5),
                               pool(x, ptr=torch.tensor(PTR)), atol=1e-6, rtol=1e-6)


def test_validation_stays_where_data_enter():
    """The constructors still check by default, with one-line errors."""
    with pytest.raises(ValueError, match="beyond num_nodes"):
        edges(torch.tensor([[0, 5], [1, 2]]), 3)
    with pytest.raises(ValueError, match="non-decreasing"):
        complete([0, 3, 2])
    with pytest.raises(ValueError, match="outside"):
        pooling(torch.tensor([0, 4]), 2)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_forward_and_backward_never_synchronise():
    """On a GPU, with ``torch.cuda.set_sync_debug_mode("error")``: every layer's forward
    and backward pass over data (and topologies) prepared before it."""
    cuda = torch.device("cuda")
    x = torch.randn(N, D, device=cuda, requires_grad=True)
    ei = torch.randint(0, N, (2, 40), device=cuda)
    ptr = torch.tensor(PTR, device=cuda)
    index = torch.tensor([0, 0, 0, 2, 2, 2, 2, 3, 3, 3, 3, 3], device=cuda)
    top = precompute(complete(PTR), cuda)
    calls = [
        (GATConv(D, 4, heads=H, add_self_loops=False), lambda m: m(x, ei)),
        (GATv2Conv(D, 4, heads=H, add_self_loops=False), lambda m: m(x, ei)),
        (GlobalAttentionPool(D, heads=H), lambda m: m(x, index, dim_size=G)),
        (PMA(D, heads=H, num_seeds=2), lambda m: m(x, ptr=ptr, max_num_elements=5)),
        (SAB(D, heads=H), lambda m: m(x, ptr=ptr, max_num_elements=5)),
        (ISAB(D, heads=H), lambda m: m(x, ptr=ptr, max_num_elements=5)),
        (TransformerBlock(D, H), lambda m: m(x, top)),
        (MultiHeadAttention(D, H), lambda m: m(x, top)),
    ]
    for module, call in calls:
        module = module.to(cuda)
        call(module)  # lazy state (first-call sizes) outside the checked pass
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            call(module).sum().backward()
        finally:
            torch.cuda.set_sync_debug_mode("default")
