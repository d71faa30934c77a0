"""plan(): which path computes an ``attend`` call; ``attend(..., path=...)`` forcing one.

* plan() gives the expected path for a representative case of every path and of every
  rule that routes between them (the table in ``setattn.engine.plan``); it reads only
  shapes, devices and identities, so it answers for meta tensors too;
* forcing any path that applies gives the default's output, weights and gradients (to
  1e-9 in float64), and the forced path is the one that ran; a path that does not apply
  raises a ValueError naming it;
* the CSR kernels' "beta" notice is silenced where the CSR tensors are built, without
  touching the process's warning filters.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from reference import DK, DV, EDGE_ATTR_WIDTH, HEADS, make_case, make_score

import setattn
from setattn import bipartite, complete, edges, window
from setattn import scores as S
from setattn.engine import EnginePath, attend, plan
from setattn.engine.plan import CSR_MIN_EDGES, CSR_MIN_EDGES_FEW, FUSED_MAX_EDGES
from setattn.topology import ptr_from_sizes

P = EnginePath
F64 = torch.float64
TOL = dict(rtol=1e-9, atol=1e-10)


def _qkv(nq, nk, device="cpu", dtype=torch.float32, grad=False):
    q = torch.randn(nq, HEADS, DK, dtype=dtype, device=device, requires_grad=grad)
    k = torch.randn(nk, HEADS, DK, dtype=dtype, device=device, requires_grad=grad)
    v = torch.randn(nk, HEADS, DV, dtype=dtype, device=device, requires_grad=grad)
    return q, k, v


def _random_edges(num_q, num_kv, num_edges, seed=0):
    gen = torch.Generator().manual_seed(seed)
    src = torch.randint(0, num_kv, (num_edges,), generator=gen)
    dst = torch.randint(0, num_q, (num_edges,), generator=gen)
    return edges(torch.stack([src, dst]), (num_kv, num_q))


def _pool(sizes_kv):
    """One query per set attending to its items (attention pooling)."""
    return bipartite(ptr_from_sizes([1] * len(sizes_kv)), ptr_from_sizes(sizes_kv))


class OptedOut(S.GATv2):
    """A GATv2 variant that declines the fused kernel."""

    def fused_edges(self):
        return None


def _plan(top, score=None, device="cpu", dtype=torch.float32, **kwargs):
    q, k, v = _qkv(top.num_q, top.num_kv, device=device, dtype=dtype)
    return plan(q, k, v, top, score, **kwargs)


RAGGED = complete(ptr_from_sizes([3, 7, 1, 12]))
GATV2 = S.GATv2(HEADS, DK)
GAT = S.GAT(HEADS, DK)
BIG = CSR_MIN_EDGES  # edges, over 64 x 64 nodes: more edges than keys

PLANNED = {  # case -> (plan() arguments, expected path)
    "complete, scaled dot": (dict(top=RAGGED), P.DENSE_SDPA),
    "complete, bias and mask": (dict(top=RAGGED, bias=torch.zeros(1), mask=torch.ones(1)),
                                P.DENSE_SDPA),
    "complete, weights wanted": (dict(top=RAGGED, need_weights=True), P.DENSE_BLOCKS),
    "complete, additive score": (dict(top=RAGGED, score=S.Additive(HEADS, DK)), P.DENSE_BLOCKS),
    "complete, hard": (dict(top=RAGGED, hard="argmax"), P.DENSE_BLOCKS),
    "complete, GAT edge_attr": (dict(top=RAGGED, score=S.GAT(HEADS, DK),
                                     edge_attr=torch.zeros(1, 1)), P.DENSE_BLOCKS),
    "complete of single items is no pooling": (dict(top=complete([0, 1, 2, 3])), P.DENSE_SDPA),
    "bipartite, 2 queries in a set": (dict(top=bipartite([0, 2, 3], [0, 4, 9])), P.DENSE_SDPA),
    "pooling, small": (dict(top=_pool([5, 9, 2])), P.FUSED_DOT),
    "pooling, FUSED_MAX_EDGES items": (dict(top=_pool([FUSED_MAX_EDGES // 2] * 2)),
                                       P.FUSED_DOT),
    "pooling, above FUSED_MAX_EDGES": (dict(top=_pool([FUSED_MAX_EDGES // 2 + 1] * 2)),
                                       P.SPARSE_CSR),
    "pooling, mask": (dict(top=_pool([5, 9, 2]), mask=torch.ones(16, dtype=torch.bool)),
                      P.SPARSE_GATHER),
    "pooling, additive": (dict(top=_pool([5, 9, 2]), score=S.Additive(HEADS, DK)),
                          P.SPARSE_GATHER),
    "pooling, accelerator": (dict(top=_pool([5, 9, 2]), device="meta"), P.SPARSE_GATHER),
    "pooling, dropout, below CSR_MIN_EDGES_FEW": (
        dict(top=_pool([CSR_MIN_EDGES_FEW - 1]), dropout=0.1), P.SPARSE_GATHER),
    "pooling, dropout, CSR_MIN_EDGES_FEW items": (
        dict(top=_pool([CSR_MIN_EDGES_FEW // 2] * 2), dropout=0.1), P.SPARSE_CSR),
    "pooling, GATv2": (dict(top=_pool([5, 9, 2]), score=GATV2), P.FUSED_GATV2),
    "edges, GATv2": (dict(top=_random_edges(64, 64, BIG), score=GATV2), P.FUSED_GATV2),
    "edges, GATv2 (E, H, A) edge_attr": (dict(top=_random_edges(5, 5, 9), score=GATV2,
                                              edge_attr=torch.zeros(9, HEADS, DK)),
                                         P.FUSED_GATV2),
    "edges, GATv2 (E, H) edge_attr": (dict(top=_random_edges(5, 5, 9), score=GATV2,
                                           edge_attr=torch.zeros(9, HEADS)), P.SPARSE_GATHER),
    "edges, GATv2, bias": (dict(top=_random_edges(5, 5, 9), score=GATV2,
                                bias=torch.zeros(9)), P.SPARSE_GATHER),
    "edges, GATv2, mask": (dict(top=_random_edges(5, 5, 9), score=GATV2,
                                mask=torch.ones(9, dtype=torch.bool)), P.SPARSE_GATHER),
    "edges, GATv2, dropout": (dict(top=_random_edges(5, 5, 9), score=GATV2, dropout=0.1),
                              P.SPARSE_GATHER),
    "edges, GATv2, dropout, eval": (dict(top=_random_edges(5, 5, 9), score=GATV2,
                                         dropout=0.1, training=False), P.FUSED_GATV2),
    "edges, GATv2, hard": (dict(top=_random_edges(5, 5, 9), score=GATV2, hard=2),
                           P.SPARSE_GATHER),
    "edges, GATv2, negative slope": (dict(top=_random_edges(5, 5, 9),
                                          score=S.GATv2(HEADS, DK, negative_slope=-0.1)),
                                     P.SPARSE_GATHER),
    "edges, GATv2 that opts out": (dict(top=_random_edges(5, 5, 9), score=OptedOut(HEADS, DK)),
                                   P.SPARSE_GATHER),
    "edges, GATv2 with bias, big": (dict(top=_random_edges(64, 64, BIG), score=GATV2,
                                         bias=torch.zeros(BIG)), P.SPARSE_CSR),
    "edges, GAT, CPU": (dict(top=_random_edges(64, 64, BIG - 1), score=GAT), P.FUSED_GAT),
    "edges, GAT, CPU, FUSED_MAX_EDGES": (
        dict(top=_random_edges(300, 300, FUSED_MAX_EDGES), score=GAT), P.FUSED_GAT),
    "edges, GAT, CPU, above FUSED_MAX_EDGES": (
        dict(top=_random_edges(300, 300, FUSED_MAX_EDGES + 1), score=GAT), P.FUSED_GAT),
    "edges, GAT, CPU, dropout": (dict(top=_random_edges(64, 64, BIG), score=GAT, dropout=0.1),
                                 P.SPARSE_CSR),
    "edges, GAT, accelerator": (dict(top=_random_edges(64, 64, BIG), score=GAT,
                                     device="meta"), P.FUSED_GAT),
    "edges, GAT (E, H) edge_attr, accelerator": (
        dict(top=_random_edges(5, 5, 9), score=GAT, edge_attr=torch.zeros(9, HEADS),
             device="meta"), P.FUSED_GAT),
    "edges, GAT (E, H, A) edge_attr, accelerator": (
        dict(top=_random_edges(5, 5, 9), score=GAT, edge_attr=torch.zeros(9, HEADS, 2),
             device="meta"), P.SPARSE_GATHER),
    "edges, GAT, dropout, accelerator": (dict(top=_random_edges(5, 5, 9), score=GAT,
                                              dropout=0.1, device="meta"), P.SPARSE_GATHER),
    "edges, GAT, negative slope": (dict(top=_random_edges(5, 5, 9),
                                        score=S.GAT(HEADS, DK, negative_slope=-0.1)),
                                   P.SPARSE_GATHER),
    "edges, scaled dot": (dict(top=_random_edges(64, 64, BIG)), P.FUSED_DOT),
    "edges, bilinear": (dict(top=_random_edges(64, 64, BIG), score=S.Bilinear(HEADS, DK)),
                        P.FUSED_DOT),
    "edges, scaled dot, float16": (dict(top=_random_edges(64, 64, BIG), dtype=torch.float16),
                                   P.SPARSE_CSR),
    "edges, dropout, below CSR_MIN_EDGES": (dict(top=_random_edges(64, 64, BIG - 1),
                                                 dropout=0.1), P.SPARSE_GATHER),
    "edges, dropout, CSR_MIN_EDGES": (dict(top=_random_edges(64, 64, BIG), dropout=0.1),
                                      P.SPARSE_CSR),
    "edges, dropout, CSR_MIN_EDGES but no more than keys": (
        dict(top=_random_edges(64, 2 * BIG, BIG), dropout=0.1), P.SPARSE_GATHER),
    "edges, dropout, more than Nq * Nk (repeated)": (
        dict(top=_random_edges(30, 30, BIG), dropout=0.1), P.SPARSE_GATHER),
    "edges, accelerator": (dict(top=_random_edges(64, 64, BIG), device="meta"),
                           P.SPARSE_GATHER),
    "edges, GATv2, accelerator": (dict(top=_random_edges(64, 64, BIG), score=GATV2,
                                       device="meta"), P.FUSED_GATV2),
    "window, CPU, small": (dict(top=window([0, 9, 20], 2)), P.FUSED_DOT),
    "window, CPU, dropout, small": (dict(top=window([0, 9, 20], 2), dropout=0.1),
                                    P.SPARSE_GATHER),
    "window, CPU, dropout, CSR_MIN_EDGES": (dict(top=window([0, BIG], 1), dropout=0.1),
                                            P.SPARSE_CSR),
    "window, CPU, GATv2": (dict(top=window([0, 9, 20], 2), score=GATV2), P.FUSED_GATV2),
    "window, accelerator": (dict(top=window([0, BIG], 1), device="meta"), P.WINDOW_BLOCKS),
    "complete, accelerator": (dict(top=RAGGED, device="meta"), P.DENSE_SDPA),
}


@pytest.mark.parametrize("case", list(PLANNED))
def test_plan_picks_the_path(case):
    kwargs, want = PLANNED[case]
    assert _plan(**kwargs) is want


def test_plan_under_torch_compile(monkeypatch):
    """Compiled runs never take the CSR kernels: windows stay blocks, edge lists gather."""
    assert _plan(window([0, BIG], 1), dropout=0.1) is P.SPARSE_CSR
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    assert _plan(window([0, BIG], 1)) is P.WINDOW_BLOCKS
    assert _plan(window([0, BIG], 1), dropout=0.1) is P.WINDOW_BLOCKS
    assert _plan(_random_edges(64, 64, BIG)) is P.SPARSE_GATHER
    with pytest.raises(ValueError, match="SPARSE_CSR"):
        q, k, v = _qkv(64, 64)
        attend(q, k, v, _random_edges(64, 64, BIG), path=P.SPARSE_CSR)


def test_capture_wants_weights():
    """An open capture block needs the weights, which DENSE_SDPA does not give."""
    q, k, v = _qkv(RAGGED.num_q, RAGGED.num_kv)
    attend(q, k, v, RAGGED, path=P.DENSE_SDPA)
    with setattn.capture() as att, pytest.raises(ValueError, match="DENSE_SDPA.*capture"):
        attend(q, k, v, RAGGED, path=P.DENSE_SDPA)
    with setattn.capture() as att:
        out = attend(q, k, v, RAGGED)
    torch.testing.assert_close(out, attend(q, k, v, RAGGED, path="dense_sdpa"))
    assert att["attend"].weights.shape == (RAGGED.num_edges, HEADS)


# ---------------------------------------------------------------------------------------
# forcing a path


EDGE_GRAD_FN = {P.SPARSE_CSR: "EdgeSumBackward", P.SPARSE_GATHER: "IndexAddBackward0",
                P.FUSED_GATV2: "GATv2EdgesBackward", P.FUSED_GAT: "GATEdgesBackward",
                P.FUSED_DOT: "DotEdgesBackward"}
EVERY_EDGE_PATH = {P.SPARSE_CSR, P.SPARSE_GATHER}

FORCED = {  # case -> (topology, score, extras, values are the keys, paths that apply)
    "complete, dot, bias and mask": ("complete", "scaled_dot", ("bias", "mask"), False,
                                     {P.DENSE_SDPA, P.DENSE_BLOCKS} | EVERY_EDGE_PATH),
    "bipartite, additive, edge_attr": ("bipartite", "additive", ("edge_attr",), False,
                                       {P.DENSE_BLOCKS} | EVERY_EDGE_PATH),
    "pooling, dot": ("pool", "dot", ("mask",), False,
                     {P.DENSE_SDPA, P.DENSE_BLOCKS} | EVERY_EDGE_PATH),
    "pooling, scaled dot": ("pool", "scaled_dot", (), False,
                            {P.DENSE_SDPA, P.DENSE_BLOCKS, P.FUSED_DOT} | EVERY_EDGE_PATH),
    "edges, bilinear": ("edges", "bilinear", (), False, {P.FUSED_DOT} | EVERY_EDGE_PATH),
    "edges, dot, values are keys": ("edges", "dot", (), True, {P.FUSED_DOT} | EVERY_EDGE_PATH),
    "window, scaled dot": ("window", "scaled_dot", (), False,
                           {P.WINDOW_BLOCKS, P.FUSED_DOT} | EVERY_EDGE_PATH),
    "pooling, GAT, hard": ("pool", "gat", ("hard",), False, {P.DENSE_BLOCKS} | EVERY_EDGE_PATH),
    "window, dot, bias": ("window", "scaled_dot", ("bias",), False,
                          {P.WINDOW_BLOCKS} | EVERY_EDGE_PATH),
    "window, GATv2": ("window", "gatv2", (), False,
                      {P.WINDOW_BLOCKS, P.FUSED_GATV2} | EVERY_EDGE_PATH),
    "edges, GATv2, edge_attr": ("edges", "gatv2", ("edge_attr",), False,
                                {P.FUSED_GATV2} | EVERY_EDGE_PATH),
    "edges, unprojected GATv2, values are keys": ("edges", "gatv2_unprojected", (), True,
                                                  {P.FUSED_GATV2} | EVERY_EDGE_PATH),
    "edges, unprojected GATv2, values are keys, mask": (
        "edges", "gatv2_unprojected", ("mask",), True, EVERY_EDGE_PATH),
    "edges, GAT, edge_attr": ("edges", "gat", ("edge_attr",), False,
                              {P.FUSED_GAT} | EVERY_EDGE_PATH),
    "edges, GAT, bias": ("edges", "gat", ("bias",), False, EVERY_EDGE_PATH),
    "edges, bilinear, hard": ("edges", "bilinear", ("hard",), False, EVERY_EDGE_PATH),
    "edges, user's module, values are keys": ("edges", "user", ("edge_attr",), True,
                                              EVERY_EDGE_PATH),
    "complete, user's module, bias": ("complete", "user", ("bias",), False,
                                      {P.DENSE_BLOCKS} | EVERY_EDGE_PATH),
}


def _extra(name, score_name, e):
    """One per-call input of ``attend`` for a case with ``e`` edges."""
    if name == "bias":
        return dict(bias=torch.randn(e, HEADS, dtype=F64, requires_grad=True))
    if name == "mask":
        return dict(mask=torch.rand(e) > 0.3)
    if name == "hard":
        return dict(hard=2)
    width = EDGE_ATTR_WIDTH[score_name]
    shape = (e, HEADS) if width is None else (e, HEADS, width)
    return dict(edge_attr=torch.randn(*shape, dtype=F64, requires_grad=True))


def _forced_inputs(topology, score_name, extras, values_are_keys):
    case = make_case(topology)
    score = make_score(score_name)
    q, k, v = _qkv(case.num_q, case.num_kv, dtype=F64, grad=True)
    v = k if values_are_keys else v
    extra = {n: t for x in extras for n, t in _extra(x, score_name, case.num_edges).items()}
    return case.topology, score, (q, k, v), extra


class SdpaCalls:
    """Counts calls of F.scaled_dot_product_attention while passing them through."""

    def __init__(self, monkeypatch):
        self.calls, self._real = 0, F.scaled_dot_product_attention
        monkeypatch.setattr(F, "scaled_dot_product_attention", self)

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self._real(*args, **kwargs)


def _run(top, score, qkv, extra, path=None, return_weights=False):
    q, k, v = qkv
    res = attend(q, k, v, top, score, path=path, return_weights=return_weights, **extra)
    out = res[0] if return_weights else res
    leaves = [t for t in (q, k, v, *score.parameters(), *extra.values())
              if isinstance(t, torch.Tensor) and t.requires_grad]
    grads = torch.autograd.grad(out, leaves, torch.ones_like(out), allow_unused=True)
    return out, grads, (res[1].weights if return_weights else None)


@pytest.mark.parametrize("name", list(FORCED))
def test_forced_paths_give_the_default_numbers(name, monkeypatch):
    topology, score_name, extras, values_are_keys, applies = FORCED[name]
    top, score, qkv, extra = _forced_inputs(topology, score_name, extras, values_are_keys)
    q, k, v = qkv
    assert plan(q, k, v, top, score, **extra) in applies
    want, want_grads, want_w = _run(top, score, qkv, extra, return_weights=True)
    sdpa = SdpaCalls(monkeypatch)
    for path in EnginePath:
        if path not in applies:
            with pytest.raises(ValueError, match=f"path {path.name} does not apply"):
                attend(q, k, v, top, score, path=path, **extra)
            continue
        before = sdpa.calls
        out, grads, _ = _run(top, score, qkv, extra, path=path)
        assert (sdpa.calls > before) == (path is P.DENSE_SDPA)
        if path in EDGE_GRAD_FN:  # the node that made the output is the forced path's
            # a sub-choice (plan.py): the sum reuses key rows that the logits gathered
            reuse = (path is P.SPARSE_CSR and values_are_keys
                     and score_name not in ("dot", "scaled_dot", "bilinear"))
            assert out.grad_fn.name() == EDGE_GRAD_FN[P.SPARSE_GATHER if reuse else path]
        torch.testing.assert_close(out, want, **TOL)
        for got, exp in zip(grads, want_grads, strict=True):
            if exp is None or got is None:
                assert (exp is None or not exp.any()) and (got is None or not got.any())
            else:
                torch.testing.assert_close(got, exp, **TOL)
        if path is not P.DENSE_SDPA:
            torch.testing.assert_close(_run(top, score, qkv, extra, path, True)[2], want_w, **TOL)


def test_forcing_csr_on_a_multigraph_beyond_its_pairs():
    top = edges(torch.tensor([[0, 0, 0, 1, 1], [0, 0, 1, 1, 1]]), 2)  # 5 edges, 4 pairs
    q, k, v = _qkv(2, 2)
    with pytest.raises(ValueError, match="SPARSE_CSR.*Nq \\* Nk"):
        attend(q, k, v, top, path=P.SPARSE_CSR)
    torch.testing.assert_close(attend(q, k, v, top, path=P.SPARSE_GATHER), attend(q, k, v, top))


def test_path_must_be_an_engine_path():
    q, k, v = _qkv(RAGGED.num_q, RAGGED.num_kv)
    with pytest.raises(ValueError, match="not a valid EnginePath"):
        attend(q, k, v, RAGGED, path="sdpa")


def test_csr_notice_silenced_where_built_not_process_wide():
    """Importing setattn leaves the warning filters alone; running the CSR kernels with
    every UserWarning an error does not raise (torch's once-per-process "beta" notice
    is silenced where the CSR tensor is built)."""
    code = (
        "import warnings, torch, torch_geometric\n"  # PyG's own import sets filters
        "before = list(warnings.filters)\n"
        "import setattn\n"
        "from setattn.engine import EnginePath\n"
        "assert warnings.filters == before, 'import changed the warning filters'\n"
        "warnings.simplefilter('error', UserWarning)\n"
        "top = setattn.edges(torch.tensor([[0, 1, 1], [1, 0, 1]]), 2)\n"
        "q = torch.randn(2, 1, 3, requires_grad=True)\n"
        "setattn.attend(q, q, q, top, path=EnginePath.SPARSE_CSR).sum().backward()\n"
        "assert warnings.filters[0][2] is UserWarning and warnings.filters[0][0] == 'error'\n"
    )
    root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": root, "OMP_NUM_THREADS": "1"}
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
