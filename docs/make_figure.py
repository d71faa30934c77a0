"""Draw docs/guide/_static/attention_graph.png, the picture of "Attention as a graph".

    python docs/make_figure.py            # from the repository root; rewrites the PNG

A batch of two sets (3 and 4 items) with one head of scaled dot-product self attention,
``setattn.attend`` over ``setattn.complete(ptr)``: (a) the weights as the engine returns
them, an ``AttentionGraph`` shown as its dense (Nq, Nk) matrix, zero between the sets;
(b) the same weights as a weighted directed graph, each edge j -> i as wide as p_ij;
(c) attention pooling, ``setattn.bipartite``: one seed query per set attends to its items.
"""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's setattn
import setattn  # noqa: E402

OUT = Path(__file__).resolve().parent / "guide" / "_static" / "attention_graph.png"
SIZES = [3, 4]
COLOURS = ["tab:blue", "tab:orange"]


def self_attention() -> setattn.AttentionGraph:
    """Weights of one head of self attention within each set: (E, 1) over 3^2 + 4^2 edges."""
    torch.manual_seed(1)
    x = torch.randn(sum(SIZES), 1, 4)  # (N, H, D)
    ptr = setattn.topology.ptr_from_sizes(SIZES)  # (G + 1,)
    _, graph = setattn.attend(x, x, x, setattn.complete(ptr), return_weights=True)
    return graph


def pooling() -> setattn.AttentionGraph:
    """Weights of one seed query per set attending to that set's items: (E, 1), E = 7."""
    torch.manual_seed(2)
    items = torch.randn(sum(SIZES), 1, 4) * 1.5  # (N, H, D)
    seeds = torch.randn(len(SIZES), 1, 4)  # (G, H, D): one query per set
    ptr_items = setattn.topology.ptr_from_sizes(SIZES)  # (G + 1,)
    ptr_seeds = setattn.topology.ptr_from_sizes([1] * len(SIZES))  # (G + 1,)
    topology = setattn.bipartite(ptr_seeds, ptr_items)
    _, graph = setattn.attend(seeds, items, items, topology, return_weights=True)
    return graph


def item_positions() -> np.ndarray:
    """(N, 2) positions: each set's items on a circle of its own."""
    points = []
    for g, size in enumerate(SIZES):
        angles = np.pi / 2 + 2 * np.pi * np.arange(size) / size
        points += [(4.0 * g + np.cos(a), np.sin(a)) for a in angles]
    return np.array(points)


def set_of_item() -> list[int]:
    return [g for g, size in enumerate(SIZES) for _ in range(size)]


def draw_matrix(ax: plt.Axes, graph: setattn.AttentionGraph) -> None:
    dense = graph.to_dense()[0].numpy()  # (Nq, Nk), head 0
    image = ax.imshow(dense, cmap="Reds", vmin=0, vmax=1)
    for i, j in np.ndindex(*dense.shape):
        if dense[i, j] > 0:
            ax.text(j, i, f"{dense[i, j]:.2f}", ha="center", va="center", fontsize=7)
    ax.set_xticks(range(dense.shape[1]))
    ax.set_yticks(range(dense.shape[0]))
    ax.set_xlabel("key j (source)")
    ax.set_ylabel("query i (target)")
    ax.set_title("(a) weights p_ij: one row per query,\nzero between the two sets", fontsize=10)
    plt.colorbar(image, ax=ax, fraction=0.046)


def draw_edges(ax: plt.Axes, graph: setattn.AttentionGraph, source_xy: np.ndarray,
               target_xy: np.ndarray) -> None:
    """Every edge j -> i as an arrow from source j to target i, as wide as its weight."""
    for (j, i), w in zip(graph.edge_index.t().tolist(), graph.weights[:, 0].tolist()):
        if j == i and not graph.bipartite:
            ax.add_patch(plt.Circle(target_xy[i], 0.12 + 0.25 * w, fill=False, lw=0.5 + 5 * w,
                                    color="tab:red", alpha=0.6))
            continue
        ax.annotate("", xy=target_xy[i], xytext=source_xy[j],
                    arrowprops={"arrowstyle": "-|>", "lw": 0.5 + 6 * w, "color": "tab:red",
                                "alpha": 0.35 + 0.6 * w, "shrinkA": 9, "shrinkB": 9,
                                "connectionstyle": "arc3,rad=0.15"})


def draw_nodes(ax: plt.Axes, xy: np.ndarray, colours: list[str], labels: list[str]) -> None:
    ax.scatter(xy[:, 0], xy[:, 1], s=260, c=colours, zorder=3, edgecolors="black")
    for (x, y), label in zip(xy, labels):
        ax.text(x, y, label, ha="center", va="center", fontsize=8, color="white", zorder=4)


def draw_graph(ax: plt.Axes, graph: setattn.AttentionGraph) -> None:
    xy = item_positions()
    draw_edges(ax, graph, xy, xy)
    draw_nodes(ax, xy, [COLOURS[g] for g in set_of_item()], [str(n) for n in range(len(xy))])
    ax.set_title("(b) the same weights as a graph:\nedge j -> i as wide as p_ij (ring: p_ii)",
                 fontsize=10)


def draw_pooling(ax: plt.Axes, graph: setattn.AttentionGraph) -> None:
    xy = item_positions()
    seeds = np.array([[4.0 * g, 0.0] for g in range(len(SIZES))])  # (G, 2), at set centres
    draw_edges(ax, graph, xy, seeds)
    draw_nodes(ax, xy, [COLOURS[g] for g in set_of_item()], [str(n) for n in range(len(xy))])
    draw_nodes(ax, seeds, ["black"] * len(SIZES), [f"s{g}" for g in range(len(SIZES))])
    ax.set_title("(c) attention pooling: seed s_g attends\nto the items of set g (bipartite)",
                 fontsize=10)


def main() -> None:
    fig, axes = plt.subplots(1, 3, figsize=(14, 4.6), width_ratios=[1.1, 1.2, 1.2])
    draw_matrix(axes[0], self_attention())
    draw_graph(axes[1], self_attention())
    draw_pooling(axes[2], pooling())
    for ax in axes[1:]:
        ax.set_aspect("equal")
        ax.set_xlim(-1.6, 5.6)
        ax.set_ylim(-1.6, 1.6)
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(OUT, dpi=110, metadata={"Software": None})
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
