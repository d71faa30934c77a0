"""GPU readiness without a GPU: no tensor is created without a device, and the engine's
per-device rules route as documented.

* A scan of all of setattn/ finds every
  ``torch.arange`` / ``zeros`` / ``tensor`` / ... call without ``device=``; each must be
  a module parameter or buffer (created on the CPU and moved by ``.to(device)``, PyTorch's
  convention) or sit on the allow-list below with its reason.
* The same rule at run time: with the default device set to ``meta``, a factory call
  without ``device=`` makes a meta tensor, which cannot mix with the CPU tensors of the
  call. Every topology kind on every path that applies, every layer and capture run that
  way and must give the plain run's numbers.
* Pure meta runs of the edge-list paths (the paths a GPU takes for graphs and pooling):
  shapes only, but any CPU tensor created inside would fail to mix with them.
* plan() on fake CUDA tensors (``FakeTensorMode``: a device without a GPU) takes the
  documented CUDA column: gather for edge lists, blocks for windows, SDPA for sets.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch_geometric.utils import to_torch_coo_tensor

import setattn
from setattn import scores as S
from setattn.engine import EnginePath, attend, plan
from setattn.engine.plan import CSR_MIN_EDGES, device_rules, forced_path
from setattn.nn import (
    ISAB,
    PMA,
    SAB,
    GATConv,
    GATv2Conv,
    GlobalAttentionPool,
    MultiHeadAttention,
    SinusoidalEncoding,
    TransformerBlock,
    set_positions,
)
from setattn.topology import Edges, bipartite, complete, edges, pooling, ptr_from_sizes, window

PACKAGE = Path(setattn.__file__).resolve().parent
SCOPE_EXCLUDED: tuple[str, ...] = ()  # every part of setattn/ is scanned
FACTORIES = {"arange", "zeros", "ones", "full", "empty", "tensor", "as_tensor", "eye",
             "linspace", "logspace", "rand", "randn", "randint", "randperm",
             "sparse_coo_tensor", "sparse_csr_tensor", "sparse_compressed_tensor"}
MODULE_STATE = {"nn.Parameter", "torch.nn.Parameter", "Parameter", "self.register_buffer"}

LOADER = "turns Python data read from files into CPU tensors for a data set; batches move"
CONVERT = "converts Python objects (token lists, networkx graphs) into a CPU Data object"
LISTS = "only for a Python list (a tensor keeps its device): it has none to inherit"
ALLOWED = {  # (file, function) -> why a factory call there has no device=
    ("datasets/bundled.py", "load_mr"): LOADER,
    ("datasets/molecules.py", "read_molecule_table"): LOADER,
    ("datasets/molecules.py", "load_molecule_sdf"): LOADER,
    ("datasets/planetoid.py", "_index_mask"): LOADER,
    ("datasets/text.py", "_class_indices"): LOADER,
    ("datasets/text.py", "load_text_csv"): LOADER,
    ("datasets/text.py", "load_labelled_lines"): LOADER,
    ("domains/graphs.py", "_stack"): CONVERT,
    ("domains/graphs.py", "from_networkx"): CONVERT,
    ("domains/text.py", "document_to_data"): CONVERT,
    ("matmul.py", "_probe_exact"): "probes the CPU's oneDNN products: CPU tensors by purpose",
    ("topology.py", "_long"): LISTS,
    ("topology.py", "edges"): LISTS,
    ("viz/molecules.py", "draw_atom_weights"): "drawing: the weights go to the CPU anyway",
    ("viz/molecules.py", "contribution_discs"): "drawing: the values go to the CPU anyway",
}


def deviceless_calls(path: Path) -> list[tuple[str, int, str]]:
    """(function, line, call) of every torch factory call without ``device=`` in a file,
    module parameters and buffers excepted."""
    tree = ast.parse(path.read_text())
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in FACTORIES and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "torch"):
            continue
        if any(k.arg == "device" for k in node.keywords):
            continue
        parent = parents.get(node)
        if isinstance(parent, ast.Call) and ast.unparse(parent.func) in MODULE_STATE:
            continue
        function, up = "<module>", node
        while up in parents:
            up = parents[up]
            if isinstance(up, ast.FunctionDef | ast.AsyncFunctionDef):
                function = up.name
                break
        found.append((function, node.lineno, ast.unparse(node)))
    return found


def scanned_files() -> list[Path]:
    return [p for p in sorted(PACKAGE.rglob("*.py"))
            if p.relative_to(PACKAGE).parts[0] not in SCOPE_EXCLUDED]


def test_no_tensor_is_created_without_a_device():
    offenders, used = [], set()
    for path in scanned_files():
        rel = path.relative_to(PACKAGE).as_posix()
        for function, line, call in deviceless_calls(path):
            if (rel, function) in ALLOWED:
                used.add((rel, function))
            else:
                offenders.append(f"setattn/{rel}:{line} in {function}: {call}")
    assert offenders == []
    assert set(ALLOWED) - used == set()  # no stale allow-list entry


def test_the_scan_sees_a_deviceless_call(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text("import torch\n"
                      "def f(x):\n"
                      "    a = torch.arange(x.shape[0])\n"
                      "    b = torch.zeros(3, device=x.device)\n"
                      "    w = torch.nn.Parameter(torch.empty(3))\n"
                      "    return torch.tensor([1, 2])\n")
    assert [(f, line) for f, line, _ in deviceless_calls(sample)] == [("f", 3), ("f", 6)]


# ---------------------------------------------------------------------------------------
# run time: factories default to the meta device


H, D = 2, 4


def _qkv(nq: int, nk: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(nq, H, D, generator=g), torch.randn(nk, H, D, generator=g),
            torch.randn(nk, H, D, generator=g))


def _topologies() -> dict[str, object]:
    sizes = [3, 0, 5, 2]
    ptr = ptr_from_sizes(sizes)
    g = torch.Generator().manual_seed(1)
    many = torch.randint(0, 40, (2, CSR_MIN_EDGES), generator=g)  # big enough for CSR
    return {
        "complete": complete(ptr),
        "bipartite": bipartite(ptr_from_sizes([2, 1, 3, 1]), ptr),
        "pool (bipartite, one query)": bipartite(ptr_from_sizes([1, 1, 1, 1]), ptr),
        "pooling": pooling(torch.tensor([0, 0, 2, 2, 2, 1, 3, 3, 3, 3]), 4),
        "window": window(ptr, 1),
        "window, large": window(ptr_from_sizes([CSR_MIN_EDGES]), 1),
        "edges": edges(torch.tensor([[0, 1, 2, 3, 4, 4], [1, 2, 0, 0, 3, 4]]), 5),
        "edges, large": edges(many, 40),
    }


def _score(name: str):
    return S.ScaledDot() if name == "dot" else S.GATv2(H, D, project=False)


def _applies(top, score_name: str, path: EnginePath) -> bool:
    try:
        forced_path(path, *_qkv(top.num_q, top.num_kv), top, _score(score_name),
                    need_weights=True)
    except ValueError:
        return False
    return True


def _cases() -> list[tuple[str, str, EnginePath | None]]:
    """(topology, score, path) for the planned path and every forced path that applies."""
    tops = _topologies()
    return [(name, score, path) for name in tops for score in ("dot", "gatv2")
            for path in [None, *EnginePath] if path is None or _applies(tops[name], score, path)]


@pytest.mark.parametrize("top_name,score_name,path", _cases(),
                         ids=lambda v: getattr(v, "value", v) or "planned")
def test_attend_creates_no_deviceless_tensor(top_name, score_name, path):
    top, fresh, score = _topologies()[top_name], _topologies()[top_name], _score(score_name)
    q, k, v = _qkv(top.num_q, top.num_kv)
    with torch.device("meta"):  # first, so that nothing is cached on the topology yet
        got, got_w = attend(q, k, v, fresh, score, path=path, return_weights=True)
    want, want_w = attend(q, k, v, top, score, path=path, return_weights=True)
    assert got.device.type == "cpu" and torch.equal(got, want)
    assert torch.equal(got_w.weights, want_w.weights)
    assert torch.equal(got_w.edge_index, want_w.edge_index)


def _graph():
    g = torch.Generator().manual_seed(2)
    x = torch.randn(10, 8, generator=g)
    ei = torch.randint(0, 10, (2, 30), generator=g)
    batch = torch.tensor([0, 0, 0, 1, 1, 2, 2, 2, 2, 2])
    return x, ei, torch.randn(30, 3, generator=g), batch


def _layer_runs() -> dict[str, object]:
    x, ei, ea, batch = _graph()
    ptr = torch.tensor([0, 3, 5, 10])
    gat, gatv2 = GATConv(8, 4, heads=2, edge_dim=3), GATv2Conv(8, 4, heads=2, edge_dim=3)
    pool = GlobalAttentionPool(8, heads=2)
    gate = GlobalAttentionPool(8, gate_nn=torch.nn.Linear(8, 1))
    pma, sab, isab = PMA(8, heads=2, num_seeds=2), SAB(8, 2), ISAB(8, 2, num_inducing=3)
    mha, block, pos = MultiHeadAttention(8, 2), TransformerBlock(8, heads=2), SinusoidalEncoding(8)
    top = window(ptr, 1)
    adj = to_torch_coo_tensor(torch.unique(ei, dim=1).flip(0), size=(10, 10))  # adj_t
    return {
        "GATConv": lambda: gat(x, ei, ea),
        "GATConv alpha": lambda: gat(x, ei, ea, return_attention_weights=True)[1][1],
        "GATConv sparse adj_t": lambda: gat(x, adj),
        "GATv2Conv": lambda: gatv2(x, ei, ea),
        "GATv2Conv bipartite": lambda: gatv2((x, x[:6]), ei % 6, ea),
        "GlobalAttentionPool batch": lambda: pool(x, batch),
        "GlobalAttentionPool ptr": lambda: pool(x, ptr=ptr),
        "GlobalAttentionPool gate": lambda: gate(x, batch),
        "PMA": lambda: pma(x, batch),
        "SAB": lambda: sab(x, batch),
        "ISAB": lambda: isab(x, batch),
        "MultiHeadAttention window": lambda: mha(x, top),
        "TransformerBlock edges": lambda: block(x, edges(ei, 10)),
        "SinusoidalEncoding": lambda: pos(set_positions(ptr)),
        "capture": lambda: _captured(gat, pool, x, ei, batch),
    }


def _captured(gat, pool, x, ei, batch):
    with setattn.capture() as att:
        pool(gat(x, ei), batch)
    return torch.cat([g.weights.flatten() for g in att.values()])


@pytest.mark.parametrize("name", list(_layer_runs()))
def test_layers_create_no_deviceless_tensor(name):
    run = _layer_runs()[name]  # no dropout anywhere: two runs give the same numbers
    with torch.device("meta"):  # first, so that no memo or cache holds a CPU result yet
        got = run()
    want = run()
    assert got.device.type == "cpu"
    assert torch.equal(got, want)


# ---------------------------------------------------------------------------------------
# pure meta: the edge-list paths


@pytest.mark.parametrize("path,extras", [
    (EnginePath.SPARSE_GATHER, "plain"), (EnginePath.SPARSE_GATHER, "bias and mask"),
    (EnginePath.SPARSE_GATHER, "hard"), (EnginePath.SPARSE_GATHER, "weights"),
    (EnginePath.FUSED_GATV2, "plain"), (EnginePath.FUSED_GATV2, "weights")])
def test_edge_paths_run_on_meta_tensors(path, extras):
    e, nq, nk = 50, 7, 9
    meta = torch.device("meta")
    index = torch.empty(2, e, dtype=torch.long, device=meta)
    top = Edges(index, num_q=nq, num_kv=nk)
    q, k, v = (torch.empty(n, H, D, device=meta, requires_grad=True) for n in (nq, nk, nk))
    kw = {}
    if extras == "bias and mask":
        kw = dict(bias=torch.empty(e, H, device=meta),
                  mask=torch.empty(e, H, dtype=torch.bool, device=meta))
    elif extras == "hard":
        kw = dict(hard=2)
    out = attend(q, k, v, top, S.GATv2(H, D, project=False).to(meta), path=path,
                 return_weights=extras == "weights", **kw)
    out = out[0] if extras == "weights" else out
    assert out.device == meta and out.shape == (nq, H, D)
    out.sum().backward()
    assert q.grad.device == meta and k.grad.shape == (nk, H, D)


# ---------------------------------------------------------------------------------------
# the per-device rules


def test_device_rules():
    assert device_rules(torch.zeros(1)) == "cpu"
    assert device_rules(torch.zeros(1, device="meta")) == "other"
    with FakeTensorMode():
        assert device_rules(torch.zeros(1, device="cuda")) == "cuda"


FAKE_CUDA = {  # topology -> path plan() takes on CUDA (the reasoned column)
    "complete": EnginePath.DENSE_SDPA,
    "bipartite": EnginePath.DENSE_SDPA,
    "pool (bipartite, one query)": EnginePath.SPARSE_GATHER,
    "pooling": EnginePath.SPARSE_GATHER,
    "window": EnginePath.WINDOW_BLOCKS,
    "window, large": EnginePath.WINDOW_BLOCKS,
    "edges": EnginePath.SPARSE_GATHER,
    "edges, large": EnginePath.SPARSE_GATHER,
}


@pytest.mark.parametrize("top_name", list(FAKE_CUDA))
def test_plan_on_cuda_takes_the_documented_column(top_name):
    top = _topologies()[top_name]
    plan(*_qkv(top.num_q, top.num_kv), top)  # caches the facts plan() reads off the data
    gatv2, sizes = S.GATv2(H, D, project=False), (top.num_q, top.num_kv, top.num_kv)
    with FakeTensorMode(allow_non_fake_inputs=True):
        q, k, v = (torch.empty(n, H, D, device="cuda") for n in sizes)
        assert plan(q, k, v, top) is FAKE_CUDA[top_name]
        if FAKE_CUDA[top_name] is EnginePath.SPARSE_GATHER:  # edge lists fuse GATv2 there too
            assert plan(q, k, v, top, gatv2) is EnginePath.FUSED_GATV2
        # the CSR kernels are never planned on CUDA, but may be forced (to measure them)
        if isinstance(top, Edges):
            assert forced_path("sparse_csr", q, k, v, top) is EnginePath.SPARSE_CSR
