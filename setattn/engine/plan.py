"""Which path computes an ``attend`` call: every routing decision of the engine.

All paths give the same numbers (to float rounding); they differ in speed and memory.
:func:`plan` picks one from the topology, the score, the optional inputs, the device
and whether torch.compile is tracing; ``attend(..., path=...)`` overrides it with any
path that applies (:func:`forced_path` says which do not, and why).

The paths (:class:`EnginePath`) and what they compute::

    DENSE_SDPA     sets padded in size buckets, (B, H, Lq, Lk) blocks; one
                   ``scaled_dot_product_attention`` per bucket
    DENSE_BLOCKS   the same buckets; explicit logits, masked softmax, weighted sum
    WINDOW_BLOCKS  every query's 2r + 1 window slots gathered into (N, W) blocks
    FUSED_GATV2    GATv2 logits, segment softmax and sum over an edge list as one
                   autograd node with a hand-written backward; on eager CPU tensors
                   compiled loops over each target's edges (setattn.engine.cpu_kernels)
    FUSED_GAT      the same for GAT's logits (per-node terms, (E, H) scores); on
                   the eager CPU from CSR_SUM_MIN_EDGES on the weights run along a CSR
                   layout's rows and the sum is a CSR product
    FUSED_DOT      the same for dot-product logits, on eager CPU tensors (the compiled
                   loops; elsewhere, when asked for, torch ops)
    SPARSE_CSR     segment softmax over an edge list; the sum (and dot-product logits)
                   as CSR sparse-dense products: (E, H) weights kept, never (E, H, D)
                   messages
    SPARSE_GATHER  segment softmax over an edge list; gathered (E, H, D) messages
                   summed by index_add

plan()'s decisions, in the order it makes them::

    topology                        condition                                 path
    ------------------------------  ----------------------------------------  -------------
    edges (or run as edges, below)  the score opts in (``fused_edges()``:     FUSED_GATV2
                                    GATv2), LeakyReLU slope >= 0, no bias,
                                    mask, dropout or hard attention, edge_attr
                                    None or (E, H, A)
                                    the score opts in (``fused_gat()``:       FUSED_GAT
                                    GAT), the same conditions, edge_attr
                                    None or (E, H); on an eager CPU run
                                    only float32/64
                                    eager CPU run, float32/64, E <=           FUSED_DOT
                                    FUSED_MAX_EDGES, a dot-product score,
                                    no bias, mask, dropout, hard attention
                                    or edge_attr
                                    eager CPU run, CSR_MIN_EDGES <= E <=      SPARSE_CSR
                                    Nq * Nk (CSR_MIN_EDGES_FEW when E <= Nk)
                                    eager CPU run, fewer edges                SPARSE_GATHER
                                    otherwise                                 SPARSE_GATHER
    window                          eager CPU run                             run as edges
                                    otherwise (accelerator, torch.compile)    WINDOW_BLOCKS
    complete, bipartite             at most one query per set, not complete   run as edges
                                    dot-product score, no edge_attr, no hard  DENSE_SDPA
                                    attention, no weights wanted
                                    otherwise                                 DENSE_BLOCKS

Topologies run as an edge list (:func:`edge_view`, the same canonical edge order):
windows on an eager CPU run (the CSR kernels beat the gathered blocks there,
git show 1bd1cfd:benchmarks/results/engine.md) and bipartite topologies with at most one
query per set (attention pooling: padding them into (B, 1, L) blocks costs more than a
segment softmax) unless the caller gave ``max_sizes`` (then dense, nothing read).
Weights are wanted when ``attend`` returns them or a ``setattn.capture()`` block is open.
Whether the score is a dot product is asked at the query width.

Per device (:func:`device_rules`, read off the values ``v``): the table above in one
view, with the evidence behind each column::

    rules          edge lists            windows         complete, bipartite
    -------------  --------------------  --------------  -------------------------------
    "cpu"          FUSED_GAT for GAT;    run as edges    DENSE_SDPA, else DENSE_BLOCKS
    (eager CPU)    FUSED_DOT for plain
                   dot products, up to
                   FUSED_MAX_EDGES;
                   SPARSE_CSR from
                   CSR_MIN_EDGES on,
                   else SPARSE_GATHER
    "cuda"         SPARSE_GATHER         WINDOW_BLOCKS   DENSE_SDPA, else DENSE_BLOCKS
    "other"        SPARSE_GATHER         WINDOW_BLOCKS   DENSE_SDPA, else DENSE_BLOCKS
    (torch.compile, MPS, XPU, meta, ...)

FUSED_GATV2 is taken wherever it applies, on every device. On eager CPU tensors of float32
or float64 the fused paths run the compiled loops of :mod:`setattn.engine.cpu_kernels`
(Numba): one pass over each target's incoming edges, a counting sort by target as the
only layout, so a new batch of small graphs every step costs little; elsewhere (CUDA,
torch.compile, other dtypes) they are ordinary tensor operations (gather,
scatter_reduce, index_add), one autograd node around them. On a large graph the CSR
layouts, built once for a graph passed again and again, beat the kernels' random reads
of value rows: from CSR_SUM_MIN_EDGES edges on FUSED_GAT computes the weights along the
target-major layout's rows (compiled loops, or torch ops on a process's first call, which
would not pay for loading the loops) and sums the values with the CSR product
(:func:`csr_sum_pays_off`); above FUSED_MAX_EDGES FUSED_DOT gives way to
SPARSE_CSR (``attend(..., path="fused_dot")`` runs it anywhere).

The CPU column is measured (the figures beside the constants below, benchmarks/engine.py,
benchmarks/scaling.py). **The CUDA column is reasoned, not measured**: it holds until a
GPU run verifies it (the engine reference tests on CUDA, then benchmarks/engine.py and
benchmarks/layers.py against PyG and plain SDPA), and no GPU figure is claimed before
that. The reasoning:

* DENSE_SDPA hands each bucket to ``scaled_dot_product_attention``, which on CUDA picks
  its own kernel: FlashAttention for float16/bfloat16 inputs with no ``attn_mask`` (a
  batch that is one bucket without padding, no mask or bias: the engine passes
  ``attn_mask=None`` then) and head widths up to 256; the memory-efficient kernel when a
  boolean or additive mask is needed (padded buckets, masks, biases), float32 included;
  the math fallback otherwise. The engine's blocks are (B, H, L, D) views whose last
  dimension is contiguous, as those kernels need.
* Edge lists gather (E, H, D) messages and sum them with ``index_add`` after a segment
  softmax built on ``scatter_reduce``: the segment kernels PyG's own GATConv runs on a
  GPU. The CSR path (cuSPARSE SpMM and SDDMM there) is not chosen on CUDA because nothing
  measured it; ``attend(..., path="sparse_csr")`` still runs it on CUDA tensors, so that
  a GPU run can measure it.
* Windows stay gathered (N, 2r + 1) blocks: regular dense work, no CSR layouts to build.

Sub-choices made inside a path, from what only the path has (the prepared queries
and keys); the functions below make them:

* :func:`dot_logits`: the logits of a dot-product score without edge features are
  matrix products (an SDDMM on SPARSE_CSR, einsums on the block paths); otherwise
  the score's ``combine`` runs on gathered (query, key) pairs.
* :func:`reuse_key_rows` (SPARSE_*): when the values are the very prepared keys whose
  rows the logits gathered (``v is pk``: an unprojected GATv2 or a plain module with
  ``v is k``), the sum reuses those rows with index_add: on SPARSE_CSR instead of the
  CSR product, on SPARSE_GATHER instead of gathering them again.
* DENSE_*: a batch that is one bucket without padding is reshaped, not gathered.

plan() reads shapes, devices, object identities and the topology's cached facts;
it never reads tensor data that the paths would not read anyway. Those facts are read
once per topology (``setattn.engine.precompute`` reads them all before a training loop),
so a call over a precomputed topology reads nothing back to the host.
"""

from __future__ import annotations

from enum import Enum

import torch
from torch import Tensor, nn

from setattn.engine.scoring import DEFAULT_SCORE, dot_scale
from setattn.topology import Bipartite, Complete, Edges, Topology, Window


class EnginePath(Enum):
    """The engine's paths; see the table in :mod:`setattn.engine.plan`."""

    DENSE_SDPA = "dense_sdpa"
    DENSE_BLOCKS = "dense_blocks"
    WINDOW_BLOCKS = "window_blocks"
    FUSED_GATV2 = "fused_gatv2"
    FUSED_GAT = "fused_gat"
    FUSED_DOT = "fused_dot"
    SPARSE_CSR = "sparse_csr"
    SPARSE_GATHER = "sparse_gather"


# Below this many edges, building the two CSR layouts costs more than it saves: gathered
# messages and index_add are faster (measurements: git show 1bd1cfd:benchmarks/results/engine.md).
CSR_MIN_EDGES = 1024
# The same when there are no more edges than keys (attention pooling: one edge per key),
# whose gathered messages are no bigger than the values.
CSR_MIN_EDGES_FEW = 16384
# Up to this many edges, FUSED_DOT's compiled CPU kernel beats the CSR kernels on the eager
# CPU. One core, GATConv 64 -> 4 x 16 (then FUSED_GAT's kernel, which FUSED_DOT's follows),
# forward + backward, a new random graph of 4 edges a node every pass: 1.9 against 3.0 ms
# at 4,000 edges, 20 against 24 ms at 40,000, even at 120,000; on one graph of 1.1 million
# edges passed again and again (the CSR layouts cached) 782 against 497 ms. One-off
# comparisons of ``attend(..., path="fused_gat")`` with ``path="sparse_csr"`` on one AMD
# EPYC core; no benchmark regenerates them.
FUSED_MAX_EDGES = 65536
# From this many edges FUSED_GAT sums the values with the CSR product (its weights along
# the layout's rows, from the compiled loops once loaded) rather than in ``softmax_sum``. One
# core, ``attend`` with GAT's score, 4 heads x 16, forward + backward, 4 edges a node, the
# same graph every pass (a new one): 56 against 61 ms (66 against 76) at 120,000 edges,
# 263 against 213 ms (268 against 264) at 400,000. One-off comparisons on one AMD EPYC
# core beside another job; no benchmark regenerates them.
CSR_SUM_MIN_EDGES = 262144


def plan(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    topology: Topology,
    score: nn.Module | None = None,
    *,
    bias: Tensor | None = None,
    mask: Tensor | None = None,
    edge_attr: Tensor | None = None,
    dropout: float = 0.0,
    training: bool = True,
    hard: int | str | None = None,
    need_weights: bool = False,
) -> EnginePath:
    """The path ``attend`` takes for these arguments (the tables in the module docstring).

    Two choices are left to the paths because they need the prepared queries and keys,
    which plan() does not compute: whether logits are matrix products
    (:func:`dot_logits`) and whether a sparse path's sum reuses gathered key rows
    (:func:`reuse_key_rows`, which on SPARSE_CSR replaces the CSR product).

    Args:
        q: (Nq, H, Dk) queries; k: (Nk, H, Dk) keys; v: (Nk, H, Dv) values.
        topology, score, bias, mask, edge_attr, dropout, training, hard: as for
            ``attend`` (only their kinds, shapes and presence matter here).
        need_weights: the weights are wanted (``return_weights`` or capture).

    Returns:
        the chosen :class:`EnginePath`.
    """
    score = DEFAULT_SCORE if score is None else score
    p = dropout if training else 0.0
    if isinstance(topology, Edges):
        return _edge_path(q, v, topology, score, bias, mask, edge_attr, p, hard)
    if isinstance(topology, Window):
        if not csr_kernels_serve(v):
            return EnginePath.WINDOW_BLOCKS
        return _edge_path(q, v, edge_view(topology), score, bias, mask, edge_attr, p, hard)
    if isinstance(topology, Bipartite):
        if one_query_per_set(topology):
            return _edge_path(q, v, edge_view(topology), score, bias, mask, edge_attr, p, hard)
        if sdpa_applies(q, score, edge_attr, hard, need_weights):
            return EnginePath.DENSE_SDPA
        return EnginePath.DENSE_BLOCKS
    raise TypeError(f"topology must come from setattn.topology, got {type(topology).__name__}")


def _edge_path(q: Tensor, v: Tensor, top: Edges, score: nn.Module, bias: Tensor | None,
               mask: Tensor | None, edge_attr: Tensor | None, p: float,
               hard: int | str | None) -> EnginePath:
    """FUSED_GATV2, FUSED_GAT, FUSED_DOT, SPARSE_CSR or SPARSE_GATHER for an edge list."""
    if fused_gatv2_applies(score, bias, mask, edge_attr, p, hard):
        return EnginePath.FUSED_GATV2
    fused_cpu = fused_pays_off(v, top)
    if fused_gat_applies(score, bias, mask, edge_attr, p, hard) and (
            not csr_kernels_serve(v) or cpu_kernels_serve(v)):
        return EnginePath.FUSED_GAT
    if fused_cpu and fused_dot_applies(q, score, bias, mask, edge_attr, p, hard):
        return EnginePath.FUSED_DOT
    if csr_kernels_serve(v):  # eager CPU: measured
        return EnginePath.SPARSE_CSR if csr_pays_off(top) else EnginePath.SPARSE_GATHER
    return EnginePath.SPARSE_GATHER


# ---------------------------------------------------------------------------------------
# the decisions


def _plain_soft(bias: Tensor | None, mask: Tensor | None, p: float,
                hard: int | str | None) -> bool:
    """Nothing a fused kernel does not compute: no bias, mask, dropout (p > 0) or hard
    attention."""
    return bias is None and mask is None and p == 0 and hard is None


def _edge_dims(edge_attr: Tensor | None, dims: int) -> bool:
    """No edge features, or features with ``dims`` dimensions."""
    return edge_attr is None or edge_attr.dim() == dims


def fused_gatv2_applies(score: nn.Module, bias: Tensor | None, mask: Tensor | None,
                        edge_attr: Tensor | None, p: float, hard: int | str | None) -> bool:
    """The score opts into the fused GATv2 kernel (``fused_edges()`` gives its parameters),
    its LeakyReLU slope is >= 0 (the kernel reads which side of 0 an input was off the
    sign of the activation), and nothing the kernel does not compute is asked for: no
    bias, mask, dropout (p > 0) or hard attention; edge features, if any, are (E, H, A)."""
    if not (_plain_soft(bias, mask, p, hard) and _edge_dims(edge_attr, 3)):
        return False
    # looked up on the class: a miss on the instance goes through nn.Module.__getattr__
    if getattr(type(score), "fused_edges", None) is None:
        return False
    params = score.fused_edges()
    return params is not None and params[1] >= 0


def fused_gat_applies(score: nn.Module, bias: Tensor | None, mask: Tensor | None,
                      edge_attr: Tensor | None, p: float, hard: int | str | None) -> bool:
    """The score opts into the fused GAT kernel (``fused_gat()`` gives its LeakyReLU
    slope, >= 0) and nothing the kernel does not compute is asked for: no bias, mask,
    dropout (p > 0) or hard attention; edge features, if any, are (E, H)."""
    if not (_plain_soft(bias, mask, p, hard) and _edge_dims(edge_attr, 2)):
        return False
    if getattr(type(score), "fused_gat", None) is None:
        return False
    slope = score.fused_gat()
    return slope is not None and slope >= 0


def device_rules(x: Tensor) -> str:
    """Which column of the per-device table applies to values ``x``: ``"cpu"`` (an eager
    run on the CPU: measured), ``"cuda"`` (an eager run on a CUDA device: reasoned, not
    measured) or ``"other"`` (torch.compile tracing, or any other device)."""
    if torch.compiler.is_compiling():
        return "other"
    return x.device.type if x.device.type in ("cpu", "cuda") else "other"


def cpu_kernels_serve(x: Tensor) -> bool:
    """FUSED_GAT and FUSED_GATV2 run the compiled loops of ``setattn.engine.cpu_kernels``:
    eager CPU values of float32 or float64 (elsewhere they run torch ops)."""
    return device_rules(x) == "cpu" and x.dtype in (torch.float32, torch.float64)


def fused_pays_off(v: Tensor, top: Edges) -> bool:
    """On the eager CPU, the compiled kernels of FUSED_GAT and FUSED_DOT beat the CSR
    kernels up to ``FUSED_MAX_EDGES`` edges (one counting sort against two sparse
    layouts)."""
    return cpu_kernels_serve(v) and top.num_edges <= FUSED_MAX_EDGES


def csr_sum_pays_off(top: Edges) -> bool:
    """FUSED_GAT on the eager CPU, from ``CSR_SUM_MIN_EDGES`` edges on: the weights
    come from passes over each target's edges in a CSR layout's rows, and the weighted
    sum is the CSR product (the layouts, built once for a graph passed again and again,
    beat the kernel's random reads of value rows)."""
    return top.num_edges >= CSR_SUM_MIN_EDGES


def fused_dot_applies(q: Tensor, score: nn.Module, bias: Tensor | None, mask: Tensor | None,
                      edge_attr: Tensor | None, p: float, hard: int | str | None) -> bool:
    """A dot-product score (``dot_scale`` at the query width) and nothing FUSED_DOT does
    not compute: no bias, mask, dropout (p > 0), hard attention or edge features."""
    return (_plain_soft(bias, mask, p, hard) and edge_attr is None
            and dot_scale(score, q.shape[-1]) is not None)


def csr_kernels_serve(x: Tensor) -> bool:
    """plan() picks the CSR kernels on eager CPU runs only; CUDA, compiled and other
    runs use index_add (see the per-device table)."""
    return device_rules(x) == "cpu"


def csr_kernels_run(x: Tensor) -> bool:
    """A forced SPARSE_CSR can run: eager CPU or CUDA tensors (torch's CSR kernels exist
    for both; only the CPU ones are measured)."""
    return device_rules(x) in ("cpu", "cuda")


def csr_fits(top: Edges) -> bool:
    """No more edges than (query, key) pairs: ``sampled_addmm`` rejects patterns with more
    entries than the dense matrix has, which a multigraph (repeated edges) can reach."""
    return top.num_edges <= top.num_q * top.num_kv


def csr_pays_off(top: Edges) -> bool:
    """Enough edges for the CSR layouts to pay for themselves, and a pattern they fit."""
    least = CSR_MIN_EDGES if top.num_edges > top.num_kv else CSR_MIN_EDGES_FEW
    return least <= top.num_edges and csr_fits(top)


def one_query_per_set(top: Bipartite) -> bool:
    """Every set has at most one query (pooling: a summary per set attends to its items);
    ``complete`` topologies never count, nor do topologies with ``max_sizes`` (they run
    dense without reading their sizes). Cached on the topology."""
    if top.max_sizes is not None:
        return False
    if "one_query" not in top._cache:
        top._cache["one_query"] = bool((top.sizes_q <= 1).all()) and not isinstance(
            top, Complete)
    return top._cache["one_query"]


def sdpa_applies(q: Tensor, score: nn.Module, edge_attr: Tensor | None,
                 hard: int | str | None, need_weights: bool) -> bool:
    """``scaled_dot_product_attention`` can compute a bucket: a dot-product score, no
    edge features, soft attention, and no weights wanted (SDPA does not return them)."""
    return (edge_attr is None and hard is None and not need_weights
            and dot_scale(score, q.shape[-1]) is not None)


def edge_view(top: Window | Bipartite) -> Edges:
    """The topology's pairs as an edge list in its canonical order, cached on it."""
    if "edges" not in top._cache:
        top._cache["edges"] = Edges(top.edge_index(), num_q=top.num_q, num_kv=top.num_kv)
    return top._cache["edges"]


# ---------------------------------------------------------------------------------------
# sub-choices made inside a path


def dot_logits(scale: float | None, edge_attr: Tensor | None) -> bool:
    """Logits as matrix products: the score is ``scale * <pq, pk>`` and no edge features
    enter it (``scale`` from the score at the prepared width)."""
    return scale is not None and edge_attr is None


def reuse_key_rows(v: Tensor, pk: Tensor, pk_e: Tensor | None) -> bool:
    """The values are the prepared keys themselves and the logits already gathered their
    rows (``pk_e``, (E, H, A), or None): the sum reuses those rows with index_add. On
    SPARSE_CSR that beats the CSR product, whose layouts cost more to build than it
    saves then; on SPARSE_GATHER it saves gathering them again."""
    return v is pk and pk_e is not None


# ---------------------------------------------------------------------------------------
# a path asked for by the caller


def forced_path(path: EnginePath | str, q: Tensor, k: Tensor, v: Tensor, topology: Topology,
                score: nn.Module | None = None, *, bias: Tensor | None = None,
                mask: Tensor | None = None, edge_attr: Tensor | None = None,
                dropout: float = 0.0, training: bool = True, hard: int | str | None = None,
                need_weights: bool = False) -> EnginePath:
    """``path`` as an :class:`EnginePath` when it can compute this call (arguments as for
    :func:`plan`).

    Raises:
        ValueError: naming the path and why it does not apply.
    """
    path = EnginePath(path)
    score = DEFAULT_SCORE if score is None else score
    p = dropout if training else 0.0
    if path is EnginePath.FUSED_GATV2:
        ok = fused_gatv2_applies(score, bias, mask, edge_attr, p, hard)
        why = ("needs a score that opts in (GATv2, LeakyReLU slope >= 0) and no bias, mask, "
               "dropout, hard attention or (E, H) edge_attr")
    elif path is EnginePath.FUSED_GAT:
        ok = fused_gat_applies(score, bias, mask, edge_attr, p, hard)
        why = ("needs a score that opts in (GAT, LeakyReLU slope >= 0) and no bias, mask, "
               "dropout, hard attention or (E, H, A) edge_attr")
    elif path is EnginePath.FUSED_DOT:
        ok = fused_dot_applies(q, score, bias, mask, edge_attr, p, hard)
        why = ("needs a dot-product score and no bias, mask, dropout, hard attention or "
               "edge_attr")
    elif path is EnginePath.SPARSE_CSR:
        ok, why = _csr_applies(v, topology)
    elif path is EnginePath.WINDOW_BLOCKS:
        ok, why = isinstance(topology, Window), "needs a window topology"
    elif path in (EnginePath.DENSE_SDPA, EnginePath.DENSE_BLOCKS):
        ok, why = isinstance(topology, Bipartite), "needs a complete or bipartite topology"
        if ok and path is EnginePath.DENSE_SDPA:
            ok = sdpa_applies(q, score, edge_attr, hard, need_weights)
            why = ("needs a dot-product score, no edge_attr, no hard attention and no weights "
                   "wanted (return_weights or capture)")
    else:
        ok, why = True, ""
    if not ok:
        raise ValueError(f"path {path.name} does not apply to this call: it {why}")
    return path


def _csr_applies(v: Tensor, topology: Topology) -> tuple[bool, str]:
    if not csr_kernels_run(v):
        return False, "runs on CPU or CUDA tensors outside torch.compile only"
    top = topology if isinstance(topology, Edges) else edge_view(topology)
    return csr_fits(top), "needs at most Nq * Nk edges (repeated edges can exceed that)"
