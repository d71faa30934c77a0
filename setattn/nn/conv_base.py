"""What ``GATConv`` and ``GATv2Conv`` share: PyG's conventions around one ``attend`` call.

:class:`AttentionConv` is a ``torch_geometric.nn.MessagePassing``, so PyG's tools see
these layers as its own: ``to_hetero`` builds one copy per edge type and sums them per
destination node type, ``GNNExplainer`` (and every explainer built on ``set_masks``)
finds the layers and masks their messages, ``AttentionExplainer`` reads the attention
weights through message forward hooks. The computation itself never goes through
``propagate()``: it is one :func:`setattn.attend` over the edge list. What PyG's
``propagate()`` would have done for those tools is done here instead:

* explain mode (``self.explain``, an edge mask set by ``set_masks``): every edge gets
  its own copy of its source's key and value, and the value is the masked message
  ``m_e x_j`` (``explain_message``), so the output is ``sum_e p_e m_e x_src(e)`` as in
  PyG, with gradients reaching the mask;
* message forward hooks get ``({"x_j": (E, H, C), "alpha": (E, H)},)`` and the
  messages (E, H, C); they may read them, not replace them. Other ``propagate``-level
  hooks are refused (nothing would call them).

``load_pyg_state_dict`` and ``pyg_state_dict`` convert between PyG's parameter names
(``att_src`` of shape (1, H, C)) and setattn's (``score.att_src``, (H, C)).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor, nn
from torch_geometric.nn import MessagePassing
from torch_geometric.utils import add_self_loops, remove_self_loops

from setattn.attention_graph import AttentionGraph
from setattn.engine import attend
from setattn.nn.pyg_inputs import (
    Features,
    edge_list,
    is_lazy,
    is_sparse_adjacency,
    node_counts,
    split_features,
    weights_like,
)
from setattn.topology import Edges, edges

# One-slot memo, as in ``topology.edges``: the GAT layers of a model usually get the same
# edge_index tensor at every call, and handing the engine the same looped tensor each
# time lets it reuse the sparse layout cached for it. Keyed by identity, in-place
# version and node count, so a different or modified tensor never matches. Only used
# without edge features (their self-loop fill depends on their values).
_last_loops: list[tuple[Tensor, int, int, Tensor, int]] = []


def _without_self_loops(edge_index: Tensor, edge_attr: Tensor | None
                        ) -> tuple[Tensor, Tensor | None]:
    """``remove_self_loops``; on the CPU a graph without any (a molecule's) is returned
    as it is, without the boolean indexing's compaction, which a new batch of small
    graphs would pay on every call. On other devices that check would read the device
    once more, and a compiled or exported graph keeps one path for any edge list."""
    if (edge_index.device.type == "cpu" and not torch.compiler.is_compiling()
            and not bool((edge_index[0] == edge_index[1]).any())):
        return edge_index, edge_attr
    return remove_self_loops(edge_index, edge_attr)


def with_self_loops(edge_index: Tensor, edge_attr: Tensor | None, num_nodes: int,
                    fill_value: float | Tensor | str) -> tuple[Tensor, Tensor | None]:
    """Replace existing self loops by one per node i < num_nodes (PyG's rule for GAT)."""
    memo = edge_attr is None and not torch.compiler.is_compiling()
    if memo and _last_loops:
        given, version, n, looped, looped_version = _last_loops[0]
        if (given is edge_index and version == edge_index._version and n == num_nodes
                and looped_version == looped._version):
            return looped, None
    looped, looped_attr = add_self_loops(*_without_self_loops(edge_index, edge_attr),
                                         fill_value=fill_value, num_nodes=num_nodes)
    if memo:
        _last_loops[:] = [(edge_index, edge_index._version, num_nodes, looped, looped._version)]
    return looped, looped_attr


def project_edges(lin: nn.Module, edge_attr: Tensor) -> Tensor:
    """``lin(edge_attr)`` for (E, A) or (E,) edge features: (E, out), the same numbers.

    Multiplying by the transposed weight made contiguous makes autograd compute the
    weight's gradient as (A, E) @ (E, out) instead of (out, E) @ (E, A), whose narrow
    output MKL computes slower for the few columns A of bond features
    (git show 1bd1cfd:benchmarks/results/engine.md).
    """
    edge_attr = edge_attr[:, None] if edge_attr.dim() == 1 else edge_attr  # (E, A)
    if is_lazy(lin):  # the first call sizes it
        return lin(edge_attr)
    out = edge_attr.mm(lin.weight.t().contiguous())  # (E, out)
    return out if lin.bias is None else out + lin.bias


class AttentionConv(MessagePassing):
    """Base of the graph attention layers: PyG's call and return conventions.

    Subclasses set ``heads``, ``out_channels``, ``concat``, ``dropout``,
    ``add_self_loops``, ``fill_value``, ``score``, ``res``, ``bias`` and
    ``PYG_NAMES`` (PyG parameter name -> setattn name, for the (1, H, C) attention
    vectors), and define ``project``, ``edge_input`` and ``edge_term``.
    """

    PYG_NAMES: dict[str, str] = {}

    def __init__(self) -> None:
        super().__init__(aggr="add", node_dim=0)

    def project(self, x_src: Tensor, x_dst: Tensor | None) -> tuple[Tensor, Tensor | None]:
        """Node features -> keys/values (Ns, H, C) and queries (Nt, H, C) or None."""
        raise NotImplementedError

    def edge_input(self, edge_attr: Tensor | None) -> Tensor | None:
        """The edge features the layer uses (self loops get theirs from them)."""
        raise NotImplementedError

    def edge_term(self, edge_attr: Tensor | None) -> Tensor | None:
        """(E, A) edge features -> the score's per-edge input, or None."""
        raise NotImplementedError

    def forward(
        self,
        x: Features,
        edge_index: Tensor,
        edge_attr: Tensor | None = None,
        size: tuple[int, int] | None = None,
        return_attention_weights: bool | None = None,
        *,
        return_weights: bool = False,
    ) -> Tensor | tuple[Tensor, tuple[Tensor, Tensor]] | tuple[Tensor, AttentionGraph]:
        """Args:
            x: (N, F) node features, or (x_src (Ns, F_src), x_dst (Nt, F_dst)); PyG's
                ``GATConv`` also takes x_dst None (then Nt from ``size``).
            edge_index: (2, E) long, row 0 source j, row 1 target i; or PyG's
                transposed sparse adjacency ``adj_t`` (Nt, Ns): a ``torch.sparse``
                COO/CSR/CSC tensor, or torch-sparse's ``SparseTensor``.
            edge_attr: (E, edge_dim) or (E,) edge features (used when ``edge_dim``), in
                the order of ``edge_index`` (of ``to_edge_index(adj_t)`` for a sparse
                adjacency).
            size: (Ns, Nt), checked against the features.
            return_attention_weights: PyG's convention: also return
                ``(edge_index, alpha)`` with alpha (E, H) (self loops included), or
                ``(adj, alpha)`` in the layout of a sparse ``adj_t``. alpha carries no
                gradient and no dropout (setattn's engine hands weights back detached).
            return_weights: setattn's convention: also return an ``AttentionGraph``.

        Returns:
            (Nt, H * C) if ``concat`` else (Nt, C); and the weights when asked for.
        """
        if return_weights and return_attention_weights:
            raise ValueError("pass return_weights (an AttentionGraph) or "
                             "return_attention_weights (PyG's tuple), not both")
        self.check_hooks()
        x_src, x_dst = split_features(x)
        ns, nt = node_counts(x_src, x_dst, edge_index, size)
        ei = edge_list(edge_index)
        xs, xd = self.project(x_src, x_dst)  # (Ns, H, C), (Nt, H, C) or None
        if xd is None:  # no target features: the target term of the score is 0
            xd = xs.new_zeros(nt, self.heads, self.out_channels)  # (Nt, H, C)
        ea = self.edge_input(edge_attr)
        if self.add_self_loops:
            ei, ea = with_self_loops(ei, ea, min(ns, nt), self.fill_value)
        need = bool(return_weights or return_attention_weights or self._message_forward_hooks)
        z, graph = self.attend_edges(xd, xs, ei, self.edge_term(ea), (ns, nt), need)
        out = z.flatten(1) if self.concat else z.mean(dim=1)  # (Nt, H * C) or (Nt, C)
        if self.res is not None and x_dst is not None:
            out = out + self.res(x_dst)
        if self.bias is not None:
            out = out + self.bias
        if graph is not None and self._message_forward_hooks:
            self.run_message_hooks(xs, graph)
        if return_weights:
            return out, graph
        if return_attention_weights:
            if is_sparse_adjacency(edge_index):
                return out, weights_like(edge_index, ei, graph.weights, (ns, nt))
            return out, (ei, graph.weights)
        return out

    def attend_edges(self, xd: Tensor, xs: Tensor, ei: Tensor, e: Tensor | None,
                     num_nodes: tuple[int, int],
                     need: bool) -> tuple[Tensor, AttentionGraph | None]:
        """One ``attend`` along ``ei``: (Nt, H, C) output and the weights if ``need``.

        In explain mode every edge has its own key and masked value (module docstring).
        """
        ns, nt = num_nodes
        if self.explain:
            src, dst = ei[0], ei[1]
            k = xs.index_select(0, src)  # (E, H, C) one key per edge
            v = self.explain_message(k, min(ns, nt))  # (E, H, C) m_e x_src(e)
            slots = torch.arange(src.numel(), device=src.device)  # (E,)
            top = Edges(torch.stack([slots, dst]), num_q=nt, num_kv=src.numel())
        else:
            k = v = xs
            top = edges(ei, (ns, nt), validate=False)  # as PyG: no host read
        res = attend(xd, k, v, top, self.score, edge_attr=e, dropout=self.dropout,
                     training=self.training, return_weights=need)
        z, graph = res if need else (res, None)
        if graph is not None and self.explain:  # the weights belong to the real edges
            graph = AttentionGraph(ei, graph.weights, (ns, nt), bipartite=ns != nt)
        return z, graph

    def run_message_hooks(self, xs: Tensor, graph: AttentionGraph) -> None:
        """PyG's message forward hooks, with PyG's message ``alpha_e x_src(e)``."""
        x_j = xs.index_select(0, graph.edge_index[0])  # (E, H, C)
        messages = graph.weights[..., None] * x_j  # (E, H, C)
        for hook in self._message_forward_hooks.values():
            if hook(self, ({"x_j": x_j, "alpha": graph.weights},), messages) is not None:
                raise NotImplementedError(
                    f"{type(self).__name__} computes its messages inside setattn.attend: a "
                    f"message forward hook may read them, not replace them")

    def check_hooks(self) -> None:
        """Refuses PyG hooks that no ``propagate()`` would call (see the module docstring)."""
        unused = (self._propagate_forward_pre_hooks, self._propagate_forward_hooks,
                  self._message_forward_pre_hooks, self._aggregate_forward_pre_hooks,
                  self._aggregate_forward_hooks, self._message_and_aggregate_forward_pre_hooks,
                  self._message_and_aggregate_forward_hooks)
        if any(unused):
            raise NotImplementedError(
                f"{type(self).__name__} runs no propagate(): only message forward hooks "
                f"(register_message_forward_hook) are called")

    def __prepare_scriptable__(self) -> nn.Module:
        raise NotImplementedError(
            f"torch.jit.script cannot compile setattn's {type(self).__name__}: its forward "
            f"runs setattn.attend, which dispatches on Python objects (topologies with "
            f"caches, score modules, capture hooks, autograd Functions) that TorchScript "
            f"does not support. torch.jit is deprecated in torch 2.13; use torch.compile "
            f"or torch.export instead")

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({self.in_channels}, {self.out_channels}, "
                f"heads={self.heads})")

    def load_pyg_state_dict(self, state_dict: Mapping[str, Tensor], strict: bool = True):
        """Load the ``state_dict()`` of the PyG layer of the same kind (``att_src``...)."""
        return load_pyg_state_dict(self, state_dict, strict=strict)

    def pyg_state_dict(self) -> dict[str, Tensor]:
        """This layer's parameters under PyG's names and shapes."""
        return pyg_state_dict(self)


def _renames(module: nn.Module) -> dict[str, tuple[str, int]]:
    """PyG key -> (setattn key, heads) for the attention vectors of every setattn conv."""
    out = {}
    for prefix, layer in module.named_modules():
        if isinstance(layer, AttentionConv):
            dot = f"{prefix}." if prefix else ""
            for theirs, mine in layer.PYG_NAMES.items():
                out[dot + theirs] = (dot + mine, layer.heads)
    return out


def load_pyg_state_dict(module: nn.Module, state_dict: Mapping[str, Tensor],
                        strict: bool = True):
    """Load a state dict saved from a PyG model into the same model built with setattn's
    ``GATConv`` / ``GATv2Conv`` (anywhere inside ``module``, ``to_hetero`` copies too).

    PyG's (1, H, C) attention vectors (``att_src``, ``att_dst``, ``att_edge``, ``att``)
    become setattn's (H, C) ``score.att_src``...; every other key is loaded as it is.

    Returns:
        what ``module.load_state_dict`` returns (missing and unexpected keys).
    """
    renames = _renames(module)
    mine = {}
    for key, value in state_dict.items():
        if key in renames:
            key, heads = renames[key]
            value = value.reshape(heads, -1)  # (1, H, C) -> (H, C)
        mine[key] = value
    return module.load_state_dict(mine, strict=strict)


def pyg_state_dict(module: nn.Module) -> dict[str, Tensor]:
    """``module.state_dict()`` with setattn's conv parameters under PyG's names and shapes,
    loadable into the same model built with PyG's layers."""
    back = {mine: (theirs, heads) for theirs, (mine, heads) in _renames(module).items()}
    out = {}
    for key, value in module.state_dict().items():
        if key in back:
            key, heads = back[key]
            value = value.reshape(1, heads, -1)  # (H, C) -> (1, H, C)
        out[key] = value
    return out
