"""The attention network of the molecule model: graph attention over the atoms, attention
pooling, an MLP head.

The layers::

    atoms x (N, F_atom) --Linear--> h (N, D)
    L x [ h = h + ELU(GATConv(h, bonds + self loops, bond features))   (GATv2Conv: --conv gatv2)
          [after each of the last ``global_layers``: h = DistanceBiasedBlock(h), global
           attention over all atoms of the molecule biased by their bond distance] ]
    readout: multi-head global attention pooling (G, D) ++ sum pooling (G, D)
             [++ molecule descriptors (G, F_desc)]
    head: Linear -> ReLU -> Dropout -> Linear -> (G, T)

Regression outputs are in standardised target units (``to_units`` scales them back);
classification outputs are logits, one per task. The readout's attention weights
(which atoms the molecule's summary looked at) are what ``setattn explain`` draws; they
are recorded under the module path ``"pool"`` by ``setattn.capture()``.

The network is one part of the model a run trains; ``setattn.molprop.ensemble`` holds K
of them with the kernel part (``setattn.molprop.kernels``) and stacks their predictions.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from setattn.molprop.config import (
    NetworkConfig,
)
from setattn.nn import DistanceBiasedBlock, GATConv, GATv2Conv, GlobalAttentionPool, hop_buckets
from setattn.topology import complete, ptr_from_batch

_SCALING = ("target_mean", "target_std", "descriptor_mean", "descriptor_std")
"""The buffers of statistics fitted on a run's training set (not the encoder's)."""


def target_scaling(y: Tensor) -> tuple[Tensor, Tensor]:
    """Mean (T,) and standard deviation (T,) of (M, T) regression targets, NaN skipped
    (0 and 1 for a task without labels)."""
    mean = torch.nanmean(y, 0)  # (T,)
    std = torch.nanmean((y - mean).square(), 0).sqrt()  # (T,)
    return torch.nan_to_num(mean), torch.nan_to_num(std, nan=1.0).clamp_min(1e-6)


def add_self_loops(edge_index: Tensor, edge_attr: Tensor, num_nodes: int) -> tuple[Tensor, Tensor]:
    """Append one self loop per atom, marked by an extra last bond-feature slot.

    Args:
        edge_index: (2, E) bonds in both directions.
        edge_attr: (E, F_bond) bond features.
        num_nodes: N atoms.

    Returns:
        edge_index (2, E + N) and edge_attr (E + N, F_bond + 1).
    """
    loops = torch.arange(num_nodes, device=edge_index.device)
    edge_index = torch.cat([edge_index, torch.stack([loops, loops])], 1)  # (2, E + N)
    bonds = F.pad(edge_attr, (0, 1))  # (E, F + 1), self-loop slot 0
    marks = edge_attr.new_zeros(num_nodes, edge_attr.shape[1] + 1)  # (N, F + 1)
    marks[:, -1] = 1.0
    return edge_index, torch.cat([bonds, marks], 0)


def fit_scaling(module: nn.Module, y: Tensor, descriptors: Tensor | None = None) -> None:
    """Set the target (regression) and descriptor scaling buffers of ``module`` (a
    network with a ``config`` and the buffers of ``_SCALING``) from training data:
    y (M, T) with NaN where missing, descriptors (M, F_desc) or None."""
    if module.config.task == "regression":
        mean, std = target_scaling(y)
        module.target_mean.copy_(mean)
        module.target_std.copy_(std)
    if module.config.descriptor_dim and descriptors is not None:
        module.descriptor_mean.copy_(descriptors.mean(0))
        module.descriptor_std.copy_(descriptors.std(0).nan_to_num(1.0).clamp_min(1e-6))


def sum_pool(h: Tensor, batch: Tensor, num_graphs: int) -> Tensor:
    """(N, D) atom states summed per molecule -> (G, D). The sums of PyG's ``scatter``
    (each molecule's atoms added in order), with a backward that is one row gather
    (``index_select``) instead of ``scatter_add``'s ``gather`` over an expanded index,
    several times slower on a batch of molecules."""
    return h.new_zeros(num_graphs, h.shape[1]).index_add_(0, batch, h)  # (G, D)


def _float32(module: nn.Module, h: Tensor, *args: object, **kwargs: object) -> Tensor:
    """``module(h, *args, **kwargs)`` in float32 outside autocast (bf16 training): the
    engine's fused edge kernels take one float dtype, and autocast would hand them
    bfloat16 projections beside float32 softmax weights. Without autocast this is the
    call itself."""
    device_type = h.device.type
    if not torch.is_autocast_enabled(device_type):
        return module(h, *args, **kwargs)
    args = tuple(a.float() if isinstance(a, Tensor) and a.is_floating_point() else a
                 for a in args)
    with torch.autocast(device_type, enabled=False):
        return module(h.float(), *args, **kwargs)


class MoleculeNetwork(nn.Module):
    """Graph attention encoder + attention readout over atoms, for T targets.

    Args:
        config: the architecture (see ``NetworkConfig``).
    """

    def __init__(self, config: NetworkConfig):
        super().__init__()
        config.validate()
        self.config = c = config
        conv = GATv2Conv if c.conv == "gatv2" else GATConv
        self.embed = nn.Linear(c.atom_dim, c.hidden)
        self.convs = nn.ModuleList([
            conv(c.hidden, c.hidden // c.heads, heads=c.heads, edge_dim=c.bond_dim + 1,
                 add_self_loops=False, dropout=c.dropout)
            for _ in range(c.layers)
        ])
        norm = (lambda: nn.LayerNorm(c.hidden)) if c.norm == "layer" else nn.Identity
        self.norms = nn.ModuleList([norm() for _ in range(c.layers)])
        self.globals = nn.ModuleList([
            DistanceBiasedBlock(c.hidden, c.heads, c.max_hops, dropout=c.dropout)
            for _ in range(c.global_layers)
        ])
        self.pool = GlobalAttentionPool(c.hidden, heads=c.heads)
        self.head = nn.Sequential(
            nn.Linear(2 * c.hidden + c.descriptor_dim, c.hidden), nn.ReLU(),
            nn.Dropout(c.dropout), nn.Linear(c.hidden, c.num_tasks),
        )
        # statistics fitted on the training set, saved with the weights
        self.register_buffer("target_mean", torch.zeros(c.num_tasks))  # (T,)
        self.register_buffer("target_std", torch.ones(c.num_tasks))  # (T,)
        self.register_buffer("descriptor_mean", torch.zeros(c.descriptor_dim))  # (F_desc,)
        self.register_buffer("descriptor_std", torch.ones(c.descriptor_dim))  # (F_desc,)

    @staticmethod
    def in_encoder(key: str) -> bool:
        """Whether a state-dict key belongs to the encoder: every part but the head and
        the target and descriptor scaling (what ``setattn.molprop.pretrain`` trains)."""
        return not key.startswith("head.") and key not in _SCALING

    def encoder_parameters(self) -> list[nn.Parameter]:
        """The encoder's parameters, what ``--freeze-epochs`` freezes."""
        return [p for name, p in self.named_parameters() if self.in_encoder(name)]

    def encoder_state(self) -> dict[str, Tensor]:
        """The encoder's weights and buffers: what a pretrained encoder holds."""
        return {k: v for k, v in self.state_dict().items() if self.in_encoder(k)}

    def fit_scaling(self, y: Tensor, descriptors: Tensor | None = None) -> None:
        """Set target (regression) and descriptor scaling from training data.

        Args:
            y: (M, T) training targets, NaN where missing.
            descriptors: (M, F_desc) training descriptors, when the config uses them.
        """
        fit_scaling(self, y, descriptors)

    def scale_targets(self, y: Tensor) -> Tensor:
        """(G, T) targets in the units the forward pass predicts (standardised for
        regression), on ``y``'s device (the model may be on another)."""
        if self.config.task == "regression":
            return (y - self.target_mean.to(y.device)) / self.target_std.to(y.device)
        return y

    def to_units(self, out: Tensor) -> Tensor:
        """(G, T) forward outputs as target units (regression) or probabilities, on
        ``out``'s device (the model may be on another)."""
        if self.config.task == "regression":
            return out * self.target_std.to(out.device) + self.target_mean.to(out.device)
        return torch.sigmoid(out)

    def forward(self, batch) -> Tensor:
        """Args:
            batch: a PyG ``Batch`` with ``x`` (N, F_atom), ``edge_index`` (2, E),
                ``edge_attr`` (E, F_bond), ``batch`` (N,), and ``descriptors``
                (G, F_desc) when the config has ``descriptor_dim`` > 0.

        Returns:
            (G, T) standardised regression outputs or classification logits.
        """
        parts = [self.encode(batch)]  # (G, 2 D)
        if self.config.descriptor_dim:
            d = (batch.descriptors - self.descriptor_mean) / self.descriptor_std  # (G, F_desc)
            parts.append(d.clamp(-10.0, 10.0))
        return self.head(torch.cat(parts, 1))  # (G, T)

    def encode(self, batch) -> Tensor:
        """The network's molecule vectors, what its head reads besides the descriptors:
        the attention readout and the sum of the atoms' last states, (G, 2 D)
        (``setattn embed``)."""
        g = batch.num_graphs
        edge_index, edge_attr = add_self_loops(batch.edge_index, batch.edge_attr,
                                               batch.x.shape[0])  # N, static under compile
        h = self.embed(batch.x)  # (N, D)
        ptr = batch.ptr if "ptr" in batch else None  # (G + 1,) spares the pool recomputing it
        first_global = len(self.convs) - len(self.globals)
        if len(self.globals):
            ptr = ptr if ptr is not None else ptr_from_batch(batch.batch, g)
            atoms = complete(ptr)  # every atom attends to every atom of its molecule
            buckets = hop_buckets(batch.edge_index, ptr, self.config.max_hops)  # (E_all,)
        for i, (conv, norm) in enumerate(zip(self.convs, self.norms)):
            h = h + F.elu(_float32(conv, norm(h), edge_index, edge_attr))  # (N, D)
            if i >= first_global:
                h = _float32(self.globals[i - first_global], h, atoms, buckets)  # (N, D)
        return torch.cat([_float32(self.pool, h, batch.batch, ptr, num_graphs=g),  # (G, D)
                          sum_pool(h, batch.batch, g)], 1)
