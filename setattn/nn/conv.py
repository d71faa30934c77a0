"""Graph attention convolutions with PyG's call ``(x, edge_index, edge_attr=None)``.

Parameter names follow PyG's ``GATConv`` / ``GATv2Conv`` so that ``from_pyg`` is a
plain copy; the attention itself is one ``setattn.attend`` over the edge list.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch_geometric.utils import add_self_loops, remove_self_loops

from setattn import scores
from setattn.engine import AttentionGraph, attend
from setattn.topology import edges


def _split(x: Tensor | tuple[Tensor, Tensor]) -> tuple[Tensor, Tensor]:
    """Node features -> (source, target) features; one tensor serves as both."""
    if isinstance(x, Tensor):
        return x, x
    x_src, x_dst = x
    if x_dst is None:
        raise ValueError("bipartite input needs target features: pass (x_src, x_dst)")
    return x_src, x_dst


def _as_2d(edge_attr: Tensor) -> Tensor:
    """(E,) or (E, A) edge features -> (E, A)."""
    return edge_attr[:, None] if edge_attr.dim() == 1 else edge_attr


# One-slot memo, as in ``topology.edges``: the GAT layers of a model usually get the same
# edge_index tensor at every call, and handing the engine the same looped tensor each
# time lets it reuse the sparse layout cached for it. Keyed by identity, in-place
# version and node count, so a different or modified tensor never matches. Only used
# without edge features (their self-loop fill depends on their values).
_last_loops: list[tuple[Tensor, int, int, Tensor, int]] = []


def _with_self_loops(edge_index: Tensor, edge_attr: Tensor | None, num_nodes: int,
                     fill_value: float | Tensor | str) -> tuple[Tensor, Tensor | None]:
    """Replace existing self loops by one per node i < num_nodes (PyG's rule for GAT)."""
    if edge_attr is None and _last_loops:
        given, version, n, looped, looped_version = _last_loops[0]
        if (given is edge_index and version == edge_index._version and n == num_nodes
                and looped_version == looped._version):
            return looped, None
    looped, looped_attr = add_self_loops(*remove_self_loops(edge_index, edge_attr),
                                         fill_value=fill_value, num_nodes=num_nodes)
    if edge_attr is None:
        _last_loops[:] = [(edge_index, edge_index._version, num_nodes, looped, looped._version)]
    return looped, looped_attr


def _project_edges(lin: nn.Linear, edge_attr: Tensor) -> Tensor:
    """``lin(edge_attr)`` for (E, A) or (E,) edge features: (E, out), the same numbers.

    Multiplying by the transposed weight made contiguous makes autograd compute the
    weight's gradient as (A, E) @ (E, out) instead of (out, E) @ (E, A), whose narrow
    output MKL computes slower for the few columns A of bond features
    (benchmarks/results/engine.md).
    """
    out = _as_2d(edge_attr).mm(lin.weight.t().contiguous())  # (E, out)
    return out if lin.bias is None else out + lin.bias


def _finish(z: Tensor, concat: bool, res: nn.Linear | None, bias: Tensor | None,
            x_dst: Tensor) -> Tensor:
    """(Nt, H, C) attention output -> (Nt, H * C) or (Nt, C), plus skip and bias."""
    out = z.flatten(1) if concat else z.mean(dim=1)
    if res is not None:
        out = out + res(x_dst)
    if bias is not None:
        out = out + bias
    return out


def _copy(dst: Tensor, src: Tensor) -> None:
    with torch.no_grad():
        dst.copy_(src.reshape(dst.shape))


class GATConv(nn.Module):
    """Graph attention layer (Velickovic et al. 2018, "Graph Attention Networks").

    ``x'_i = sum_{j in N(i) [+ i]} p_ij W x_j`` with p_ij the softmax over j of
    ``LeakyReLU(a_dst . W x_i + a_src . W x_j [+ a_edge . W_e e_ij])``, per head;
    the same layer as PyG's ``GATConv`` (same parameter names and defaults).

    Args:
        in_channels: F, or (F_src, F_dst) for bipartite graphs (separate projections
            ``lin_src``/``lin_dst`` instead of the shared ``lin``).
        out_channels: C per head.
        heads: H.
        concat: concatenate heads -> (N, H * C); else average -> (N, C).
        negative_slope: LeakyReLU slope.
        dropout: dropout on the attention weights.
        add_self_loops: replace the graph's self loops by one per node (PyG's default).
        edge_dim: width of edge features, or None to ignore them.
        fill_value: edge features of added self loops ("mean" of the incoming edges,
            any ``torch_geometric.utils.add_self_loops`` reduce, or a constant).
        bias: learn an output bias.
        residual: add a learned linear skip connection of the target features.
    """

    def __init__(
        self,
        in_channels: int | tuple[int, int],
        out_channels: int,
        heads: int = 1,
        concat: bool = True,
        negative_slope: float = 0.2,
        dropout: float = 0.0,
        add_self_loops: bool = True,
        edge_dim: int | None = None,
        fill_value: float | Tensor | str = "mean",
        bias: bool = True,
        residual: bool = False,
    ):
        super().__init__()
        self.in_channels, self.out_channels, self.heads = in_channels, out_channels, heads
        self.concat, self.dropout, self.add_self_loops = concat, dropout, add_self_loops
        self.edge_dim, self.fill_value = edge_dim, fill_value
        hc = heads * out_channels
        self.lin = self.lin_src = self.lin_dst = None
        if isinstance(in_channels, int):
            self.lin = nn.Linear(in_channels, hc, bias=False)
        else:
            self.lin_src = nn.Linear(in_channels[0], hc, bias=False)
            self.lin_dst = nn.Linear(in_channels[1], hc, bias=False)
        self.score = scores.GAT(heads, out_channels, negative_slope)  # att_src, att_dst (H, C)
        self.lin_edge = self.att_edge = None
        if edge_dim is not None:
            self.lin_edge = nn.Linear(edge_dim, hc, bias=False)
            self.att_edge = nn.Parameter(torch.empty(heads, out_channels))  # (H, C)
        total = hc if concat else out_channels
        in_dst = in_channels if isinstance(in_channels, int) else in_channels[1]
        self.res = nn.Linear(in_dst, total, bias=False) if residual else None
        self.bias = nn.Parameter(torch.zeros(total)) if bias else None
        for lin in (self.lin, self.lin_src, self.lin_dst, self.lin_edge, self.res):
            if lin is not None:
                nn.init.xavier_uniform_(lin.weight)
        if self.att_edge is not None:
            nn.init.xavier_uniform_(self.att_edge)

    def forward(
        self,
        x: Tensor | tuple[Tensor, Tensor],
        edge_index: Tensor,
        edge_attr: Tensor | None = None,
        *,
        return_weights: bool = False,
    ) -> Tensor | tuple[Tensor, AttentionGraph]:
        """Args:
            x: (N, F) node features, or (x_src (Ns, F_src), x_dst (Nt, F_dst)).
            edge_index: (2, E) long, row 0 source j, row 1 target i.
            edge_attr: (E, edge_dim) or (E,) edge features (used when ``edge_dim``).
            return_weights: also return the weights (self loops included).

        Returns:
            (Nt, H * C) if ``concat`` else (Nt, C); and the ``AttentionGraph``.
        """
        h, c = self.heads, self.out_channels
        x_src, x_dst = _split(x)
        lin_src = self.lin if self.lin is not None else self.lin_src
        lin_dst = self.lin if self.lin is not None else self.lin_dst
        xs = lin_src(x_src).view(x_src.shape[0], h, c)  # (Ns, H, C)
        xd = xs  # (Nt, H, C)
        if x_dst is not x_src or lin_dst is not lin_src:
            xd = lin_dst(x_dst).view(x_dst.shape[0], h, c)
        ns, nt = xs.shape[0], xd.shape[0]
        if self.add_self_loops:
            used = edge_attr if self.lin_edge is not None else None  # else PyG ignores it
            edge_index, edge_attr = _with_self_loops(edge_index, used, min(ns, nt),
                                                     self.fill_value)
        alpha_edge = None
        if edge_attr is not None and self.lin_edge is not None:
            e = _project_edges(self.lin_edge, edge_attr).view(edge_attr.shape[0], h, c)  # (E, H, C)
            alpha_edge = (e * self.att_edge).sum(-1)  # (E, H)
        z = attend(xd, xs, xs, edges(edge_index, (ns, nt)), self.score, edge_attr=alpha_edge,
                   dropout=self.dropout, training=self.training, return_weights=return_weights)
        z, graph = z if return_weights else (z, None)  # z: (Nt, H, C)
        out = _finish(z, self.concat, self.res, self.bias, x_dst)
        return (out, graph) if return_weights else out

    @classmethod
    def from_pyg(cls, conv: nn.Module) -> GATConv:
        """A ``GATConv`` holding a copy of the weights of PyG's ``GATConv`` ``conv``."""
        if conv.lin is not None:
            in_channels = conv.lin.weight.shape[1]
        else:
            in_channels = (conv.lin_src.weight.shape[1], conv.lin_dst.weight.shape[1])
        layer = cls(in_channels, conv.out_channels, conv.heads, conv.concat, conv.negative_slope,
                    conv.dropout, conv.add_self_loops, conv.edge_dim, conv.fill_value,
                    bias=conv.bias is not None, residual=conv.res is not None)
        pairs = [(layer.score.att_src, conv.att_src), (layer.score.att_dst, conv.att_dst),
                 (layer.att_edge, conv.att_edge), (layer.bias, conv.bias)]
        for name in ("lin", "lin_src", "lin_dst", "lin_edge", "res"):
            if getattr(layer, name) is not None:
                pairs.append((getattr(layer, name).weight, getattr(conv, name).weight))
        for dst, src in pairs:
            if dst is not None:
                _copy(dst, src)
        return layer.to(conv.att_src.device, conv.att_src.dtype)


class GATv2Conv(nn.Module):
    """GATv2 layer (Brody et al. 2022, "How Attentive are Graph Attention Networks?").

    ``x'_i = sum_{j in N(i) [+ i]} p_ij W_l x_j`` with p_ij the softmax over j of
    ``a . LeakyReLU(W_r x_i + W_l x_j [+ W_e e_ij])``, per head; the same layer as
    PyG's ``GATv2Conv`` (``lin_l`` for sources, ``lin_r`` for targets, ``att``).

    Args:
        in_channels: F, or (F_src, F_dst) for bipartite graphs.
        out_channels: C per head.
        heads: H.
        concat: concatenate heads -> (N, H * C); else average -> (N, C).
        negative_slope: LeakyReLU slope.
        dropout: dropout on the attention weights.
        add_self_loops: replace the graph's self loops by one per node.
        edge_dim: width of edge features, or None.
        fill_value: edge features of added self loops (see ``GATConv``).
        bias: biases in ``lin_l``/``lin_r`` and an output bias (as PyG).
        share_weights: one projection for sources and targets (``lin_r is lin_l``).
        residual: add a learned linear skip connection of the target features.
    """

    def __init__(
        self,
        in_channels: int | tuple[int, int],
        out_channels: int,
        heads: int = 1,
        concat: bool = True,
        negative_slope: float = 0.2,
        dropout: float = 0.0,
        add_self_loops: bool = True,
        edge_dim: int | None = None,
        fill_value: float | Tensor | str = "mean",
        bias: bool = True,
        share_weights: bool = False,
        residual: bool = False,
    ):
        super().__init__()
        self.in_channels, self.out_channels, self.heads = in_channels, out_channels, heads
        self.concat, self.dropout, self.add_self_loops = concat, dropout, add_self_loops
        self.edge_dim, self.fill_value, self.share_weights = edge_dim, fill_value, share_weights
        hc = heads * out_channels
        in_src, in_dst = (in_channels, in_channels) if isinstance(in_channels, int) else in_channels
        self.lin_l = nn.Linear(in_src, hc, bias=bias)
        self.lin_r = self.lin_l if share_weights else nn.Linear(in_dst, hc, bias=bias)
        self.score = scores.GATv2(heads, out_channels, project=False,
                                  negative_slope=negative_slope)  # att (H, C)
        self.lin_edge = nn.Linear(edge_dim, hc, bias=False) if edge_dim is not None else None
        total = hc if concat else out_channels
        self.res = nn.Linear(in_dst, total, bias=False) if residual else None
        self.bias = nn.Parameter(torch.zeros(total)) if bias else None
        for lin in (self.lin_l, self.lin_r, self.lin_edge, self.res):
            if lin is not None:
                nn.init.xavier_uniform_(lin.weight)

    def forward(
        self,
        x: Tensor | tuple[Tensor, Tensor],
        edge_index: Tensor,
        edge_attr: Tensor | None = None,
        *,
        return_weights: bool = False,
    ) -> Tensor | tuple[Tensor, AttentionGraph]:
        """Args:
            x: (N, F) node features, or (x_src (Ns, F_src), x_dst (Nt, F_dst)).
            edge_index: (2, E) long, row 0 source j, row 1 target i.
            edge_attr: (E, edge_dim) or (E,) edge features; needs ``edge_dim``.
            return_weights: also return the weights (self loops included).

        Returns:
            (Nt, H * C) if ``concat`` else (Nt, C); and the ``AttentionGraph``.
        """
        h, c = self.heads, self.out_channels
        x_src, x_dst = _split(x)
        x_l = self.lin_l(x_src).view(x_src.shape[0], h, c)  # (Ns, H, C) sources: keys, values
        x_r = x_l  # (Nt, H, C) targets: queries
        if x_dst is not x_src or self.lin_r is not self.lin_l:
            x_r = self.lin_r(x_dst).view(x_dst.shape[0], h, c)
        ns, nt = x_l.shape[0], x_r.shape[0]
        if self.add_self_loops:
            edge_index, edge_attr = _with_self_loops(edge_index, edge_attr, min(ns, nt),
                                                     self.fill_value)
        e = None
        if edge_attr is not None:
            if self.lin_edge is None:
                raise ValueError("edge_attr given but the layer was built without edge_dim")
            e = _project_edges(self.lin_edge, edge_attr).view(edge_attr.shape[0], h, c)  # (E, H, C)
        z = attend(x_r, x_l, x_l, edges(edge_index, (ns, nt)), self.score, edge_attr=e,
                   dropout=self.dropout, training=self.training, return_weights=return_weights)
        z, graph = z if return_weights else (z, None)  # z: (Nt, H, C)
        out = _finish(z, self.concat, self.res, self.bias, x_dst)
        return (out, graph) if return_weights else out

    @classmethod
    def from_pyg(cls, conv: nn.Module) -> GATv2Conv:
        """A ``GATv2Conv`` holding a copy of the weights of PyG's ``GATv2Conv`` ``conv``."""
        in_src, in_dst = conv.lin_l.weight.shape[1], conv.lin_r.weight.shape[1]
        in_channels = in_src if isinstance(conv.in_channels, int) else (in_src, in_dst)
        layer = cls(in_channels, conv.out_channels, conv.heads, conv.concat, conv.negative_slope,
                    conv.dropout, conv.add_self_loops, conv.edge_dim, conv.fill_value,
                    bias=conv.bias is not None, share_weights=conv.share_weights,
                    residual=conv.res is not None)
        pairs = [(layer.score.att, conv.att), (layer.bias, conv.bias)]
        for name in ("lin_l", "lin_r", "lin_edge", "res"):
            mine, theirs = getattr(layer, name), getattr(conv, name)
            if mine is not None:
                pairs += [(mine.weight, theirs.weight), (mine.bias, theirs.bias)]
        for dst, src in pairs:
            if dst is not None:
                _copy(dst, src)
        return layer.to(conv.att.device, conv.att.dtype)
