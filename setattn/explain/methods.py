"""Explanation methods on any graph model: per-node contributions to one output.

Each method takes ``forward``, a callable from a PyG ``Batch`` to a (G, T) tensor (the
output to explain, in its own units), and one graph as a ``Data``; each returns an
``Attribution``:

- ``attention_contributions``: the attention weights a node receives from a recorded
  attention layer (``setattn.capture``), times N: 1 is a uniform weight. Not in the
  output's units and known to be a poor explanation (Sanchez-Lengeling et al., NeurIPS
  2020); kept for what it is.
- ``readout_contributions``: exact, for models whose output is a sum of per-node terms
  plus an offset (``model.decompose(batch)``): contributions sum to the output minus
  the offset.
- ``integrated_gradients``: captum's ``IntegratedGradients`` from an all-zero baseline
  (node features and, optionally, graph-level inputs such as descriptors, whose
  attributions reach the nodes through a given split): contributions sum to the output
  minus the baseline's output, up to captum's convergence delta.
- ``occlusion``: the output minus the output of a copy of the graph with the node
  removed or masked (``remove_node``, ``mask_node`` or a domain's own edit): no sum
  claimed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor
from torch_geometric.data import Batch, Data
from torch_geometric.utils import subgraph

from setattn.capture import capture
from setattn.explain.attribution import Attribution

__all__ = ["METHODS", "attention_contributions", "integrated_gradients", "mask_node",
           "occlusion", "readout_contributions", "remove_node"]

METHODS = ("occlusion", "integrated-gradients", "readout", "attention")
"""Method names, as ``setattn explain --method`` takes them."""

Forward = Callable[[Batch], Tensor]


MAX_NODES_PER_PASS = 4096
"""The most nodes one forward pass of an explanation holds (a 289-atom molecule's 64
integration steps are 18,496 nodes, about 270 MB of activations and gradients in one
pass; in passes of 4,096 nodes it is about 120 MB)."""


def _output(forward: Forward, graphs: Sequence[Data], target: int,
            max_nodes: int = MAX_NODES_PER_PASS) -> Tensor:
    """(len(graphs),) output ``target`` of each graph, in passes of at most
    ``max_nodes`` nodes (one graph at least)."""
    graphs = list(graphs)
    if sum(g.num_nodes for g in graphs) <= max_nodes:
        return forward(Batch.from_data_list(graphs))[:, target]
    passes, start = [], 0
    while start < len(graphs):
        end, nodes = start, 0
        while end < len(graphs) and (end == start or nodes + graphs[end].num_nodes <= max_nodes):
            nodes += graphs[end].num_nodes
            end += 1
        passes.append(forward(Batch.from_data_list(graphs[start:end]))[:, target])
        start = end
    return torch.cat(passes)  # (len(graphs),)


@torch.no_grad()
def attention_contributions(forward: Forward, data: Data, key: str, target: int = 0
                            ) -> Attribution:
    """The attention weight each node gets in the recorded layer ``key``, times N.

    Args:
        forward: (batch) -> (G, T), run once inside ``setattn.capture()``.
        data: one graph of N nodes.
        key: the capture key of the attention layer (e.g. a readout's module path); its
            edges go from the nodes (row 0) to queries (row 1).
        target: the output whose prediction is reported.

    Returns:
        values (N,): the node's weights summed over its edges, averaged over heads and
        queries, times N (1: uniform; all 1 for uniform attention).
    """
    with capture() as captured:
        prediction = _output(forward, [data], target)[0]
    if key not in captured:
        raise ValueError(f"no attention was recorded under {key!r}; recorded: "
                         f"{sorted(captured)}")
    graph = captured[key]
    n = data.num_nodes
    queries = int(graph.edge_index[1].unique().numel())
    weights = graph.weights.float().mean(1)  # (E,) mean over heads
    per_node = torch.zeros(n, device=weights.device).index_add_(  # (N,)
        0, graph.edge_index[0], weights)
    return Attribution(per_node * n / queries, "attention", float(prediction), None,
                       centre=1.0, note=f"attention weight of {key!r} x {n} nodes "
                       "(1 = uniform); not a contribution to the output")


@torch.no_grad()
def readout_contributions(model: torch.nn.Module, data: Data, target: int = 0,
                          tolerance: float = 1e-4) -> Attribution:
    """Exact per-node terms of a model whose output is a sum over nodes plus an offset.

    Args:
        model: has ``decompose(batch) -> (terms (N, T), offset (G, T))`` with
            ``model(batch) == scatter_sum(terms, batch.batch) + offset``.
        data: one graph.
        target: the output explained.
        tolerance: largest accepted gap between the sum and the model's output.

    Raises:
        ValueError: if the model has no ``decompose`` or its terms do not add up.
    """
    if not hasattr(model, "decompose"):
        raise ValueError(f"{type(model).__name__} has no exact readout decomposition "
                         "(no decompose method: its output is not a sum of per-node terms)")
    batch = Batch.from_data_list([data])
    terms, offset = model.decompose(batch)  # (N, T), (1, T)
    prediction = float(model(batch)[0, target])
    values = terms[:, target].detach().float()
    gap = prediction - float(offset[0, target]) - float(values.sum())
    if abs(gap) > tolerance * max(1.0, abs(prediction)):
        raise ValueError(f"{type(model).__name__}.decompose does not add up to its output "
                         f"(gap {gap:.3g})")
    return Attribution(values, "readout", prediction, float(offset[0, target]), abs(gap),
                       note="exact per-node terms of the readout; baseline = the offset")


def _replicated(data: Data, graph_inputs: Sequence[str], xs: Tensor, *graph: Tensor) -> Batch:
    """S copies of ``data`` with node features xs (S, N, F) and graph inputs (S, F_k)."""
    s = xs.shape[0]
    batch = Batch.from_data_list([data] * s)
    batch.x = xs.reshape(s * data.num_nodes, -1)  # (S * N, F)
    for name, value in zip(graph_inputs, graph):
        batch[name] = value  # (S, F_k)
    return batch


def integrated_gradients(forward: Forward, data: Data, target: int = 0, *,
                         graph_inputs: Sequence[str] = (),
                         node_shares: Sequence[Tensor] = (), n_steps: int = 64,
                         max_steps: int = 1024, rtol: float = 0.01,
                         max_nodes: int = MAX_NODES_PER_PASS) -> Attribution:
    """Integrated gradients (captum) from zero node features and zero graph inputs.

    Args:
        forward: (batch) -> (G, T), differentiable in ``batch.x`` and the graph inputs.
        data: one graph with ``x`` (N, F) and each graph input as a (1, F_k) attribute.
        target: the output explained.
        graph_inputs: names of graph-level inputs (e.g. ``"descriptors"``) also attributed.
        node_shares: for each graph input, (N, F_k) how its value splits over the nodes
            (columns summing to the value): its attribution reaches node i in proportion.
            Without it the graph inputs' attributions are not carried to the nodes.
        n_steps: integration steps (Gauss-Legendre) of the first try.
        max_steps: the steps are doubled up to this many while captum's convergence delta
            exceeds ``rtol`` times the absolute difference between the output and the
            baseline's output (plus 1e-3); if it still does, the note says so.
        rtol: the relative delta accepted.
        max_nodes: the most nodes (steps times N) one forward and backward pass holds;
            more steps than fit run in several passes (captum's ``internal_batch_size``),
            so memory stays bounded for large graphs.

    Returns:
        values (N,) summing to output(data) - output(baseline) up to ``delta`` (captum's
        convergence delta) when every graph input has shares.
    """
    # captum (and the matplotlib it loads) costs about a second at start-up: imported
    # here, `setattn train` and `predict` do not pay for it
    from captum.attr import IntegratedGradients

    inputs = (data.x.float()[None],) + tuple(data[k].float() for k in graph_inputs)
    baselines = tuple(torch.zeros_like(t) for t in inputs)

    def outputs(*args: Tensor) -> Tensor:
        return forward(_replicated(data, graph_inputs, *args))[:, target]  # (S,)

    with torch.no_grad():
        prediction, baseline = (float(v) for v in outputs(*(torch.cat(p) for p in zip(
            inputs, baselines))))
    accepted = rtol * abs(prediction - baseline) + 1e-3
    while True:
        per_pass = max(1, max_nodes // max(1, data.num_nodes))  # steps in one pass
        attributions, delta = IntegratedGradients(outputs).attribute(
            inputs, baselines=baselines, n_steps=n_steps, return_convergence_delta=True,
            internal_batch_size=per_pass if per_pass < n_steps else None)
        if abs(float(delta[0])) <= accepted or 2 * n_steps > max_steps:
            break
        n_steps *= 2
    values = attributions[0][0].sum(-1).detach()  # (N,) node features
    for attribution, value, share in zip(attributions[1:], inputs[1:], node_shares):
        ratio = torch.where(value != 0, attribution / value.where(value != 0, 1.0), 0.0)
        values = values + share.float() @ ratio[0].detach()  # (N,)
    complete = len(node_shares) == len(graph_inputs)
    missed = abs(float(delta[0])) > accepted  # still over the tolerance at max_steps
    return Attribution(values, "integrated-gradients", prediction,
                       baseline if complete else None, abs(float(delta[0])),
                       note="integrated gradients from all-zero node features"
                       + (" and graph inputs" if graph_inputs else "")
                       + f" ({n_steps} steps)"
                       + (f"; not converged: the convergence delta {float(delta[0]):.3g} is "
                          f"over {rtol:.0%} of prediction - baseline "
                          f"({prediction - baseline:.3g}) at {n_steps} steps" if missed else ""))


@torch.no_grad()
def occlusion(forward: Forward, data: Data, variants: Sequence[Data | None], target: int = 0,
              note: str = "output minus the output without the node",
              max_nodes: int = MAX_NODES_PER_PASS) -> Attribution:
    """Output of the graph minus the output of each node's variant.

    Args:
        forward: (batch) -> (G, T).
        data: the graph of N nodes.
        variants: N graphs, variant i being ``data`` with node i removed or masked
            (None: node i cannot be removed; its contribution is NaN).
        target: the output explained.
        note: the explanation's note.
        max_nodes: the most nodes one forward pass holds (the variants run in passes).

    Returns:
        values (N,) output(data) - output(variant i); no sum claimed.
    """
    kept = [v for v in variants if v is not None]
    outs = _output(forward, [data, *kept], target, max_nodes)  # (1 + K,)
    values = torch.full((len(variants),), float("nan"), device=outs.device)  # (N,)
    index = torch.tensor([i for i, v in enumerate(variants) if v is not None],
                         dtype=torch.long, device=outs.device)  # (K,)
    values[index] = outs[0] - outs[1:]
    return Attribution(values, "occlusion", float(outs[0]), None, note=note)


def remove_node(data: Data, i: int) -> Data:
    """``data`` without node i and its edges (other node and edge attributes kept)."""
    keep = torch.ones(data.num_nodes, dtype=torch.bool, device=data.x.device)  # (N,)
    keep[i] = False
    edge_index, edge_attr = subgraph(keep, data.edge_index, data.get("edge_attr"),
                                     relabel_nodes=True, num_nodes=data.num_nodes)
    out = data.clone()
    out.x, out.edge_index = data.x[keep], edge_index  # (N - 1, F), (2, E')
    if edge_attr is not None:
        out.edge_attr = edge_attr
    return out


def mask_node(data: Data, i: int, value: float = 0.0) -> Data:
    """``data`` with node i's features set to ``value`` (edges kept)."""
    out = data.clone()
    out.x = data.x.clone()
    out.x[i] = value
    return out
