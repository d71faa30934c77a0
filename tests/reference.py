"""A naive float64 reference for attention, written from the definitions only.

Nothing here calls the engine or its helpers. Edge lists are enumerated with
Python loops, scores follow the formulas in the docstrings of ``setattn.scores``
(written out from the module parameters), and the softmax is taken target by target.
The result is slow and obviously right, which is the point.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from setattn import scores as S

# ---------------------------------------------------------------------------------------
# edge lists, canonical order: target-major, sources ascending


def _offsets(sizes: list[int]) -> list[int]:
    out = [0]
    for s in sizes:
        out.append(out[-1] + s)
    return out


def complete_edges(sizes: list[int]) -> tuple[list[int], list[int]]:
    """(src, tgt) of every pair inside every set, self pairs included."""
    return bipartite_edges(sizes, sizes)


def bipartite_edges(sizes_q: list[int], sizes_kv: list[int]) -> tuple[list[int], list[int]]:
    """(src, tgt): query i of set g receives an edge from every key of set g."""
    oq, ok = _offsets(sizes_q), _offsets(sizes_kv)
    src, tgt = [], []
    for g in range(len(sizes_q)):
        for i in range(oq[g], oq[g + 1]):
            for j in range(ok[g], ok[g + 1]):
                src.append(j)
                tgt.append(i)
    return src, tgt


def window_edges(sizes: list[int], radius: int) -> tuple[list[int], list[int]]:
    """(src, tgt): position i receives an edge from every j of its set with |i - j| <= r."""
    o = _offsets(sizes)
    src, tgt = [], []
    for g in range(len(sizes)):
        for i in range(o[g], o[g + 1]):
            for j in range(o[g], o[g + 1]):
                if abs(i - j) <= radius:
                    src.append(j)
                    tgt.append(i)
    return src, tgt


# ---------------------------------------------------------------------------------------
# scores, per edge, from the formulas


def _leaky(x: Tensor, slope: float) -> Tensor:
    return torch.where(x > 0, x, slope * x)


def edge_logits(score, qe: Tensor, ke: Tensor, edge_attr: Tensor | None = None) -> Tensor:
    """Logits (E, H) of every edge from its query qe (E, H, Dq) and key ke (E, H, Dk).

    ``score`` is a ``setattn.scores`` module (its parameters are read, its methods are
    not called) or any other callable, which is applied as the user's own score.
    """
    d = lambda t: t.double()  # noqa: E731
    if isinstance(score, S.ScaledDot):
        scale = score.scale if score.scale is not None else 1.0 / math.sqrt(qe.shape[-1])
        return (qe * ke).sum(-1) * scale
    if isinstance(score, S.Dot):
        return (qe * ke).sum(-1)
    if isinstance(score, S.Bilinear):
        w = d(score.weight)  # (H, Dq, Dk)
        out = torch.zeros(qe.shape[:2], dtype=torch.float64)
        for h in range(qe.shape[1]):
            out[:, h] = ((qe[:, h] @ w[h]) * ke[:, h]).sum(-1)
        return out
    if isinstance(score, S.ConcatAdditive):
        wcat, b, v = d(score.weight), d(score.bias), d(score.v)  # (H, Dq+Dk, A), (H, A)
        out = torch.zeros(qe.shape[:2], dtype=torch.float64)
        for h in range(qe.shape[1]):
            hidden = torch.cat([qe[:, h], ke[:, h]], -1) @ wcat[h] + b[h]  # (E, A)
            if edge_attr is not None:
                hidden = hidden + edge_attr[:, h]
            out[:, h] = torch.tanh(hidden) @ v[h]
        return out
    if isinstance(score, S.Additive):
        wq, wk, v = d(score.w_q), d(score.w_k), d(score.v)
        out = torch.zeros(qe.shape[:2], dtype=torch.float64)
        for h in range(qe.shape[1]):
            hidden = qe[:, h] @ wq[h] + ke[:, h] @ wk[h]  # (E, A)
            if edge_attr is not None:
                hidden = hidden + edge_attr[:, h]
            out[:, h] = torch.tanh(hidden) @ v[h]
        return out
    if isinstance(score, S.GAT):
        a_src, a_dst = d(score.att_src), d(score.att_dst)  # (H, D)
        s = (qe * a_dst).sum(-1) + (ke * a_src).sum(-1)  # (E, H)
        if edge_attr is not None:
            s = s + edge_attr
        return _leaky(s, score.negative_slope)
    if isinstance(score, S.GATv2):
        att = d(score.att)  # (H, A)
        out = torch.zeros(qe.shape[:2], dtype=torch.float64)
        for h in range(qe.shape[1]):
            pair = torch.cat([qe[:, h], ke[:, h]], -1)  # (E, 2D)
            if score.w_q is None:  # W = [I I]
                dim = qe.shape[-1]
                w = torch.cat([torch.eye(dim), torch.eye(dim)], 0).double()
            else:
                w = torch.cat([d(score.w_q[h]), d(score.w_k[h])], 0)  # (2D, A)
            hidden = pair @ w
            if edge_attr is not None:
                hidden = hidden + edge_attr[:, h]
            out[:, h] = _leaky(hidden, score.negative_slope) @ att[h]
        return out
    if isinstance(score, UserScore):
        s = (qe * torch.tanh(ke)).sum(-1) * d(score.temperature)  # (E, H)
        return s if edge_attr is None else s + edge_attr
    raise TypeError(f"no reference formula for {type(score).__name__}")


class UserScore(nn.Module):
    """A user's own score, not a ``setattn.scores.Score``: s = t_h * q . tanh(k) [+ e].

    Deliberately asymmetric in q and k, so that swapping them is caught.
    """

    def __init__(self, heads: int):
        super().__init__()
        self.temperature = nn.Parameter(torch.linspace(0.5, 1.5, heads))  # (H,)

    def forward(self, q: Tensor, k: Tensor, edge_attr: Tensor | None = None) -> Tensor:
        s = (q * torch.tanh(k)).sum(-1) * self.temperature  # (..., H)
        return s if edge_attr is None else s + edge_attr


# ---------------------------------------------------------------------------------------
# attention


def attend(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    src: list[int] | Tensor,
    tgt: list[int] | Tensor,
    score,
    *,
    bias: Tensor | None = None,
    mask: Tensor | None = None,
    edge_attr: Tensor | None = None,
    hard: int | None = None,
) -> tuple[Tensor, Tensor]:
    """Float64 attention along the edges src[e] -> tgt[e].

    Args:
        q: (Nq, H, Dq); k: (Nk, H, Dk); v: (Nk, H, Dv).
        bias: (E,) or (E, H); mask: (E,) or (E, H) bool; edge_attr: (E, H[, A]).
        hard: keep only the ``hard`` largest weights per target and head, renormalised.

    Returns:
        out (Nq, H, Dv) and weights (E, H), both float64.
    """
    q, k, v = q.double(), k.double(), v.double()
    src = torch.as_tensor(src, dtype=torch.long)
    tgt = torch.as_tensor(tgt, dtype=torch.long)
    n_q, heads, e = q.shape[0], q.shape[1], src.numel()
    ea = None if edge_attr is None else edge_attr.double()
    if e:
        logits = edge_logits(score, q[tgt], k[src], ea).double()  # (E, H)
    else:
        logits = torch.zeros(0, heads, dtype=torch.float64)
    if bias is not None:
        b = bias.double()
        logits = logits + (b[:, None] if b.dim() == 1 else b)
    keep = torch.ones(e, heads, dtype=torch.bool)
    if mask is not None:
        keep = keep & (mask[:, None] if mask.dim() == 1 else mask)

    by_target = [[] for _ in range(n_q)]
    for n, i in enumerate(tgt.tolist()):
        by_target[i].append(n)
    weights = torch.zeros(e, heads, dtype=torch.float64)
    rows = []
    for i in range(n_q):
        mine = by_target[i]
        if not mine:  # nothing to attend to
            rows.append(torch.zeros(heads, v.shape[2], dtype=torch.float64))
            continue
        s = logits[mine]  # (deg, H)
        alive = keep[mine]  # (deg, H)
        s = torch.where(alive, s, torch.full_like(s, -torch.inf))
        top = s.max(0).values  # (H,)
        top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))  # all masked
        p = torch.exp(s - top)  # masked edges: 0
        p = p / p.sum(0).clamp_min(1e-300)
        if hard is not None:
            chosen = torch.zeros_like(alive)
            for h in range(heads):
                ranked = sorted(range(len(mine)), key=lambda a: -float(p[a, h].detach()))
                chosen[ranked[:hard], h] = True
            p = p * (chosen & alive)
            p = p / p.sum(0).clamp_min(1e-300)
        weights[mine] = p
        rows.append(torch.einsum("eh,ehd->hd", p, v[src[mine]]))
    out = torch.stack(rows) if rows else torch.zeros(0, heads, v.shape[2], dtype=torch.float64)
    return out, weights


def dense_weights(src, tgt, weights: Tensor, num_q: int, num_kv: int) -> Tensor:
    """(H, num_q, num_kv) matrix of the per-edge weights (E, H), summing repeated edges."""
    out = torch.zeros(weights.shape[1], num_q, num_kv, dtype=weights.dtype)
    for e, (j, i) in enumerate(zip(list(src), list(tgt), strict=True)):
        out[:, int(i), int(j)] += weights[e]
    return out


# ---------------------------------------------------------------------------------------
# test cases: a topology of the library next to its independently enumerated edges

# distinct set sizes, an empty set and a single item; heads, widths all different
SIZES = [3, 5, 0, 7, 1]
SIZES_Q = [2, 0, 3, 1, 4]  # set 1 has no query, set 2 has no key
SIZES_KV = [5, 3, 0, 7, 1]
POOL_Q = [1, 0, 1, 1, 1]  # one query per set; set 1 has none, set 2's query has no key
HEADS, DK, DV, HIDDEN = 2, 4, 5, 6


@dataclass
class Case:
    """A topology from ``setattn.topology`` and the reference's own edge list."""

    topology: object
    src: list[int]
    tgt: list[int]
    num_q: int
    num_kv: int

    @property
    def num_edges(self) -> int:
        return len(self.src)


def random_edge_list(num_q: int, num_kv: int, n_edges: int, gen: torch.Generator,
                     isolated: int | None = None) -> tuple[list[int], list[int]]:
    """Random (src, tgt) in random order; ``isolated`` is a target given no edge."""
    src = torch.randint(0, num_kv, (n_edges,), generator=gen).tolist()
    tgt = torch.randint(0, num_q, (n_edges,), generator=gen).tolist()
    if isolated is not None:
        tgt = [t if t != isolated else (t + 1) % num_q for t in tgt]
    return src, tgt


def make_case(name: str, sizes=SIZES, sizes_q=SIZES_Q, sizes_kv=SIZES_KV) -> Case:
    """``complete``, ``bipartite``, ``pool`` (bipartite, at most one query per set),
    ``window`` (radius 2), ``window0``, ``window_wide`` (radius beyond every set) or
    ``edges`` (a random graph with an isolated target, a repeated edge, edges in no
    particular order)."""
    from setattn import topology as T

    ptr = _offsets(sizes)
    if name == "complete":
        return Case(T.complete(ptr), *complete_edges(sizes), ptr[-1], ptr[-1])
    if name == "bipartite":
        pq, pk = _offsets(sizes_q), _offsets(sizes_kv)
        return Case(T.bipartite(pq, pk), *bipartite_edges(sizes_q, sizes_kv), pq[-1], pk[-1])
    if name == "pool":  # at most one query per set, as in attention pooling
        pq, pk = _offsets(POOL_Q), _offsets(sizes_kv)
        return Case(T.bipartite(pq, pk), *bipartite_edges(POOL_Q, sizes_kv), pq[-1], pk[-1])
    if name.startswith("window"):
        radius = {"window": 2, "window0": 0, "window_wide": 50}[name]
        return Case(T.window(ptr, radius), *window_edges(sizes, radius), ptr[-1], ptr[-1])
    if name == "edges":
        num_q, num_kv = 9, 11
        gen = torch.Generator().manual_seed(7)
        src, tgt = random_edge_list(num_q, num_kv, 29, gen, isolated=4)
        src.append(src[0])  # a repeated edge is a second, separate edge
        tgt.append(tgt[0])
        index = torch.tensor([src, tgt])
        return Case(T.edges(index, (num_kv, num_q)), src, tgt, num_q, num_kv)
    raise KeyError(name)


TOPOLOGIES = ["complete", "bipartite", "window", "edges"]


SCORES = {  # name -> constructor(key width, hidden width)
    "dot": lambda dk, a: S.Dot(),
    "scaled_dot": lambda dk, a: S.ScaledDot(),
    "scaled_dot_0.3": lambda dk, a: S.ScaledDot(scale=0.3),
    "bilinear": lambda dk, a: S.Bilinear(HEADS, dk),
    "additive": lambda dk, a: S.Additive(HEADS, dk, hidden=a),
    "concat_additive": lambda dk, a: S.ConcatAdditive(HEADS, dk, hidden=a),
    "gat": lambda dk, a: S.GAT(HEADS, dk),
    "gatv2": lambda dk, a: S.GATv2(HEADS, dk, hidden=a),
    "gatv2_unprojected": lambda dk, a: S.GATv2(HEADS, dk, project=False),
    "user": lambda dk, a: UserScore(HEADS),
}
DOT_SCORES = ["dot", "scaled_dot", "scaled_dot_0.3", "bilinear"]

# the width of edge_attr each score takes: None for (E, H), an int A for (E, H, A)
EDGE_ATTR_WIDTH = {
    "additive": HIDDEN,
    "concat_additive": HIDDEN,
    "gat": None,
    "gatv2": HIDDEN,
    "gatv2_unprojected": DK,
    "user": None,
}


def make_score(name: str, dk: int = DK, hidden: int = HIDDEN, dtype=torch.float64) -> nn.Module:
    """A score of ``SCORES`` with its parameters shaken away from their initial values."""
    score = SCORES[name](dk, hidden).to(dtype)
    with torch.no_grad():  # GAT's xavier init and zero biases are too tame for a test
        for p in score.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return score
