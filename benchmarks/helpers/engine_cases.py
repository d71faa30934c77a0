"""The cases of benchmarks/engine.py: each builder returns a zero-argument closure that
runs one forward + backward (the module docstring of engine.py says what each compares).

The anchors take the flat node layout PyG batches in, q, k, v (N, H, D) with the sets
back to back (``ptr`` (G + 1,) offsets, ``batch`` (N,) set of every node), and return
the (N, H, D) output of every item attending to every item of its own set, with
``scaled_dot_product_attention`` doing the attention: :func:`pyg_dense_sdpa` (PyG's
``to_dense_batch`` pads every set to the largest, one masked SDPA call),
:func:`nested_sdpa` (jagged nested tensors, ``torch.nested``) and :func:`bucket_sdpa`
(sets grouped into power-of-two size buckets, ``to_dense_batch`` + SDPA per bucket: a
user's own size bucketing in a dozen lines).

Cases whose name starts with ``small_`` or ``ragged_`` take a new batch on every call
(``small_``: the next of ``SMALL_BATCHES`` batches of different set sizes, as in
training; ``ragged_``: the same sizes, a new topology), and setattn builds its topology
from ``ptr`` inside the call, as a training step on a new batch does.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor
from torch_geometric.utils import to_dense_batch

import setattn
from setattn import scores
from setattn.engine.dense import bucket_plan

HEADS, HEAD_DIM = 4, 16
DIM = HEADS * HEAD_DIM
COMPLETE_SETS, COMPLETE_ITEMS = 64, 128
SMALL_SETS, SMALL_SIZES, SMALL_BATCHES = 64, (20, 60), 16
D64_SETS, D64_ITEMS, D64_HEADS, D64_DIM = 8, 512, 8, 64


def pyg_dense_sdpa(q: Tensor, k: Tensor, v: Tensor, batch: Tensor, num_sets: int) -> Tensor:
    """Every set padded to the largest by ``to_dense_batch``, one masked SDPA call.

    Args:
        q, k, v: (N, H, D); batch: (N,) sorted set index; num_sets: G.

    Returns:
        (N, H, D).
    """
    heads, dim = q.shape[1], q.shape[2]
    qd, valid = to_dense_batch(q.flatten(1), batch, batch_size=num_sets)  # (G, L, H*D)
    kd, _ = to_dense_batch(k.flatten(1), batch, batch_size=num_sets)
    vd, _ = to_dense_batch(v.flatten(1), batch, batch_size=num_sets)
    g, length = valid.shape
    qd, kd, vd = (t.view(g, length, heads, dim).transpose(1, 2) for t in (qd, kd, vd))
    mask = None if bool(valid.all()) else valid[:, None, None, :]  # (G, 1, 1, L)
    out = F.scaled_dot_product_attention(qd, kd, vd, attn_mask=mask)  # (G, H, L, D)
    return out.transpose(1, 2)[valid]  # (N, H, D)


def nested_sdpa(q: Tensor, k: Tensor, v: Tensor, ptr: Tensor) -> Tensor:
    """SDPA on jagged nested tensors built from the flat rows and ``ptr``.

    Args:
        q, k, v: (N, H, D); ptr: (G + 1,) set offsets.

    Returns:
        (N, H, D).
    """
    qn, kn, vn = (torch.nested.nested_tensor_from_jagged(t, ptr).transpose(1, 2)
                  for t in (q, k, v))  # (G, H, j, D)
    out = F.scaled_dot_product_attention(qn, kn, vn)  # (G, H, j, D)
    return out.transpose(1, 2).values()  # (N, H, D)


def bucket_sdpa(q: Tensor, k: Tensor, v: Tensor, batch: Tensor, ptr: Tensor) -> Tensor:
    """Sets grouped by ceil(log2(size)), ``to_dense_batch`` + SDPA per group.

    Args:
        q, k, v: (N, H, D); batch: (N,) sorted set index; ptr: (G + 1,) offsets.

    Returns:
        (N, H, D).
    """
    sizes = ptr[1:] - ptr[:-1]  # (G,)
    bucket = torch.ceil(torch.log2(sizes.clamp_min(1).double())).long()  # (G,)
    node_bucket = bucket[batch]  # (N,)
    out = torch.zeros_like(v)
    for b in torch.unique(bucket).tolist():
        sets = torch.nonzero(bucket == b).flatten()  # (B,) sets of this bucket
        nodes = torch.nonzero(node_bucket == b).flatten()  # (N_b,) their nodes, in order
        local = torch.searchsorted(sets, batch[nodes])  # (N_b,) set within the bucket
        ob = pyg_dense_sdpa(q[nodes], k[nodes], v[nodes], local, sets.numel())  # (N_b, H, D)
        out = out.index_copy(0, nodes, ob)
    return out


def _backward(out: torch.Tensor) -> None:
    out.sum().backward()


def _qkv(n: int, seed: int = 0, heads: int = HEADS, dim: int = HEAD_DIM):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(n, heads, dim, generator=g).requires_grad_() for _ in range(3)]


def ragged_sizes(seed: int = 0) -> torch.Tensor:
    """128 long-tailed set sizes between 4 and 512 (log-normal, median ~ 40)."""
    g = torch.Generator().manual_seed(seed)
    sizes = torch.exp(torch.randn(128, generator=g) * 1.0 + 3.7).round().long()
    sizes = sizes.clamp(4, 512)
    sizes[0] = 512  # the long tail is there in every draw
    return sizes


def padded_pairs_ratio(sizes: torch.Tensor) -> float:
    """Attention pairs of every set padded to the largest over the real pairs."""
    return float(sizes.numel() * sizes.max() ** 2 / (sizes**2).sum())


def pair_ratios(sizes: torch.Tensor) -> dict[str, float]:
    """Attention pairs each way computes (padding included) over the real pairs:
    padded to the largest set, attend's size buckets, power-of-two buckets."""
    real = float((sizes**2).sum())
    buckets = bucket_plan(setattn.complete(setattn.topology.ptr_from_sizes(sizes)))
    ours = sum(b.sets.numel() * b.q_valid.shape[1] * b.k_valid.shape[1] for b in buckets)
    pow2 = torch.ceil(torch.log2(sizes.double()))  # (G,) bucket of every set
    theirs = sum(int((pow2 == u).sum()) * int(sizes[pow2 == u].max()) ** 2
                 for u in torch.unique(pow2))
    return {"padded to the largest": padded_pairs_ratio(sizes), "attend's buckets": ours / real,
            "power-of-two buckets": theirs / real}


def small_sizes(seed: int) -> torch.Tensor:
    """SMALL_SETS set sizes drawn uniformly from SMALL_SIZES."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(SMALL_SIZES[0], SMALL_SIZES[1] + 1, (SMALL_SETS,), generator=g)


class SetBatch:
    """One batch of sets in PyG's flat layout: q, k, v leaves (N, H, D), ptr, batch."""

    def __init__(self, sizes: torch.Tensor, seed: int = 0):
        self.ptr = setattn.topology.ptr_from_sizes(sizes)  # (G + 1,)
        self.batch = torch.repeat_interleave(torch.arange(sizes.numel()), sizes)  # (N,)
        self.num_sets = sizes.numel()
        self.q, self.k, self.v = _qkv(int(sizes.sum()), seed)


def _cycling(batches: list[SetBatch], step):
    """A closure running ``step(batch)`` on the next batch of ``batches`` at every call."""
    state = {"i": -1}

    def run():
        state["i"] = (state["i"] + 1) % len(batches)
        step(batches[state["i"]])

    return run


def _set_batches(kind: str) -> list[SetBatch]:
    if kind == "small":
        return [SetBatch(small_sizes(s), s) for s in range(SMALL_BATCHES)]
    if kind == "ragged":
        return [SetBatch(ragged_sizes())]
    return [SetBatch(torch.full((COMPLETE_SETS,), COMPLETE_ITEMS))]


def _attend_out(b: SetBatch) -> torch.Tensor:
    top = setattn.complete(b.ptr)  # built on every call, as for a new batch
    return setattn.attend(b.q, b.k, b.v, top)


def _pyg_dense_out(b: SetBatch) -> torch.Tensor:
    return pyg_dense_sdpa(b.q, b.k, b.v, b.batch, b.num_sets)


def _nested_out(b: SetBatch) -> torch.Tensor:
    return nested_sdpa(b.q, b.k, b.v, b.ptr)


def _bucket_out(b: SetBatch) -> torch.Tensor:
    return bucket_sdpa(b.q, b.k, b.v, b.batch, b.ptr)


SET_OUTPUTS = {"attend": _attend_out, "pyg_dense": _pyg_dense_out, "nested": _nested_out,
               "buckets": _bucket_out}


def anchor_differences() -> dict[str, float]:
    """Largest |anchor - attend| of the forward outputs on the first small batch and the
    complete batch: every anchor computes the same attention."""
    out = {}
    for kind in ("small", "complete"):
        b = _set_batches(kind)[0]
        with torch.no_grad():
            ref = _attend_out(b)
            for name, fn in SET_OUTPUTS.items():
                if name != "attend":
                    out[f"{kind} {name}"] = float((fn(b) - ref).abs().max())
    return out


def _set_case(kind: str, output: str):
    step = SET_OUTPUTS[output]
    return lambda: _cycling(_set_batches(kind), lambda b: _backward(step(b)))


# --------------------------------------------------------------------------------------
# complete 64 x 128: the same padded batch, and PyG's two ways


def case_complete_sdpa():
    q, k, v = (t.detach().view(COMPLETE_SETS, COMPLETE_ITEMS, HEADS, HEAD_DIM).transpose(1, 2)
               .contiguous().requires_grad_() for t in _qkv(COMPLETE_SETS * COMPLETE_ITEMS))
    return lambda: _backward(F.scaled_dot_product_attention(q, k, v))  # (G, H, L, D)


def case_complete_setattn_proj():
    torch.manual_seed(0)
    x = torch.randn(COMPLETE_SETS * COMPLETE_ITEMS, DIM, requires_grad=True)
    lin = torch.nn.Linear(DIM, 3 * DIM)
    top = setattn.complete(setattn.topology.ptr_from_sizes([COMPLETE_ITEMS] * COMPLETE_SETS))

    def run():
        q, k, v = lin(x).view(-1, 3, HEADS, HEAD_DIM).unbind(1)  # (N, H, D) each
        _backward(setattn.attend(q, k, v, top))

    return run


def case_complete_transformerconv():
    from torch_geometric.nn import TransformerConv

    torch.manual_seed(0)
    x = torch.randn(COMPLETE_SETS * COMPLETE_ITEMS, DIM, requires_grad=True)
    conv = TransformerConv(DIM, HEAD_DIM, heads=HEADS, root_weight=False)
    top = setattn.complete(setattn.topology.ptr_from_sizes([COMPLETE_ITEMS] * COMPLETE_SETS))
    edge_index = top.edge_index()  # (2, 1048576)
    return lambda: _backward(conv(x, edge_index))


# --------------------------------------------------------------------------------------
# sparse 100k nodes / 1M edges


def _random_graph(n: int = 100_000, e: int = 1_000_000):
    g = torch.Generator().manual_seed(0)
    return torch.randint(0, n, (2, e), generator=g), n


def case_sparse_attend():
    edge_index, n = _random_graph()
    torch.manual_seed(0)
    x = torch.randn(n, DIM, requires_grad=True)
    lin = torch.nn.Linear(DIM, DIM, bias=False)
    score = scores.GAT(HEADS, HEAD_DIM)
    top = setattn.edges(edge_index, n)  # its CSR layouts are built by the first pass

    def run():
        h = lin(x).view(n, HEADS, HEAD_DIM)  # (N, H, D)
        _backward(setattn.attend(h, h, h, top, score))

    return run


def case_sparse_pyg_gatconv():
    from torch_geometric.nn import GATConv

    edge_index, n = _random_graph()
    torch.manual_seed(0)
    x = torch.randn(n, DIM, requires_grad=True)
    conv = GATConv(DIM, HEAD_DIM, heads=HEADS, add_self_loops=False, bias=False)
    return lambda: _backward(conv(x, edge_index))


# --------------------------------------------------------------------------------------
# head dim 64


def _d64_qkv(grad: bool = True):
    """(B * N, H, D) q, k, v of the head-dim-64 case."""
    qkv = _qkv(D64_SETS * D64_ITEMS, heads=D64_HEADS, dim=D64_DIM)
    return qkv if grad else [t.detach() for t in qkv]


def _d64_padded(qkv):
    """(B * N, H, D) -> the padded (B, H, N, D) layout SDPA takes, as leaves."""
    return [t.detach().view(D64_SETS, D64_ITEMS, D64_HEADS, D64_DIM).transpose(1, 2)
            .contiguous().requires_grad_(t.requires_grad) for t in qkv]


def case_d64_attend(backward: bool = True):
    q, k, v = _d64_qkv(backward)
    top = setattn.complete(setattn.topology.ptr_from_sizes([D64_ITEMS] * D64_SETS))
    if not backward:
        return lambda: setattn.attend(q, k, v, top)
    return lambda: _backward(setattn.attend(q, k, v, top))


def case_d64_sdpa(backward: bool = True):
    q, k, v = _d64_padded(_d64_qkv(backward))  # (B, H, N, D)
    if not backward:
        return lambda: F.scaled_dot_product_attention(q, k, v)
    return lambda: _backward(F.scaled_dot_product_attention(q, k, v))


def d64_flops() -> float:
    """Forward flops of QK^T and PV in the d64 case: 2 products of 2 B H N^2 D each."""
    return 4.0 * D64_SETS * D64_HEADS * D64_ITEMS**2 * D64_DIM


CASES = {
    "complete_attend": _set_case("complete", "attend"),
    "complete_sdpa": case_complete_sdpa,
    "complete_pyg_dense": _set_case("complete", "pyg_dense"),
    "complete_setattn_proj": case_complete_setattn_proj,
    "complete_transformerconv": case_complete_transformerconv,
    "ragged_attend": _set_case("ragged", "attend"),
    "ragged_nested": _set_case("ragged", "nested"),
    "ragged_buckets": _set_case("ragged", "buckets"),
    "ragged_padded_sdpa": _set_case("ragged", "pyg_dense"),
    "small_attend": _set_case("small", "attend"),
    "small_pyg_dense": _set_case("small", "pyg_dense"),
    "small_nested": _set_case("small", "nested"),
    "small_buckets": _set_case("small", "buckets"),
    "sparse_attend": case_sparse_attend,
    "sparse_pyg_gatconv": case_sparse_pyg_gatconv,
    "d64_attend": case_d64_attend,
    "d64_sdpa": case_d64_sdpa,
}


def molecule_batch(graphs: int, gen: torch.Generator, sizes: tuple[int, int] = (10, 40),
                   dim: int = 64, bond_dim: int = 7) -> dict[str, torch.Tensor]:
    """``graphs`` random molecule-like graphs of ``sizes[0]``..``sizes[1]`` atoms: a chain
    with a ring closure every 6 atoms (bond i -> i + 5), bonds both ways, about 2.3 n
    directed bonds of degree 2 to 3, as organic molecules have.

    Returns:
        x (N, dim), edge_index (2, E), edge_attr (E, bond_dim), batch (N,), ptr (G + 1,).
    """
    counts = torch.randint(sizes[0], sizes[1] + 1, (graphs,), generator=gen)  # (G,)
    ptr = torch.cat([counts.new_zeros(1), counts.cumsum(0)])  # (G + 1,)
    src, dst = [], []
    for g in range(graphs):
        start, n = int(ptr[g]), int(counts[g])
        chain = torch.arange(start, start + n - 1)  # (n - 1,)
        ring = torch.arange(start, start + n - 6, 6)  # ring closures i -> i + 5
        src += [chain, ring]
        dst += [chain + 1, ring + 5]
    src, dst = torch.cat(src), torch.cat(dst)
    bonds = torch.stack([torch.cat([src, dst]), torch.cat([dst, src])])  # (2, E)
    n = int(ptr[-1])
    return {"x": torch.randn(n, dim, generator=gen), "edge_index": bonds,
            "edge_attr": torch.randn(bonds.shape[1], bond_dim, generator=gen),
            "batch": torch.repeat_interleave(torch.arange(graphs), counts), "ptr": ptr}
