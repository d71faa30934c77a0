"""The one molecule batcher: bond-graph molecules -> a PyG ``Batch``, fast.

``collate_molecules`` batches molecules with a handful of tensor concatenations, the
same ``Batch`` fields that PyG's generic collater builds (``x``, ``edge_index``,
``edge_attr``, ``y``, ``descriptors``, ``fingerprint``, ``batch``, ``ptr``, ``smiles``,
``row``) in a
fraction of its time. ``PackedMolecules`` goes further for a training set that is
batched every epoch: it concatenates the molecules once and cuts each batch out of the
big tensors with index arithmetic (about a dozen tensor calls whatever the batch
size), so loading never holds up the model; ``training_batch`` cuts the lighter
``MoleculeBatch`` that training reads, without the SMILES, rows and fingerprints and
without PyG's ``Batch`` construction. ``batches`` cuts a list into consecutive
batches for prediction and validation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields

import torch
from torch import Tensor
from torch_geometric.data import Batch, Data

from setattn.domains.fingerprints import BITS

__all__ = ["MoleculeBatch", "PackedMolecules", "batches", "collate_molecules", "pack",
           "stacked_targets", "unpack"]


def pack(data: list[Data], descriptor_dim: int) -> dict:
    """Molecules as concatenated tensors with per-molecule offsets (no Python objects), on
    the molecules' device."""
    device = data[0].x.device if data else torch.device("cpu")
    nodes = torch.tensor([0] + [d.num_nodes for d in data], device=device).cumsum(0)  # (M + 1,)
    edges = torch.tensor([0] + [d.edge_index.shape[1] for d in data],
                         device=device).cumsum(0)  # (M + 1,)
    packed = {
        "x": torch.cat([d.x for d in data]) if data  # (sum N, F)
        else torch.zeros(0, 0, device=device),
        "node_ptr": nodes,
        "edge_index": torch.cat([d.edge_index for d in data], 1) if data
        else torch.zeros(2, 0, dtype=torch.long, device=device),  # (2, sum E), local node numbers
        "edge_attr": torch.cat([d.edge_attr for d in data]) if data
        else torch.zeros(0, 0, device=device),
        "edge_ptr": edges,
        "smiles": [d.smiles for d in data],
    }
    if descriptor_dim:
        packed["descriptors"] = torch.cat([d.descriptors for d in data]) if data \
            else torch.zeros(0, descriptor_dim, device=device)  # (M, F_desc)
    if descriptor_dim and (not data or "fingerprint" in data[0]):  # featurised together
        packed["fingerprint"] = torch.cat([d.fingerprint for d in data]) if data \
            else torch.zeros(0, BITS, dtype=torch.uint8, device=device)  # (M, BITS)
    return packed


def unpack(packed: dict) -> list[Data]:
    """The molecules of ``pack``'s dict, in order; their tensors are views into it."""
    nodes, edges = packed["node_ptr"].tolist(), packed["edge_ptr"].tolist()
    out = []
    for m, smiles in enumerate(packed["smiles"]):
        d = Data(x=packed["x"][nodes[m]:nodes[m + 1]], smiles=smiles,
                 edge_index=packed["edge_index"][:, edges[m]:edges[m + 1]],
                 edge_attr=packed["edge_attr"][edges[m]:edges[m + 1]])
        if "descriptors" in packed:
            d.descriptors = packed["descriptors"][m:m + 1]  # (1, F_desc)
        if "fingerprint" in packed:
            d.fingerprint = packed["fingerprint"][m:m + 1]  # (1, BITS)
        out.append(d)
    return out


def collate_molecules(data: Sequence[Data]) -> Batch:
    """A ``Batch`` of bond-graph molecules, built directly from their tensors.

    Args:
        data: molecules with ``x`` (N_m, F), ``edge_index`` (2, E_m), ``edge_attr``
            (E_m, F_bond), and optionally ``y`` (1, T), ``descriptors`` (1, F_desc),
            ``fingerprint`` (1, BITS), ``smiles`` and ``row`` (all molecules alike).

    Returns:
        ``Batch`` with ``x`` (N, F), ``edge_index`` (2, E) shifted to batch numbering,
        ``edge_attr`` (E, F_bond), ``y`` (G, T), ``descriptors`` (G, F_desc),
        ``fingerprint`` (G, BITS), ``batch`` (N,), ``ptr`` (G + 1,), ``row`` (G,) and the
        ``smiles`` list: the fields and values of PyG's ``Batch.from_data_list`` for
        these molecules.
    """
    first = data[0]
    device = first.x.device  # the batch's index tensors beside the molecules' tensors
    sizes = torch.tensor([d.num_nodes for d in data], device=device)  # (G,)
    n_edges = torch.tensor([d.edge_index.shape[1] for d in data], device=device)  # (G,)
    return _assemble(
        torch.cat([d.x for d in data]), torch.cat([d.edge_index for d in data], 1),
        torch.cat([d.edge_attr for d in data]),
        torch.cat([d.y for d in data]) if "y" in first else None, sizes, n_edges,
        descriptors=(torch.cat([d.descriptors for d in data])
                     if "descriptors" in first else None),
        fingerprint=(torch.cat([d.fingerprint for d in data])
                     if "fingerprint" in first else None),
        smiles=[d.smiles for d in data] if "smiles" in first else None,
        row=torch.tensor([d.row for d in data], device=device) if "row" in first else None)


def _assemble(x: Tensor, local_edge_index: Tensor, edge_attr: Tensor, y: Tensor | None,
              sizes: Tensor, n_edges: Tensor, *, descriptors: Tensor | None,
              smiles: list[str] | None, row: Tensor | None,
              fingerprint: Tensor | None = None) -> Batch:
    """The ``Batch`` of G molecules from their concatenated tensors.

    Args:
        x: (N, F) atoms; local_edge_index: (2, E) with each molecule's own atom numbers;
        edge_attr: (E, F_bond); y: (G, T); sizes: (G,) atoms and n_edges: (G,) edges
        per molecule; descriptors: (G, F_desc); smiles: G strings; row: (G,);
        fingerprint: (G, BITS).
    """
    ptr = torch.cat([sizes.new_zeros(1), sizes.cumsum(0)])  # (G + 1,)
    batch = Batch(
        x=x, edge_attr=edge_attr, ptr=ptr,
        # local -> batch numbering: shift by the first atom of each edge's molecule
        edge_index=local_edge_index + ptr[:-1].repeat_interleave(n_edges),  # (2, E)
        batch=torch.arange(sizes.numel(), device=sizes.device).repeat_interleave(sizes),  # (N,)
    )
    if y is not None:
        batch.y = y
    if descriptors is not None:
        batch.descriptors = descriptors
    if fingerprint is not None:
        batch.fingerprint = fingerprint
    if smiles is not None:
        batch.smiles = smiles
    if row is not None:
        batch.row = row
    batch._num_graphs = sizes.numel()
    return batch


@dataclass
class MoleculeBatch:
    """The fields of a batch that training reads: what ``MoleculeNetwork`` and the loss
    take from PyG's ``Batch`` (``x``, ``edge_index``, ``edge_attr``, ``batch``, ``ptr``,
    ``y``, ``descriptors``), the same tensors, in a plain object.

    Building a PyG ``Batch`` (a class made per call, every field through its storage)
    costs about as much as cutting the tensors out; a training step pays it for fields
    it never reads.

    Attributes:
        x: (N, F) atoms; edge_index: (2, E) in batch numbering; edge_attr: (E, F_bond);
        batch: (N,) molecule of every atom; ptr: (G + 1,) atom offsets; y: (G, T);
        descriptors: (G, F_desc) or None.
    """

    x: Tensor
    edge_index: Tensor
    edge_attr: Tensor
    batch: Tensor
    ptr: Tensor
    y: Tensor
    descriptors: Tensor | None = None

    @property
    def num_graphs(self) -> int:
        """G."""
        return self.ptr.numel() - 1

    def __contains__(self, key: str) -> bool:
        """Whether the batch has field ``key`` (not None), as ``key in batch`` of PyG."""
        return getattr(self, key, None) is not None

    def to(self, device: torch.device | str) -> MoleculeBatch:
        """The batch with its tensors on ``device``."""
        return MoleculeBatch(**{f.name: None if getattr(self, f.name) is None
                                else getattr(self, f.name).to(device) for f in fields(self)})


class PackedMolecules:
    """A molecule list concatenated once; ``batch(indices)`` cuts batches out of it.

    Use as ``DataLoader(range(len(packed)), batch_sampler=..., collate_fn=packed.batch)``.

    Args:
        data: bond-graph molecules as for ``collate_molecules`` (all with or all
            without ``descriptors``).
    """

    def __init__(self, data: Sequence[Data]) -> None:
        data = list(data)
        if not data:
            raise ValueError("PackedMolecules needs at least one molecule")
        descriptor_dim = data[0].descriptors.shape[1] if "descriptors" in data[0] else 0
        self._packed = pack(data, descriptor_dim)
        self._y = torch.cat([d.y for d in data])  # (M, T)
        self._row = (torch.tensor([d.row for d in data], device=self._y.device)
                     if "row" in data[0] else None)  # (M,)
        ptr = self._packed["node_ptr"]
        eptr = self._packed["edge_ptr"]
        self._nodes = ptr[1:] - ptr[:-1]  # (M,) atoms per molecule
        self._edges = eptr[1:] - eptr[:-1]  # (M,) edges per molecule

    def __len__(self) -> int:
        return self._y.shape[0]

    def _rows(self, indices: Sequence[int]) -> tuple[Tensor, ...]:
        """Molecules ``indices``: idx (G,), atoms (G,) and edges (G,) per molecule, and
        the store's rows of their atoms (N,) and edges (E,), in batch order."""
        p = self._packed
        idx = torch.as_tensor(indices, dtype=torch.long, device=self._y.device)  # (G,)
        sizes, n_edges = self._nodes[idx], self._edges[idx]  # (G,), (G,)
        ptr = torch.cat([sizes.new_zeros(1), sizes.cumsum(0)])  # (G + 1,) in the batch
        eptr = torch.cat([n_edges.new_zeros(1), n_edges.cumsum(0)])  # (G + 1,)
        # node / edge k of the batch is node / edge (start of its molecule in the store
        # - start in the batch + k)
        nodes = (p["node_ptr"][idx] - ptr[:-1]).repeat_interleave(sizes) \
            + torch.arange(int(ptr[-1]), device=ptr.device)  # (N,)
        edges = (p["edge_ptr"][idx] - eptr[:-1]).repeat_interleave(n_edges) \
            + torch.arange(int(eptr[-1]), device=eptr.device)  # (E,)
        return idx, sizes, n_edges, ptr, nodes, edges

    def training_batch(self, indices: Sequence[int]) -> MoleculeBatch:
        """The ``MoleculeBatch`` of molecules ``indices``: the tensors of ``batch``'s
        ``Batch`` that training reads, equal to them."""
        p = self._packed
        idx, sizes, n_edges, ptr, nodes, edges = self._rows(indices)
        return MoleculeBatch(
            x=p["x"].index_select(0, nodes),  # (N, F)
            # local -> batch numbering, as _assemble
            edge_index=p["edge_index"].index_select(1, edges)
            + ptr[:-1].repeat_interleave(n_edges),  # (2, E)
            edge_attr=p["edge_attr"].index_select(0, edges),  # (E, F_bond)
            batch=torch.arange(sizes.numel(), device=sizes.device).repeat_interleave(sizes),
            ptr=ptr, y=self._y.index_select(0, idx),
            descriptors=p["descriptors"].index_select(0, idx) if "descriptors" in p else None)

    def batch(self, indices: Sequence[int]) -> Batch:
        """The ``Batch`` of molecules ``indices``, equal to ``collate_molecules`` of them."""
        p = self._packed
        idx, sizes, n_edges, _, nodes, edges = self._rows(indices)
        return _assemble(
            p["x"].index_select(0, nodes), p["edge_index"].index_select(1, edges),
            p["edge_attr"].index_select(0, edges), self._y.index_select(0, idx), sizes, n_edges,
            descriptors=p["descriptors"].index_select(0, idx) if "descriptors" in p else None,
            fingerprint=p["fingerprint"].index_select(0, idx) if "fingerprint" in p else None,
            smiles=[p["smiles"][i] for i in idx.tolist()],
            row=self._row.index_select(0, idx) if self._row is not None else None)


def batches(data: Sequence[Data], batch_size: int = 256) -> list[Batch]:
    """``data`` in consecutive batches of ``batch_size`` (the last one shorter)."""
    data = list(data)
    return [collate_molecules(data[i:i + batch_size]) for i in range(0, len(data), batch_size)]


def stacked_targets(data: Sequence[Data], num_tasks: int = 1) -> Tensor:
    """(M, T) targets of the molecules, stacked (a (0, ``num_tasks``) tensor for none)."""
    return torch.cat([d.y for d in data]) if data else torch.zeros(0, num_tasks, device="cpu")
