"""setattn.explain on known-answer models: a hand-set linear readout whose per-node
contributions are known exactly, and a hand-set attention pool."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch_geometric.data import Batch, Data
from torch_geometric.utils import scatter

from setattn.explain import (
    attention_contributions,
    integrated_gradients,
    mask_node,
    occlusion,
    readout_contributions,
    remove_node,
)
from setattn.nn import GlobalAttentionPool

W = torch.tensor([[1.0, -2.0], [0.5, 3.0], [-1.5, 0.25]])  # (F=3, T=2) node weights
U = torch.tensor([[2.0, 0.0], [-1.0, 1.0]])  # (F_g=2, T) graph-input weights
BIAS = torch.tensor([0.7, -0.3])  # (T,)


class LinearReadout(nn.Module):
    """out = sum_i x_i W + descriptors U + b: node i contributes x_i W exactly."""

    def __init__(self, with_graph_input: bool = False):
        super().__init__()
        self.with_graph_input = with_graph_input

    def decompose(self, batch):
        offset = BIAS.expand(batch.num_graphs, -1)  # (G, T)
        if self.with_graph_input:
            offset = offset + batch.descriptors @ U
        return batch.x @ W, offset  # (N, T), (G, T)

    def forward(self, batch):
        terms, offset = self.decompose(batch)
        return scatter(terms, batch.batch, 0, dim_size=batch.num_graphs) + offset  # (G, T)


def graph(n: int = 5, seed: int = 0) -> Data:
    g = torch.Generator().manual_seed(seed)
    src = torch.arange(n - 1)
    edge_index = torch.cat([torch.stack([src, src + 1]), torch.stack([src + 1, src])], 1)
    return Data(x=torch.randn(n, 3, generator=g), edge_index=edge_index,
                descriptors=torch.randn(1, 2, generator=g))


@pytest.mark.parametrize("target", [0, 1])
def test_readout_returns_the_known_terms_and_sums_exactly(target):
    data = graph()
    a = readout_contributions(LinearReadout(), data, target)
    assert torch.allclose(a.values, (data.x @ W)[:, target], atol=1e-6)
    assert a.baseline == pytest.approx(float(BIAS[target]))
    assert abs(a.gap()) < 1e-4 and a.complete


def test_readout_refuses_a_model_without_a_decomposition():
    with pytest.raises(ValueError, match="no exact readout decomposition"):
        readout_contributions(nn.Identity(), graph())


def test_readout_refuses_terms_that_do_not_add_up():
    class Wrong(LinearReadout):
        def forward(self, batch):
            return super().forward(batch) + 1.0

    with pytest.raises(ValueError, match="does not add up"):
        readout_contributions(Wrong(), graph())


@pytest.mark.parametrize("target", [0, 1])
def test_integrated_gradients_recovers_the_linear_terms(target):
    data = graph(6, seed=1)
    a = integrated_gradients(LinearReadout(), data, target)
    assert torch.allclose(a.values, (data.x @ W)[:, target], atol=1e-5)
    assert a.baseline == pytest.approx(float(BIAS[target]), abs=1e-6)
    assert abs(a.gap()) < 1e-4


def test_integrated_gradients_carries_graph_inputs_to_nodes_by_their_shares():
    data = graph(4, seed=2)
    shares = torch.rand(4, 2)
    shares = shares / shares.sum(0) * data.descriptors  # columns sum to the inputs
    a = integrated_gradients(LinearReadout(True), data, 0, graph_inputs=("descriptors",),
                             node_shares=(shares,))
    expected = (data.x @ W)[:, 0] + shares @ U[:, 0]  # (N,)
    assert torch.allclose(a.values, expected, atol=1e-5)
    assert a.baseline == pytest.approx(float(BIAS[0]), abs=1e-6)  # zero graph inputs too
    assert abs(a.gap()) < 1e-4


def test_integrated_gradients_without_shares_claims_no_sum():
    a = integrated_gradients(LinearReadout(True), graph(), 0, graph_inputs=("descriptors",))
    assert not a.complete


def test_integrated_gradients_of_a_nonlinear_model_sums_within_its_delta():
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(3, 16), nn.Tanh(), nn.Linear(16, 1))

    def forward(batch):
        return scatter(mlp(batch.x), batch.batch, 0, dim_size=batch.num_graphs).square()

    a = integrated_gradients(forward, graph(7, seed=3), 0, n_steps=128)
    assert abs(a.gap()) <= a.delta + 1e-5 and a.delta < 1e-3
    assert "not converged" not in a.note


def test_integrated_gradients_say_when_the_steps_run_out():
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(3, 16), nn.Tanh(), nn.Linear(16, 1))

    def forward(batch):
        return scatter(mlp(batch.x), batch.batch, 0, dim_size=batch.num_graphs).square()

    a = integrated_gradients(forward, graph(7, seed=3), 0, n_steps=2, max_steps=2, rtol=1e-9)
    assert "(2 steps); not converged: the convergence delta" in a.note
    assert a.delta > 1e-9 * abs(a.prediction - a.baseline) + 1e-3  # what the note says


def test_occlusion_by_removal_and_by_masking_recovers_the_linear_terms():
    data = graph(5, seed=4)
    expected = (data.x @ W)[:, 1]
    removed = occlusion(LinearReadout(), data, [remove_node(data, i) for i in range(5)], 1)
    masked = occlusion(LinearReadout(), data, [mask_node(data, i) for i in range(5)], 1)
    assert torch.allclose(removed.values, expected, atol=1e-5)
    assert torch.allclose(masked.values, expected, atol=1e-5)
    assert not removed.complete


class Counted:
    """A forward that records the nodes of every pass it is given."""

    def __init__(self, forward):
        self.forward, self.nodes = forward, []

    def __call__(self, batch):
        self.nodes.append(batch.num_nodes)
        return self.forward(batch)


def test_integrated_gradients_in_bounded_passes_give_the_same_values():
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(3, 16), nn.Tanh(), nn.Linear(16, 1))

    def forward(batch):
        return scatter(mlp(batch.x), batch.batch, 0, dim_size=batch.num_graphs).square()

    data = graph(7, seed=3)
    whole, parts = Counted(forward), Counted(forward)
    one = integrated_gradients(whole, data, 0, n_steps=32)
    split = integrated_gradients(parts, data, 0, n_steps=32, max_nodes=7 * 5)
    assert max(whole.nodes) == 7 * 32 and max(parts.nodes) <= 7 * 5
    assert torch.allclose(one.values, split.values, atol=1e-6)
    assert one.delta == pytest.approx(split.delta, abs=1e-6)


def test_occlusion_in_bounded_passes_gives_the_same_values():
    data = graph(6, seed=2)
    variants = [remove_node(data, i) for i in range(6)]
    whole, parts = Counted(LinearReadout()), Counted(LinearReadout())
    one = occlusion(whole, data, variants, 1)
    split = occlusion(parts, data, variants, 1, max_nodes=11)
    assert whole.nodes == [6 + 6 * 5] and max(parts.nodes) <= 11 and len(parts.nodes) == 4
    assert torch.allclose(one.values, split.values, atol=1e-6)


def test_occlusion_marks_nodes_without_a_variant():
    data = graph(3)
    a = occlusion(LinearReadout(), data, [remove_node(data, 0), None, mask_node(data, 2)])
    assert torch.isnan(a.values[1]) and not torch.isnan(a.values[[0, 2]]).any()


def test_remove_node_relabels_the_edges():
    data = graph(4)
    out = remove_node(data, 1)
    assert out.num_nodes == 3 and torch.equal(out.x, data.x[[0, 2, 3]])
    assert out.edge_index.tolist() == [[1, 2], [2, 1]]  # only the bond 2-3 is left


class GatePool(nn.Module):
    """A readout whose attention logit is node feature 0: weights = softmax(x[:, 0])."""

    def __init__(self):
        super().__init__()
        gate = nn.Linear(3, 1, bias=False)
        with torch.no_grad():
            gate.weight.copy_(torch.tensor([[1.0, 0.0, 0.0]]))
        self.pool = GlobalAttentionPool(3, gate_nn=gate)

    def forward(self, batch):
        return self.pool(batch.x, batch.batch, num_graphs=batch.num_graphs)  # (G, 3)


def test_attention_is_the_known_softmax_times_n():
    data = graph(6, seed=5)
    a = attention_contributions(GatePool(), data, "pool")
    expected = torch.softmax(data.x[:, 0], 0) * 6
    assert torch.allclose(a.values, expected, atol=1e-5)
    assert a.values.mean() == pytest.approx(1.0) and a.centre == 1.0 and not a.complete


def test_attention_names_the_keys_it_recorded():
    with pytest.raises(ValueError, match="recorded: \\['pool'\\]"):
        attention_contributions(GatePool(), graph(), "readout")


def test_batches_of_several_graphs_give_the_same_outputs():
    data = [graph(3, seed=s) for s in range(3)]
    out = LinearReadout()(Batch.from_data_list(data))
    for d, row in zip(data, out):
        assert readout_contributions(LinearReadout(), d, 0).prediction == pytest.approx(
            float(row[0]), abs=1e-5)
