"""The engine's entry: ``attend`` checks its inputs, asks :func:`plan` for a path, runs
it, and hands the weights back as an :class:`AttentionGraph` when they are wanted.

For every edge j -> i of a topology and every head h:

    s_ij = score(q_i, k_j, e_ij) + bias_ij          logits, (E, H)
    p_ij = softmax over the incoming edges of i     weights, sum to 1 per (i, h)
    z_i  = sum_j p_ij v_j                           output, (Nq, H, Dv)

Every path computes this and gives the same numbers; :mod:`setattn.engine.plan` has the
table of paths and when each is taken. A target with nothing to attend to (no incoming
edge, an empty set, every edge masked) gets zeros, never NaN. Weights returned or
captured never include dropout.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from setattn.attention_graph import AttentionGraph
from setattn.capture import is_capturing, record
from setattn.engine.dense import attend_blocks
from setattn.engine.fused_dot import attend_fused_dot
from setattn.engine.fused_gat import attend_fused_gat
from setattn.engine.fused_gatv2 import attend_fused
from setattn.engine.plan import EnginePath, edge_view, forced_path, plan
from setattn.engine.scoring import DEFAULT_SCORE
from setattn.engine.sparse import attend_edges
from setattn.engine.window import attend_window
from setattn.topology import Bipartite, Complete, Edges, Topology, Window


def attend(
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
    return_weights: bool = False,
    path: EnginePath | str | None = None,
) -> Tensor | tuple[Tensor, AttentionGraph]:
    """Attention of queries over keys/values along the edges of ``topology``.

    Args:
        q: (Nq, H, Dk) queries, one per target node.
        k: (Nk, H, Dk) keys, one per source node.
        v: (Nk, H, Dv) values.
        topology: from :mod:`setattn.topology`: ``complete``, ``bipartite``, ``window``
            or ``edges``.
        score: a :mod:`setattn.scores` module or any module mapping broadcastable
            (..., H, Dk) q, k to (..., H); scaled dot product by default.
        bias: (E,) or (E, H) added to the logits, in the topology's canonical edge order
            (``topology.edge_index()``).
        mask: (E,) or (E, H) bool, False removes the edge; same order as ``bias``.
        edge_attr: (E, H) or (E, H, A) per-edge input handed to the score (GAT, GATv2,
            additive scores add it inside their nonlinearity).
        dropout: probability of dropping an attention weight (when ``training``).
        training: apply dropout only when True.
        hard: None for soft attention; ``"argmax"`` or an int k keeps the top-k weights
            per target and head, renormalised, with a straight-through gradient.
        return_weights: also return the weights as an :class:`AttentionGraph`.
        path: advanced: run this :class:`EnginePath` (or its value, "sparse_gather"...)
            instead of the one :func:`plan` picks (same numbers, different speed); a
            ValueError names a path that cannot compute the call.

    Returns:
        (Nq, H, Dv) output, and the ``AttentionGraph`` when ``return_weights``.
    """
    score = DEFAULT_SCORE if score is None else score
    _check_inputs(q, k, v, topology)
    top_k = _parse_hard(hard)
    need_weights = return_weights or is_capturing()
    bias, mask, edge_attr = _edge_inputs(topology, q.shape[1], bias, mask, edge_attr)
    call = dict(bias=bias, mask=mask, edge_attr=edge_attr, dropout=dropout, training=training,
                hard=hard, need_weights=need_weights)
    if path is None:
        chosen = plan(q, k, v, topology, score, **call)
    else:
        chosen = forced_path(path, q, k, v, topology, score, **call)
    p = dropout if training else 0.0
    out, w = _run(chosen, q, k, v, topology, score, bias, mask, edge_attr, p, top_k,
                  need_weights)
    if not need_weights:
        return out
    graph = AttentionGraph(topology.edge_index(), w.detach(), (topology.num_kv, topology.num_q),
                           bipartite=_is_bipartite(topology))
    if is_capturing():
        record(graph)
    return (out, graph) if return_weights else out


def _run(path: EnginePath, q: Tensor, k: Tensor, v: Tensor, top: Topology, score: nn.Module,
         bias: Tensor | None, mask: Tensor | None, edge_attr: Tensor | None, p: float,
         top_k: int | None, need_weights: bool) -> tuple[Tensor, Tensor | None]:
    """Run ``path``: (Nq, H, Dv) output and (E, H) weights (None if not needed and not free)."""
    if path is EnginePath.DENSE_SDPA or path is EnginePath.DENSE_BLOCKS:
        return attend_blocks(q, k, v, top, score, bias, mask, edge_attr, p, top_k,
                             sdpa=path is EnginePath.DENSE_SDPA, need_weights=need_weights)
    if path is EnginePath.WINDOW_BLOCKS:
        return attend_window(q, k, v, top, score, bias, mask, edge_attr, p, top_k,
                             need_weights)
    graph = top if isinstance(top, Edges) else edge_view(top)  # the edge paths
    if path is EnginePath.FUSED_GATV2:
        return attend_fused(q, k, v, graph, score, edge_attr)
    if path is EnginePath.FUSED_GAT:
        return attend_fused_gat(q, k, v, graph, score, edge_attr)
    if path is EnginePath.FUSED_DOT:
        return attend_fused_dot(q, k, v, graph, score)
    return attend_edges(q, k, v, graph, score, bias, mask, edge_attr, p, top_k,
                        csr=path is EnginePath.SPARSE_CSR)


# ---------------------------------------------------------------------------------------
# checks


def _is_bipartite(top: Topology) -> bool:
    """Whether queries and keys are different node sets."""
    if isinstance(top, Complete | Window):
        return False
    return isinstance(top, Bipartite) or top.bipartite or top.num_q != top.num_kv


def _check_inputs(q: Tensor, k: Tensor, v: Tensor, top: Topology) -> None:
    if not isinstance(top, Bipartite | Window | Edges):
        raise TypeError(f"topology must come from setattn.topology, got {type(top).__name__}")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() != 3:
            raise ValueError(f"{name} must have shape (N, H, D), got {tuple(t.shape)}")
    if k.shape[:2] != v.shape[:2]:
        raise ValueError(f"k {tuple(k.shape)} and v {tuple(v.shape)} must agree in (N, H)")
    if q.shape[1] != k.shape[1]:
        raise ValueError(f"q has {q.shape[1]} heads but k has {k.shape[1]}")
    if q.shape[0] != top.num_q:
        raise ValueError(f"q has {q.shape[0]} rows but the topology has {top.num_q} queries")
    if k.shape[0] != top.num_kv:
        raise ValueError(f"k has {k.shape[0]} rows but the topology has {top.num_kv} keys")
    where = _device(top)
    if where != q.device:
        raise ValueError(f"the topology's index tensors are on {where} but q is on {q.device}: "
                         f"build the topology from tensors on {q.device} (ptr.to(q.device))")


def _device(top: Topology) -> torch.device:
    """The device of a topology's index tensors."""
    if isinstance(top, Edges):
        return top.index.device
    return top.ptr.device if isinstance(top, Window) else top.ptr_q.device


def _edge_inputs(top: Topology, heads: int, bias: Tensor | None, mask: Tensor | None,
                 edge_attr: Tensor | None) -> tuple[Tensor | None, Tensor | None, Tensor | None]:
    """Checked per-edge inputs: bias (E, H|1), mask (E, H|1) bool, edge_attr (E, H[, A])."""
    n_edges = top.num_edges if (bias is not None or mask is not None
                                or edge_attr is not None) else None
    bias = _per_edge(bias, "bias", n_edges, heads)
    mask = _per_edge(mask, "mask", n_edges, heads)
    if mask is not None and mask.dtype != torch.bool:  # SDPA would read a float mask as a bias
        raise ValueError(f"mask must be a bool tensor (True keeps the edge), got {mask.dtype}")
    return bias, mask, _check_edge_attr(edge_attr, n_edges, heads)


def _per_edge(t: Tensor | None, name: str, n_edges: int | None, heads: int) -> Tensor | None:
    """(E,) or (E, H) -> (E, H) or (E, 1)."""
    if t is None:
        return None
    if t.dim() == 1:
        t = t[:, None]  # (E, 1)
    if t.dim() != 2 or t.shape[0] != n_edges or t.shape[1] not in (1, heads):
        raise ValueError(
            f"{name} must have shape (E,) or (E, H) with E={n_edges}, H={heads}; "
            f"got {tuple(t.shape)}"
        )
    return t


def _check_edge_attr(t: Tensor | None, n_edges: int | None, heads: int) -> Tensor | None:
    if t is not None and (t.dim() not in (2, 3) or t.shape[0] != n_edges or t.shape[1] != heads):
        raise ValueError(
            f"edge_attr must have shape (E, H) or (E, H, A) with E={n_edges}, H={heads}; "
            f"got {tuple(t.shape)}"
        )
    return t


def _parse_hard(hard: int | str | None) -> int | None:
    if hard is None:
        return None
    if hard == "argmax":
        return 1
    if isinstance(hard, int) and not isinstance(hard, bool) and hard >= 1:
        return hard
    raise ValueError(f"hard must be None, 'argmax' or an int >= 1, got {hard!r}")
