"""``with capture() as att: model(x)`` records every attention, keyed by module path."""

import pytest
import torch
from torch import nn
from torch.nn.modules import module as torch_module

import setattn
from setattn import AttentionGraph, attend, capture, complete
from setattn.capture import is_capturing

HEADS, DIM = 2, 4
TOP = complete([0, 3, 8])  # 8 items, 34 edges


class SelfAttention(nn.Module):
    """Projects, then attends once."""

    def __init__(self, dropout=0.0):
        super().__init__()
        self.proj = nn.Linear(DIM, DIM)
        self.dropout = dropout

    def forward(self, x):  # x: (N, H, D)
        h = self.proj(x)
        return attend(h, h, x, TOP, dropout=self.dropout, training=self.training)


class TwicePool(nn.Module):
    """Attends twice in one forward: keys ``path`` and ``path#1``."""

    def forward(self, x):
        y = attend(x, x, x, TOP)
        return attend(y, x, x, TOP)


class Model(nn.Module):
    def __init__(self, dropout=0.0):
        super().__init__()
        self.encoder = nn.ModuleList([SelfAttention(dropout), SelfAttention(dropout)])
        self.head = nn.Sequential(nn.Identity(), TwicePool())

    def forward(self, x):
        for layer in self.encoder:
            x = layer(x)
        return self.head(x)


def _hooks():
    return (len(torch_module._global_forward_hooks),
            len(torch_module._global_forward_pre_hooks))


@pytest.fixture
def model_and_x():
    return Model().double(), torch.randn(8, HEADS, DIM, dtype=torch.float64)


def test_keys_are_module_paths(model_and_x):
    model, x = model_and_x
    with setattn.capture() as att:
        model(x)
    assert set(att) == {"encoder.0", "encoder.1", "head.1", "head.1#1"}
    for graph in att.values():
        assert isinstance(graph, AttentionGraph)
        assert graph.weights.shape == (TOP.num_edges, HEADS)
        assert torch.equal(graph.edge_index, TOP.edge_index())


def test_captured_weights_are_the_layer_weights(model_and_x):
    model, x = model_and_x
    with capture() as att:
        out = model(x)
    h = model.encoder[0].proj(x)
    _, graph = attend(h, h, x, TOP, return_weights=True)
    torch.testing.assert_close(att["encoder.0"].weights, graph.weights)
    assert not att["encoder.0"].weights.requires_grad
    # recording does not change the output
    torch.testing.assert_close(out, model(x), rtol=1e-12, atol=1e-12)


def test_repeated_calls_get_numbered_suffixes(model_and_x):
    model, x = model_and_x
    with capture() as att:
        model(x)
        model(x)
        attend(x, x, x, TOP)  # outside any module
        attend(x, x, x, TOP)
    assert set(att) == {"encoder.0", "encoder.1", "head.1", "head.1#1",
                        "encoder.0#1", "encoder.1#1", "head.1#2", "head.1#3",
                        "attend", "attend#1"}
    torch.testing.assert_close(att["encoder.0"].weights, att["encoder.0#1"].weights)


def test_paths_are_relative_to_the_outermost_module_called(model_and_x):
    model, x = model_and_x
    with capture() as att:
        model.encoder[1](x)
    assert set(att) == {"SelfAttention"}  # the root has no path: its class names it


def test_nothing_is_recorded_outside_the_block_and_hooks_are_removed(model_and_x):
    model, x = model_and_x
    before = _hooks()
    assert not is_capturing()
    with capture() as att:
        assert is_capturing()
        assert _hooks() != before
        model(x)
    n = len(att)
    assert _hooks() == before and not is_capturing()
    model(x)
    attend(x, x, x, TOP)
    assert len(att) == n


def test_hooks_are_removed_when_the_block_raises(model_and_x):
    model, x = model_and_x
    before = _hooks()
    with pytest.raises(RuntimeError, match="boom"), capture():
        model(x)
        raise RuntimeError("boom")
    assert _hooks() == before and not is_capturing()


def test_a_failing_forward_does_not_corrupt_later_paths(model_and_x):
    model, x = model_and_x
    with capture() as att:
        with pytest.raises(RuntimeError):
            model.encoder[0](x[:, :, :3])  # wrong width: the projection fails
        model(x)
    assert set(att) == {"encoder.0", "encoder.1", "head.1", "head.1#1"}


def test_nested_captures_both_record(model_and_x):
    model, x = model_and_x
    before = _hooks()
    with capture() as outer:
        model.encoder[0](x)
        with capture() as inner:
            model(x)
        assert _hooks() != before  # the outer block still records
        model(x)
    assert set(inner) == {"encoder.0", "encoder.1", "head.1", "head.1#1"}
    assert len(outer) == 1 + 2 * len(inner)
    assert _hooks() == before


def test_captured_weights_ignore_dropout():
    model = Model(dropout=0.5).double().train()
    x = torch.randn(8, HEADS, DIM, dtype=torch.float64)
    with capture() as att:
        model(x)
    h = model.encoder[0].proj(x)
    _, graph = attend(h, h, x, TOP, return_weights=True)
    torch.testing.assert_close(att["encoder.0"].weights, graph.weights)
    sums = torch.zeros(8, HEADS, dtype=torch.float64).index_add_(
        0, TOP.edge_index()[1], att["encoder.0"].weights)
    torch.testing.assert_close(sums, torch.ones(8, HEADS, dtype=torch.float64))


def test_gradients_flow_inside_a_capture(model_and_x):
    model, x = model_and_x
    model(x).sum().backward()
    want = model.encoder[0].proj.weight.grad.clone()
    model.zero_grad()
    with capture():
        model(x).sum().backward()
    torch.testing.assert_close(model.encoder[0].proj.weight.grad, want)
