"""K networks of an ensemble as one module: each member's layers side by side, run on
one batch in one pass.

A molecule network spends most of a training step on small operations whose cost
hardly depends on their width. ``MemberGroup`` holds K networks (``MoleculeNetwork``) of one
configuration with every weight stacked along a leading member axis, and runs them
together::

    atoms x (N, F) --one Linear of K D outputs--> h (N, K, D)
    L x [ h_k = h_k + ELU(GAT_k(h_k))      the K H heads attend in one engine call,
                                           the projections are one batched product ]
    readout: K H heads of attention pooling in one call ++ sum pooling, (G, K, 2 D)
    head: batched products, (K, G, 2 D + F_desc) -> (G, K, T)

Member k's output is what ``MoleculeNetwork`` k gives on the same batch (to float
rounding; a float64 test holds them to 1e-12), and its gradients are the ones its own
loss gives: no weight is shared. ``networks()`` writes the weights back into K
networks (``MoleculeNetwork``), so a grouped fit saves, predicts and explains as any other.

Only the architectures of ``supports`` are grouped (GAT layers, no global attention
layers); the others train one member at a time.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from setattn.engine import attend
from setattn.engine.scoring import DEFAULT_SCORE, dot_scale
from setattn.molprop.config import NetworkConfig, TrainConfig, together_clash
from setattn.molprop.network import MoleculeNetwork, add_self_loops, fit_scaling, sum_pool
from setattn.scores import GAT, Dot
from setattn.topology import edges, pooling

__all__ = ["MemberGroup", "supports"]


def supports(config: NetworkConfig) -> bool:
    """Whether networks of ``config`` can be grouped: GAT layers (``--conv gat``), no
    global attention layers (``together_clash`` of the architecture alone)."""
    return together_clash(TrainConfig(), config) is None


def _stack(states: Sequence[dict[str, Tensor]], key: str) -> nn.Parameter:
    """Member k's ``key`` at index k of a new leading axis, (K, ...)."""
    return nn.Parameter(torch.stack([s[key].detach() for s in states]).clone())


def _batched(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """Member k's ``Linear`` on its own rows: x (N, K, I), weight (K, O, I), bias (K, O)
    -> (N, K, O)."""
    out = torch.einsum("nki,koi->nko", x, weight)  # (N, K, O)
    return out if bias is None else out + bias


class MemberGroup(nn.Module):
    """K networks (``MoleculeNetwork``) of one configuration as one module.

    Args:
        networks: the K members (their weights are copied; the training-set scaling of
            targets and descriptors is taken from the first, as every member of a run
            fits it on the same molecules).

    Raises:
        ValueError: for no networks, networks of different configurations, or an
            architecture ``supports`` refuses.
    """

    def __init__(self, networks: Sequence[MoleculeNetwork]):
        super().__init__()
        if not networks:
            raise ValueError("a member group needs at least one network")
        self.config = c = networks[0].config
        if any(n.config != c for n in networks):
            raise ValueError("the networks of a member group must share one configuration")
        if not supports(c):
            raise ValueError(f"networks with --conv {c.conv} and --global-layers "
                             f"{c.global_layers} cannot be grouped (GAT layers, no global "
                             f"layers)")
        self.members = k = len(networks)
        states = [n.state_dict() for n in networks]
        heads, width = c.heads, c.hidden // c.heads
        self.embed_weight, self.embed_bias = (_stack(states, "embed.weight"),
                                              _stack(states, "embed.bias"))  # (K, D, F), (K, D)
        self.lin = nn.ParameterList()  # (K, H C, D) per layer
        self.lin_edge = nn.ParameterList()  # (K, H C, A) per layer
        self.att_edge = nn.ParameterList()  # (K, H, C) per layer
        self.bias = nn.ParameterList()  # (K, H C) per layer
        self.norm_weight, self.norm_bias = nn.ParameterList(), nn.ParameterList()  # (K, D)
        self.scores = nn.ModuleList()
        with torch.random.fork_rng():  # the scores' own initialisation is overwritten
            for layer in range(c.layers):
                pre = f"convs.{layer}."
                self.lin.append(_stack(states, pre + "lin.weight"))
                self.lin_edge.append(_stack(states, pre + "lin_edge.weight"))
                self.att_edge.append(_stack(states, pre + "att_edge"))
                self.bias.append(_stack(states, pre + "bias"))
                score = GAT(k * heads, width, networks[0].convs[layer].negative_slope)
                score.to(states[0][pre + "score.att_src"].dtype)
                with torch.no_grad():  # member k's heads are rows k H to (k + 1) H
                    score.att_src.copy_(torch.cat([s[pre + "score.att_src"] for s in states]))
                    score.att_dst.copy_(torch.cat([s[pre + "score.att_dst"] for s in states]))
                self.scores.append(score)
                if c.norm == "layer":
                    self.norm_weight.append(_stack(states, f"norms.{layer}.weight"))
                    self.norm_bias.append(_stack(states, f"norms.{layer}.bias"))
        self.pool_weight, self.pool_bias = (_stack(states, "pool.lin_k.weight"),
                                            _stack(states, "pool.lin_k.bias"))  # (K, H C, D)
        self.query = _stack(states, "pool.query")  # (K, H, C)
        self.hidden_weight, self.hidden_bias = (_stack(states, "head.0.weight"),
                                                _stack(states, "head.0.bias"))  # (K, D, I)
        self.out_weight, self.out_bias = (_stack(states, "head.3.weight"),
                                          _stack(states, "head.3.bias"))  # (K, T, D)
        for name in ("target_mean", "target_std", "descriptor_mean", "descriptor_std"):
            self.register_buffer(name, getattr(networks[0], name).detach().clone())
        self.dropout = c.dropout

    def fit_scaling(self, y: Tensor, descriptors: Tensor | None = None) -> None:
        """Set target (regression) and descriptor scaling from training data, as
        ``MoleculeNetwork.fit_scaling`` does for each member."""
        fit_scaling(self, y, descriptors)

    def scale_targets(self, y: Tensor) -> Tensor:
        """(G, T) targets in the units the forward pass predicts."""
        if self.config.task == "regression":
            return (y - self.target_mean.to(y.device)) / self.target_std.to(y.device)
        return y

    def to_units(self, out: Tensor) -> Tensor:
        """(..., T) forward outputs as target units (regression) or probabilities."""
        if self.config.task == "regression":
            return out * self.target_std.to(out.device) + self.target_mean.to(out.device)
        return torch.sigmoid(out)

    def _edge_term(self, layer: int, edge_attr: Tensor) -> Tensor:
        """(E, A) bond features -> every member's GAT edge term, (E, K H), the attention
        vector folded into the edge weight as ``GATConv.edge_term`` does."""
        c = self.config
        weight = self.lin_edge[layer].view(self.members, c.heads, c.hidden // c.heads, -1)
        folded = torch.einsum("khca,khc->akh", weight, self.att_edge[layer])  # (A, K, H)
        return edge_attr.mm(folded.flatten(1))  # (E, K H)

    def _pool_logits(self, h: Tensor) -> Tensor:
        """(N, K, D) atom states -> every member's readout logits (N, K H), each query
        folded into its key projection (``GlobalAttentionPool.query_logits``)."""
        c = self.config
        width = c.hidden // c.heads
        scale = dot_scale(DEFAULT_SCORE, width)
        weight = self.pool_weight.view(self.members, c.heads, width, -1)  # (K, H, C, D)
        folded = torch.einsum("khcd,khc->khd", weight, self.query) * scale  # (K, H, D)
        bias = (self.pool_bias.view(self.members, c.heads, width) * self.query).sum(-1)
        return (torch.einsum("nkd,khd->nkh", h, folded) + bias * scale).flatten(1)  # (N, K H)

    def forward(self, batch) -> Tensor:
        """Args:
            batch: a PyG ``Batch`` as ``MoleculeNetwork.forward`` takes it.

        Returns:
            (G, K, T): member k's standardised regression outputs or logits at [:, k].
        """
        c, k = self.config, self.members
        n, g = batch.x.shape[0], batch.num_graphs
        heads, width = c.heads, c.hidden // c.heads
        edge_index, edge_attr = add_self_loops(batch.edge_index, batch.edge_attr, n)
        top = edges(edge_index, (n, n), validate=False)
        h = F.linear(batch.x, self.embed_weight.flatten(0, 1),
                     self.embed_bias.flatten()).view(n, k, c.hidden)  # (N, K, D)
        for layer, score in enumerate(self.scores):
            x = h
            if c.norm == "layer":
                x = F.layer_norm(h, (c.hidden,)) * self.norm_weight[layer] \
                    + self.norm_bias[layer]  # (N, K, D)
            xs = _batched(x, self.lin[layer]).reshape(n, k * heads, width)  # (N, K H, C)
            z = attend(xs, xs, xs, top, score, edge_attr=self._edge_term(layer, edge_attr),
                       dropout=self.dropout, training=self.training)  # (N, K H, C)
            h = h + F.elu(z.view(n, k, c.hidden) + self.bias[layer])  # (N, K, D)
        logits = self._pool_logits(h)[:, :, None]  # (N, K H, 1)
        pooled = attend(logits.new_ones(g, k * heads, 1), logits,
                        h.view(n, k * heads, width), pooling(batch.batch, g, validate=False),
                        Dot())  # (G, K H, C)
        summed = sum_pool(h.flatten(1), batch.batch, g)  # (G, K D)
        parts = [pooled.view(g, k, c.hidden), summed.view(g, k, c.hidden)]
        if c.descriptor_dim:
            d = (batch.descriptors - self.descriptor_mean) / self.descriptor_std  # (G, F_desc)
            parts.append(d.clamp(-10.0, 10.0)[:, None].expand(g, k, -1))
        hidden = F.relu(_batched(torch.cat(parts, 2), self.hidden_weight, self.hidden_bias))
        hidden = F.dropout(hidden, c.dropout, self.training)  # (G, K, D)
        return _batched(hidden, self.out_weight, self.out_bias)  # (G, K, T)

    def write_member(self, m: int, network: MoleculeNetwork) -> MoleculeNetwork:
        """Member ``m``'s weights and scaling written into ``network`` (of the group's
        configuration, changed in place and returned)."""
        c = self.config
        rows = slice(m * c.heads, (m + 1) * c.heads)  # member m's heads in the scores
        state = {"embed.weight": self.embed_weight[m], "embed.bias": self.embed_bias[m],
                 "pool.lin_k.weight": self.pool_weight[m], "pool.lin_k.bias": self.pool_bias[m],
                 "pool.query": self.query[m],
                 "head.0.weight": self.hidden_weight[m], "head.0.bias": self.hidden_bias[m],
                 "head.3.weight": self.out_weight[m], "head.3.bias": self.out_bias[m]}
        for layer, score in enumerate(self.scores):
            pre = f"convs.{layer}."
            state |= {pre + "lin.weight": self.lin[layer][m],
                      pre + "lin_edge.weight": self.lin_edge[layer][m],
                      pre + "att_edge": self.att_edge[layer][m], pre + "bias": self.bias[layer][m],
                      pre + "score.att_src": score.att_src[rows],
                      pre + "score.att_dst": score.att_dst[rows]}
            if c.norm == "layer":
                state |= {f"norms.{layer}.weight": self.norm_weight[layer][m],
                          f"norms.{layer}.bias": self.norm_bias[layer][m]}
        for name in ("target_mean", "target_std", "descriptor_mean", "descriptor_std"):
            state[name] = getattr(self, name)
        network.load_state_dict({key: v.detach().clone() for key, v in state.items()})
        return network

    def networks(self, template: Sequence[MoleculeNetwork]) -> list[MoleculeNetwork]:
        """Every member's weights written into ``template`` (K networks of the group's
        configuration, changed in place and returned)."""
        if len(template) != self.members:
            raise ValueError(f"a group of {self.members} networks writes into "
                             f"{self.members} networks, got {len(template)}")
        return [self.write_member(m, network) for m, network in enumerate(template)]
