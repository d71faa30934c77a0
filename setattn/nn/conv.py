"""Graph attention convolutions with PyG's call ``(x, edge_index, edge_attr=None)``.

Parameter names follow PyG's ``GATConv`` / ``GATv2Conv`` so that ``from_pyg`` is a
plain copy; the attention itself is one ``setattn.attend`` over the edge list. Both are
``torch_geometric.nn.MessagePassing`` modules with PyG's conventions (``size``,
``adj_t`` input, ``return_attention_weights``, lazy ``-1`` channels,
``reset_parameters``): :mod:`setattn.nn.conv_base` says how.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from setattn import scores
from setattn.attention_graph import AttentionGraph
from setattn.nn.conv_base import AttentionConv, project_edges
from setattn.nn.pyg_inputs import Features, is_lazy, linear, reset_linear


def _init_glorot(*lins: nn.Module | None) -> None:
    """Xavier-uniform weights for the projections that already know their input width."""
    for lin in lins:
        if lin is not None and not is_lazy(lin):
            nn.init.xavier_uniform_(lin.weight)


class GATConv(AttentionConv):
    """Graph attention layer (Velickovic et al. 2018, "Graph Attention Networks").

    ``x'_i = sum_{j in N(i) [+ i]} p_ij W x_j`` with p_ij the softmax over j of
    ``LeakyReLU(a_dst . W x_i + a_src . W x_j [+ a_edge . W_e e_ij])``, per head;
    the same layer as PyG's ``GATConv`` (same parameter names and defaults).

    Args:
        in_channels: F, or (F_src, F_dst) for bipartite graphs (separate projections
            ``lin_src``/``lin_dst`` instead of the shared ``lin``); -1 for a width taken
            from the first call.
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

    PYG_NAMES = {"att_src": "score.att_src", "att_dst": "score.att_dst",
                 "att_edge": "att_edge"}

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
        self.negative_slope, self.residual = negative_slope, residual
        hc = heads * out_channels
        self.lin = self.lin_src = self.lin_dst = None
        if isinstance(in_channels, int):
            self.lin = linear(in_channels, hc, bias=False)
        else:
            self.lin_src = linear(in_channels[0], hc, bias=False)
            self.lin_dst = linear(in_channels[1], hc, bias=False)
        self.score = scores.GAT(heads, out_channels, negative_slope)  # att_src, att_dst (H, C)
        self.lin_edge = self.att_edge = None
        if edge_dim is not None:
            self.lin_edge = linear(edge_dim, hc, bias=False)
            self.att_edge = nn.Parameter(torch.empty(heads, out_channels))  # (H, C)
        total = hc if concat else out_channels
        in_dst = in_channels if isinstance(in_channels, int) else in_channels[1]
        self.res = linear(in_dst, total, bias=False) if residual else None
        self.bias = nn.Parameter(torch.zeros(total)) if bias else None
        _init_glorot(self.lin, self.lin_src, self.lin_dst, self.lin_edge, self.res)
        if self.att_edge is not None:
            nn.init.xavier_uniform_(self.att_edge)

    def reset_parameters(self) -> None:
        """Fresh Glorot weights and attention vectors, zero bias (as PyG's)."""
        super().reset_parameters()
        for lin in (self.lin, self.lin_src, self.lin_dst, self.lin_edge, self.res):
            reset_linear(lin)
        for att in (self.score.att_src, self.score.att_dst, self.att_edge):
            if att is not None:
                nn.init.xavier_uniform_(att)
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    def project(self, x_src: Tensor, x_dst: Tensor | None) -> tuple[Tensor, Tensor | None]:
        """(Ns, F_src), (Nt, F_dst) or None -> W x_src (Ns, H, C), W x_dst (Nt, H, C) or None."""
        h, c = self.heads, self.out_channels
        lin_src = self.lin if self.lin is not None else self.lin_src
        lin_dst = self.lin if self.lin is not None else self.lin_dst
        xs = lin_src(x_src).view(x_src.shape[0], h, c)  # (Ns, H, C)
        if x_dst is None:
            return xs, None
        if x_dst is x_src and lin_dst is lin_src:
            return xs, xs
        return xs, lin_dst(x_dst).view(x_dst.shape[0], h, c)  # (Nt, H, C)

    def edge_input(self, edge_attr: Tensor | None) -> Tensor | None:
        """Without ``edge_dim`` PyG ignores edge features."""
        return edge_attr if self.lin_edge is not None else None

    def edge_term(self, edge_attr: Tensor | None) -> Tensor | None:
        """(E, A) edge features -> a_edge . W_e e_ij, (E, H).

        Computed as e_ij . (W_e^T a_edge): the attention vector folded into the weight
        gives an (A, H) matrix, so no (E, H * C) projection is made.
        """
        if edge_attr is None or self.lin_edge is None:
            return None
        if is_lazy(self.lin_edge):  # the first call sizes it
            e = project_edges(self.lin_edge, edge_attr)  # (E, H * C)
            return (e.view(-1, self.heads, self.out_channels) * self.att_edge).sum(-1)
        edge_attr = edge_attr[:, None] if edge_attr.dim() == 1 else edge_attr  # (E, A)
        weight = self.lin_edge.weight.view(self.heads, self.out_channels, -1)  # (H, C, A)
        folded = torch.einsum("hca,hc->ah", weight, self.att_edge)  # (A, H)
        return edge_attr.mm(folded)  # (E, H)

    @classmethod
    def from_pyg(cls, conv: nn.Module) -> GATConv:
        """A ``GATConv`` holding a copy of the weights of PyG's ``GATConv`` ``conv``."""
        layer = cls(conv.in_channels, conv.out_channels, conv.heads, conv.concat,
                    conv.negative_slope, conv.dropout, conv.add_self_loops, conv.edge_dim,
                    conv.fill_value, bias=conv.bias is not None, residual=conv.res is not None)
        layer.load_pyg_state_dict(conv.state_dict())
        return layer.to(conv.att_src.device, conv.att_src.dtype)


class GATv2Conv(AttentionConv):
    """GATv2 layer (Brody et al. 2022, "How Attentive are Graph Attention Networks?").

    ``x'_i = sum_{j in N(i) [+ i]} p_ij W_l x_j`` with p_ij the softmax over j of
    ``a . LeakyReLU(W_r x_i + W_l x_j [+ W_e e_ij])``, per head; the same layer as
    PyG's ``GATv2Conv`` (``lin_l`` for sources, ``lin_r`` for targets, ``att``).

    Args:
        in_channels: F, or (F_src, F_dst) for bipartite graphs; -1 for a width taken
            from the first call.
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

    PYG_NAMES = {"att": "score.att"}

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
        self.negative_slope, self.residual = negative_slope, residual
        hc = heads * out_channels
        in_src, in_dst = (in_channels, in_channels) if isinstance(in_channels, int) else in_channels
        self.lin_l = linear(in_src, hc, bias=bias)
        self.lin_r = self.lin_l if share_weights else linear(in_dst, hc, bias=bias)
        self.score = scores.GATv2(heads, out_channels, project=False,
                                  negative_slope=negative_slope)  # att (H, C)
        self.lin_edge = linear(edge_dim, hc, bias=False) if edge_dim is not None else None
        total = hc if concat else out_channels
        self.res = linear(in_dst, total, bias=False) if residual else None
        self.bias = nn.Parameter(torch.zeros(total)) if bias else None
        _init_glorot(self.lin_l, self.lin_r, self.lin_edge, self.res)

    def reset_parameters(self) -> None:
        """Fresh Glorot weights and attention vector, zero output bias (as PyG's)."""
        super().reset_parameters()
        for lin in (self.lin_l, self.lin_r, self.lin_edge, self.res):
            reset_linear(lin)
        nn.init.xavier_uniform_(self.score.att)
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    def project(self, x_src: Tensor, x_dst: Tensor | None) -> tuple[Tensor, Tensor]:
        """(Ns, F_src), (Nt, F_dst) -> W_l x_src (Ns, H, C) (keys and values), W_r x_dst
        (Nt, H, C) (queries)."""
        if x_dst is None:
            raise ValueError("GATv2Conv needs target features: pass (x_src, x_dst)")
        h, c = self.heads, self.out_channels
        x_l = self.lin_l(x_src).view(x_src.shape[0], h, c)  # (Ns, H, C)
        if x_dst is x_src and self.lin_r is self.lin_l:
            return x_l, x_l
        return x_l, self.lin_r(x_dst).view(x_dst.shape[0], h, c)  # (Nt, H, C)

    def forward(
        self,
        x: Features,
        edge_index: Tensor,
        edge_attr: Tensor | None = None,
        return_attention_weights: bool | None = None,
        *,
        size: tuple[int, int] | None = None,
        return_weights: bool = False,
    ) -> Tensor | tuple[Tensor, tuple[Tensor, Tensor]] | tuple[Tensor, AttentionGraph]:
        """PyG's ``GATv2Conv`` call: ``(x, edge_index, edge_attr, return_attention_weights)``
        in PyG's positional order (PyG's GATv2Conv takes no ``size``; here it is a
        keyword). Arguments and returns as :meth:`AttentionConv.forward`."""
        return super().forward(x, edge_index, edge_attr, size, return_attention_weights,
                               return_weights=return_weights)

    def edge_input(self, edge_attr: Tensor | None) -> Tensor | None:
        """Edge features are used as given (an error without ``edge_dim``)."""
        return edge_attr

    def edge_term(self, edge_attr: Tensor | None) -> Tensor | None:
        """(E, A) edge features -> W_e e_ij, (E, H, C)."""
        if edge_attr is None:
            return None
        if self.lin_edge is None:
            raise ValueError("edge_attr given but the layer was built without edge_dim")
        e = project_edges(self.lin_edge, edge_attr)  # (E, H * C)
        return e.view(-1, self.heads, self.out_channels)  # (E, H, C)

    @classmethod
    def from_pyg(cls, conv: nn.Module) -> GATv2Conv:
        """A ``GATv2Conv`` holding a copy of the weights of PyG's ``GATv2Conv`` ``conv``."""
        layer = cls(conv.in_channels, conv.out_channels, conv.heads, conv.concat,
                    conv.negative_slope, conv.dropout, conv.add_self_loops, conv.edge_dim,
                    conv.fill_value, bias=conv.bias is not None,
                    share_weights=conv.share_weights, residual=conv.res is not None)
        layer.load_pyg_state_dict(conv.state_dict())
        return layer.to(conv.att.device, conv.att.dtype)
