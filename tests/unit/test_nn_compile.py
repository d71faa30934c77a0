"""torch.compile sees the training path of the GAT layers and attention pooling as one graph.

``torch._dynamo.explain`` traces the forward pass (no code generation, so this stays
quick) and counts the graph breaks: none where the sizes are passed in (self loops given
by the caller, ``dim_size`` given to the pool). Timings are benchmarks/compile.py's job.
"""

from __future__ import annotations

import pytest
import torch

from setattn.nn import GATConv, GATv2Conv, GlobalAttentionPool


def molecule_batch():
    """Three chain molecules (5, 7 and 4 atoms), bonds both ways plus one self loop per atom."""
    sizes = [5, 7, 4]
    ptr = torch.tensor([0, 5, 12, 16])
    src = torch.cat([torch.arange(int(ptr[g]), int(ptr[g + 1]) - 1) for g in range(3)])
    loops = torch.arange(16)
    ei = torch.cat([torch.stack([src, src + 1]), torch.stack([src + 1, src]),
                    torch.stack([loops, loops])], 1)  # (2, E)
    g = torch.Generator().manual_seed(0)
    return {"x": torch.randn(16, 8, generator=g), "edge_index": ei,
            "edge_attr": torch.randn(ei.shape[1], 3, generator=g), "ptr": ptr,
            "batch": torch.repeat_interleave(torch.arange(3), torch.tensor(sizes))}


CASES = {
    "GATConv": (GATConv(8, 4, heads=2, edge_dim=3, add_self_loops=False),
                lambda m, b: m(b["x"], b["edge_index"], b["edge_attr"])),
    "GATv2Conv": (GATv2Conv(8, 4, heads=2, edge_dim=3, add_self_loops=False),
                  lambda m, b: m(b["x"], b["edge_index"], b["edge_attr"])),
    "GlobalAttentionPool": (GlobalAttentionPool(8, heads=2),
                            lambda m, b: m(b["x"], b["batch"], b["ptr"], dim_size=3)),
    "GlobalAttentionPool, index only": (GlobalAttentionPool(8, heads=2),
                                        lambda m, b: m(b["x"], index=b["batch"], dim_size=3)),
}


@pytest.mark.parametrize("name", list(CASES))
def test_training_path_has_no_graph_break(name):
    module, call = CASES[name]
    batch = molecule_batch()
    torch._dynamo.reset()
    info = torch._dynamo.explain(lambda: call(module, batch))()
    assert [r.reason for r in info.break_reasons] == []
    assert info.graph_break_count == 0 and info.graph_count == 1
    torch._dynamo.reset()
    compiled = torch.compile(module, backend="aot_eager", fullgraph=True)  # backward too
    out = call(compiled, batch)
    out.square().sum().backward()
    assert torch.allclose(out, call(module, batch), atol=1e-6)
    assert all(p.grad is not None for p in module.parameters())


@pytest.mark.parametrize("name", ["GATConv", "GATv2Conv"])
def test_torch_export_gives_the_eager_numbers(name):
    """torch.export, the supported replacement for torch.jit.script (which cannot compile
    the engine), captures the layers, self loops added inside included."""
    layer = (GATConv if name == "GATConv" else GATv2Conv)(8, 4, heads=2).eval()
    batch = molecule_batch()
    args = (batch["x"], batch["edge_index"][:, :-16])  # the bonds; the layer adds the loops
    program = torch.export.export(layer, args)
    assert torch.allclose(program.module()(*args), layer(*args), atol=1e-6)
    other = (torch.randn(16, 8), args[1].flip(0))  # other values, same shapes
    assert torch.allclose(program.module()(*other), layer(*other), atol=1e-6)
