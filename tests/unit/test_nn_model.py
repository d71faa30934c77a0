"""setattn layers inside plain PyG models: DataLoader batches, torch.compile, capture."""

from __future__ import annotations

import torch
from torch_geometric.data import Data
from torch_geometric.loader import DataLoader
from torch_geometric.nn import GCNConv, global_mean_pool

import setattn
from setattn.nn import (
    ISAB,
    PMA,
    SAB,
    GATConv,
    GATv2Conv,
    GlobalAttentionPool,
    MultiHeadAttention,
    TransformerBlock,
)
from setattn.topology import edges


def graphs(sizes: list[int], f: int = 4) -> list[Data]:
    out = []
    for n in sizes:
        ei = torch.randint(0, max(n, 1), (2, 2 * n))
        out.append(Data(x=torch.randn(n, f), edge_index=ei, edge_attr=torch.randn(2 * n, 2)))
    return out


class TinyNet(torch.nn.Module):
    """A PyG model as users write them, with setattn layers in the middle."""

    def __init__(self):
        super().__init__()
        self.gcn = GCNConv(4, 8)
        self.gat = GATConv(8, 4, heads=2, edge_dim=2)
        self.pool = GlobalAttentionPool(8, gate_nn=torch.nn.Linear(8, 1))
        self.head = torch.nn.Linear(16, 3)

    def forward(self, x, edge_index, edge_attr, batch):
        x = self.gcn(x, edge_index).relu()
        x = self.gat(x, edge_index, edge_attr).relu()  # (N, 8)
        g = torch.cat([self.pool(x, batch), global_mean_pool(x, batch)], dim=1)  # (G, 16)
        return self.head(g)


class FullNet(torch.nn.Module):
    """Every layer kind, to check that capture() sees each of them."""

    def __init__(self):
        super().__init__()
        self.gat = GATConv(4, 4, heads=2)
        self.gatv2 = GATv2Conv(8, 8, heads=1)
        self.block = TransformerBlock(8, heads=2)
        self.sab = SAB(8, 2)
        self.isab = ISAB(8, 2, num_inducing=3)
        self.mha = MultiHeadAttention(8, 2)
        self.pool = GlobalAttentionPool(8, heads=2)
        self.pma = PMA(8, 2, num_seeds=2)

    def forward(self, x, edge_index, batch):
        x = self.gat(x, edge_index)
        x = self.gatv2(x, edge_index)
        x = self.block(x, edges(edge_index, x.shape[0]))
        x = self.sab(x, batch)
        x = self.isab(x, batch)
        return self.pool(x, batch) + self.pma(x, batch).sum(1)


def test_inside_pyg_model_and_under_compile():
    torch._dynamo.reset()
    batch = next(iter(DataLoader(graphs([3, 5, 7]), batch_size=3)))
    model = TinyNet().eval()
    args = (batch.x, batch.edge_index, batch.edge_attr, batch.batch)
    eager = model(*args)
    assert eager.shape == (3, 3)
    compiled = torch.compile(model)
    out = compiled(*args)
    assert (out - eager).abs().max() <= 1e-5


def test_gradients_flow_through_pyg_model():
    batch = next(iter(DataLoader(graphs([2, 6, 1]), batch_size=3)))
    model = TinyNet()
    model(batch.x, batch.edge_index, batch.edge_attr, batch.batch).sum().backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name


def test_every_layer_captured():
    batch = next(iter(DataLoader(graphs([3, 5, 7]), batch_size=3)))
    model = FullNet().eval()
    with setattn.capture() as att:
        out = model(batch.x, batch.edge_index, batch.batch)
    assert out.shape == (3, 8)
    expected = {"gat", "gatv2", "block.attn", "sab.mab.attn", "isab.mab_in.attn",
                "isab.mab_out.attn", "pool", "pma.mab.attn"}
    assert expected <= set(att)
    for graph in att.values():
        assert torch.isfinite(graph.weights).all()
        assert graph.weights.shape[0] == graph.edge_index.shape[1]
