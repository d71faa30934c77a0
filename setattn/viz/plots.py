"""Pictures of attention weights and of training with matplotlib (Agg backend, no display).

One function, one picture:

- ``plot_training_curve(rows, path)``: training loss and validation metric per epoch.
- ``plot_alignment(weights, row_labels, col_labels, path)``: a heatmap of output
  tokens x input tokens, the classic figure of Bahdanau et al. (2015).
- ``words_to_html(sentences, path)`` / ``plot_word_weights(sentences, path)``: sentences
  with every word shaded by its weight (e.g. the pooling attention), as an HTML page
  or a PNG.
- ``plot_patch_attention(images, weights, grid_shape, patch_size, path)``: images with
  one weight per patch laid over them.
- ``plot_node_attention(edge_index, weights, center, path)``: a node's neighbourhood,
  every edge j -> i drawn with a width that grows with its attention weight.

Weights may be tensors or arrays; every function writes ``path`` (creating its folder)
and returns it as a ``Path``.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from setattn.viz.text import word_layout, write_page

__all__ = [
    "plot_alignment",
    "plot_node_attention",
    "plot_patch_attention",
    "plot_training_curve",
    "plot_word_weights",
    "words_to_html",
]

ArrayLike = torch.Tensor | np.ndarray | Sequence[float]
# one sentence for the word pictures: its tokens, one weight per token, a caption
Sentence = tuple[Sequence[str], ArrayLike, str]


def _pyplot():
    """matplotlib's pyplot on the file-only Agg backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _numpy(values: ArrayLike) -> np.ndarray:
    """A float64 NumPy copy of a tensor, array or list."""
    if isinstance(values, torch.Tensor):
        return values.detach().cpu().double().numpy()
    return np.asarray(values, dtype=np.float64)


def _save(fig, path: str | Path, dpi: int = 120) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi, bbox_inches="tight")
    _pyplot().close(fig)
    return path


def _shade(weights: np.ndarray) -> np.ndarray:
    """Weights -> [0, 1] by dividing by their maximum (all zeros stay zeros)."""
    top = weights.max() if weights.size else 0.0
    return weights / top if top > 0 else np.zeros_like(weights)


def plot_training_curve(
    rows: Sequence[dict], path: str | Path, *, metric: str, loss: str = "train_loss"
) -> Path:
    """Training loss and validation metric against epoch, one line per model.

    Args:
        rows: log rows, each with ``model``, ``epoch``, ``loss`` and ``metric`` keys.
        path: output picture (any suffix matplotlib knows, e.g. ``.png``).
        metric: the key of the validation metric, e.g. ``"val_rmse"``.
        loss: the key of the training loss.

    Returns:
        ``path`` as a ``Path``.
    """
    plt = _pyplot()
    path = Path(path)
    fig, (ax_loss, ax_metric) = plt.subplots(1, 2, figsize=(9, 3.6))
    for model in sorted({int(r["model"]) for r in rows}):
        mine = [r for r in rows if int(r["model"]) == model]
        epochs = [int(r["epoch"]) for r in mine]
        label = f"model {model}"
        ax_loss.plot(epochs, [float(r[loss]) for r in mine], label=label)
        ax_metric.plot(epochs, [float(r[metric]) for r in mine], label=label)
    ax_loss.set(xlabel="epoch", ylabel=loss.replace("_", " "), yscale="log")
    ax_metric.set(xlabel="epoch", ylabel=metric.replace("_", " "))
    for ax in (ax_loss, ax_metric):
        ax.grid(alpha=0.3)
        if len(ax.get_lines()) > 1:
            ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)  # no tight bounding box, unlike _save
    plt.close(fig)
    return path

def plot_alignment(
    weights: ArrayLike,
    row_labels: Sequence[str],
    col_labels: Sequence[str],
    path: str | Path,
    *,
    title: str | None = None,
    xlabel: str = "input",
    ylabel: str = "output",
    unit: str = "attention weight",
) -> Path:
    """A heatmap of attention weights, one row per output token, one column per input token.

    Weights are drawn on a fixed 0 (black) to 1 (white) scale, so that pictures compare.

    Args:
        weights: (T_out, T_in) weights; row t is output step t's attention over the input.
        row_labels: T_out output tokens (the y axis, top to bottom).
        col_labels: T_in input tokens (the x axis).
        path: the picture (``.png``, ``.svg``, ...).
        title: an optional title.
        xlabel: the x axis caption.
        ylabel: the y axis caption.
        unit: the colour bar's caption.

    Returns:
        ``path`` as a ``Path``.
    """
    w = _numpy(weights)
    if w.shape != (len(row_labels), len(col_labels)):
        raise ValueError(
            f"weights have shape {w.shape} but there are {len(row_labels)} row labels and "
            f"{len(col_labels)} column labels"
        )
    plt = _pyplot()
    cell = 0.32  # inches per token
    fig, ax = plt.subplots(figsize=(max(3.0, cell * w.shape[1] + 1.5),
                                    max(2.5, cell * w.shape[0] + 1.2)))
    image = ax.imshow(w, cmap="gray", vmin=0.0, vmax=1.0, aspect="equal")
    ax.set_xticks(range(len(col_labels)), [_visible(t) for t in col_labels], rotation=90)
    ax.set_yticks(range(len(row_labels)), [_visible(t) for t in row_labels])
    ax.set(xlabel=xlabel, ylabel=ylabel)
    ax.xaxis.set_ticks_position("top")
    ax.xaxis.set_label_position("top")
    if title:  # above the x axis' tick labels and caption
        ax.set_title(title, fontsize=9, pad=4 + 6 * max(map(len, col_labels), default=1) + 14)
    fig.colorbar(image, ax=ax, fraction=0.03, pad=0.02).set_label(unit, fontsize=8)
    return _save(fig, path)


def _visible(token: str) -> str:
    """Blank tokens shown as a middle dot, so that spaces are visible on an axis."""
    return token if token.strip() else "\u00b7"


def words_to_html(sentences: Sequence[Sentence], path: str | Path, *, title: str = "") -> Path:
    """An HTML page of sentences whose words are shaded by weight (white 0 to red max).

    Args:
        sentences: (tokens, weights, caption) triples; weights has one value per token.
            Each sentence is shaded relative to its own largest weight; the exact weight
            shows when the mouse rests on a word.
        path: the ``.html`` file.
        title: the page's heading.

    Returns:
        ``path`` as a ``Path``.
    """
    rows = []
    for tokens, weights, caption in sentences:
        w = _numpy(weights)
        _check_tokens(tokens, w)
        spans = []
        for token, raw, s in zip(tokens, w, _shade(w)):
            spans.append(f'<span title="{raw:.3f}" style="background: rgba(214, 39, 40, '
                         f'{s:.3f})">{html.escape(token)}</span>')
        rows.append(f'<p><small>{html.escape(caption)}</small><br>{" ".join(spans)}</p>')
    return write_page(title or "word weights", title, rows, path)


def _check_tokens(tokens: Sequence[str], weights: np.ndarray) -> None:
    if weights.shape != (len(tokens),):
        raise ValueError(f"{len(tokens)} tokens but weights have shape {weights.shape}")


def plot_word_weights(
    sentences: Sequence[Sentence],
    path: str | Path,
    *,
    title: str = "",
    width: float = 9.0,
) -> Path:
    """A picture of sentences whose words sit on boxes shaded by weight (white 0 to red max).

    Args:
        sentences: (tokens, weights, caption) triples, as for :func:`words_to_html`; each
            sentence is shaded relative to its own largest weight.
        path: the picture (``.png``, ...).
        title: an optional title.
        width: figure width in inches; long sentences wrap onto further lines.

    Returns:
        ``path`` as a ``Path``.
    """
    plt = _pyplot()
    from matplotlib import colormaps

    cmap = colormaps["Reds"]
    shades = []
    for tokens, weights, _ in sentences:
        w = _numpy(weights)
        _check_tokens(tokens, w)
        shades.append(_shade(w))
    layout, height = word_layout([(t, c) for t, _, c in sentences], width)
    fig = plt.figure(figsize=(width, height))
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, width)
    ax.set_ylim(height, 0)
    ax.axis("off")
    for x, y, text, g, k in layout:
        if k < 0:  # a caption
            ax.text(x + 0.05, y + 0.1, text, fontsize=8, color="#555555", va="top")
            continue
        s = shades[g][k]
        colour = cmap(0.85 * s) if s > 0 else (1, 1, 1, 1)
        ax.text(x + 0.05, y + 0.12, text, fontsize=10, va="top", family="monospace",
                color="white" if s > 0.6 else "black",
                bbox={"boxstyle": "round,pad=0.15", "facecolor": colour, "edgecolor": "none"})
    if title:
        fig.suptitle(title, fontsize=10, y=1.0 + 0.25 / height)
    return _save(fig, path)


def plot_patch_attention(
    images: ArrayLike,
    weights: ArrayLike,
    grid_shape: tuple[int, int],
    patch_size: int,
    path: str | Path,
    *,
    titles: Sequence[str] | None = None,
    columns: int = 6,
) -> Path:
    """Images beside their attention weights per patch, one pair of panels per image.

    The left panel is the image; the right one is the patch weights as a heatmap (black =
    0, bright = the image's largest weight) with the image's strokes drawn on it as white
    contour lines. The right panel's title gives the largest weight and the uniform
    weight 1 / P for comparison.

    Args:
        images: (K, H, W) grey-scale images with H = Gh * p and W = Gw * p.
        weights: (K, P) one weight per patch, patches numbered row-major
            (as :func:`setattn.domains.image_to_patches` numbers them), P = Gh * Gw.
        grid_shape: (Gh, Gw).
        patch_size: p.
        path: the picture.
        titles: K captions.
        columns: images per row of the figure.

    Returns:
        ``path`` as a ``Path``.
    """
    from setattn.domains.images import patch_values_to_image

    imgs, w = _numpy(images), _numpy(weights)
    k = imgs.shape[0]
    rows, cols = grid_shape
    if imgs.ndim != 3 or imgs.shape[1:] != (rows * patch_size, cols * patch_size):
        raise ValueError(f"images must be (K, {rows * patch_size}, {cols * patch_size}), "
                         f"got {imgs.shape}")
    if w.shape != (k, rows * cols):
        raise ValueError(f"weights must be (K={k}, P={rows * cols}), got {w.shape}")
    titles = list(titles) if titles is not None else [""] * k
    plt = _pyplot()
    columns = min(columns, k)
    n_rows = -(-k // columns)
    fig, axes = plt.subplots(n_rows, 2 * columns, figsize=(2.4 * columns, 1.35 * n_rows + 0.2),
                             squeeze=False)
    for ax in axes.flat:
        ax.axis("off")
    for i in range(k):
        ax_img = axes[i // columns, 2 * (i % columns)]
        ax_att = axes[i // columns, 2 * (i % columns) + 1]
        heat = patch_values_to_image(torch.from_numpy(_shade(w[i])), grid_shape, patch_size)
        ax_img.imshow(imgs[i], cmap="gray_r")
        ax_att.imshow(heat.numpy(), cmap="inferno", vmin=0, vmax=1)
        top = imgs[i].max()
        if top > imgs[i].min():  # strokes as contours; a flat image has none
            ax_att.contour(imgs[i], levels=[imgs[i].min() + 0.4 * (top - imgs[i].min())],
                           colors="white", linewidths=0.7)
        ax_img.set_title(titles[i], fontsize=7)
        ax_att.set_title(f"max {w[i].max():.3f}, 1/P {1 / w.shape[1]:.3f}", fontsize=6)
    fig.tight_layout(pad=0.3)
    return _save(fig, path)


def plot_node_attention(
    edge_index: torch.Tensor,
    weights: ArrayLike,
    center: int,
    path: str | Path,
    *,
    labels: torch.Tensor | None = None,
    hops: int = 2,
    title: str | None = None,
    seed: int = 0,
) -> Path:
    """A node's neighbourhood with every edge j -> i drawn as wide as its attention weight.

    Shows the nodes within ``hops`` of ``center`` and the attention edges that flow into
    the centre's receptive field (targets closer than ``hops``). Edge width grows with
    the weight p_ij (in absolute terms) and darkness with p_ij relative to the strongest
    edge drawn; the width of a node's outline is its self-loop weight p_ii.

    Args:
        edge_index: (2, E) long, row 0 source j, row 1 target i (self loops allowed).
        weights: (E,) or (E, H) attention weights; heads are averaged.
        center: the node in the middle of the picture.
        path: the picture.
        labels: (N,) class of every node, used for node colours.
        hops: radius of the neighbourhood.
        title: an optional title.
        seed: seed of the spring layout.

    Returns:
        ``path`` as a ``Path``.
    """
    import networkx as nx

    w = _numpy(weights)
    w = w.mean(1) if w.ndim == 2 else w  # (E,)
    src, dst = (edge_index[0].tolist(), edge_index[1].tolist())
    if w.shape != (len(src),):
        raise ValueError(f"{len(src)} edges but weights have shape {w.shape}")
    dist = _hop_distances(src, dst, center, hops)
    graph, self_weight = _receptive_field(src, dst, w, dist, hops)

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 6))
    pos = nx.spring_layout(graph.to_undirected(), seed=seed, k=1.5 / max(len(dist), 1) ** 0.5,
                           pos={center: (0.0, 0.0)}, fixed=[center])
    _draw_neighbourhood(ax, graph, pos, center, self_weight, labels)
    _label_center(ax, graph, pos, center, self_weight)
    ax.set_title(title or f"attention around node {center} ({hops}-hop neighbourhood)",
                 fontsize=10)
    ax.axis("off")
    return _save(fig, path)


def _hop_distances(src: list[int], dst: list[int], center: int, hops: int) -> dict[int, int]:
    """Hop distance from ``center`` of every node within ``hops``, following edges both ways.

    Args:
        src: E source nodes j.
        dst: E target nodes i.
        center: the node at distance 0.
        hops: the largest distance kept.

    Returns:
        node -> distance, ``center`` first, then by distance.
    """
    neighbours: dict[int, set[int]] = {}
    for j, i in zip(src, dst):
        neighbours.setdefault(i, set()).add(j)
        neighbours.setdefault(j, set()).add(i)
    dist = {center: 0}
    frontier = [center]
    for d in range(1, hops + 1):
        frontier = [n for f in frontier for n in neighbours.get(f, ()) if n not in dist]
        for n in frontier:
            dist.setdefault(n, d)
    return dist


def _receptive_field(
    src: list[int], dst: list[int], w: np.ndarray, dist: dict[int, int], hops: int
):
    """The edges into the centre's receptive field, and each node's self-loop weight.

    Args:
        src: E source nodes j.
        dst: E target nodes i.
        w: (E,) one weight per edge.
        dist: node -> hop distance, from :func:`_hop_distances`.
        hops: targets must be closer than this.

    Returns:
        (graph, self_weight): a ``networkx.DiGraph`` of the nodes in ``dist`` with the
        kept edges j -> i (attribute ``weight``), and node -> p_ii (0 without a self loop).
    """
    import networkx as nx

    graph = nx.DiGraph()
    graph.add_nodes_from(dist)
    self_weight = dict.fromkeys(dist, 0.0)
    for j, i, p in zip(src, dst, w):
        if i in dist and j in dist and dist[i] < hops:
            if i == j:
                self_weight[i] = float(p)
            else:
                graph.add_edge(j, i, weight=float(p))
    return graph, self_weight


def _draw_neighbourhood(ax, graph, pos: dict, center: int, self_weight: dict[int, float],
                        labels: torch.Tensor | None) -> None:
    """Draw the edges (width and darkness by weight), the nodes and their ids on ``ax``."""
    import networkx as nx

    plt = _pyplot()
    nodes = list(graph.nodes)
    colours = "#9ecae1"
    if labels is not None:
        from matplotlib import colormaps

        tab = colormaps["tab10"]
        colours = [tab(int(labels[n]) % 10) for n in nodes]
    edge_list = list(graph.edges)
    ew = np.array([graph.edges[e]["weight"] for e in edge_list])
    top = float(ew.max(initial=0.0)) or 1.0  # the darkest edge is the strongest one drawn
    nx.draw_networkx_edges(graph, pos, ax=ax, edgelist=edge_list, width=0.4 + 7.0 * ew,
                           edge_color=ew, edge_cmap=plt.get_cmap("Greys"), edge_vmin=-0.25 * top,
                           edge_vmax=top, arrows=True, arrowsize=8,
                           connectionstyle="arc3,rad=0.12", node_size=260)
    nx.draw_networkx_nodes(graph, pos, ax=ax, nodelist=nodes, node_color=colours,
                           node_size=[520 if n == center else 260 for n in nodes],
                           edgecolors="black",
                           linewidths=[0.3 + 4.0 * self_weight[n] for n in nodes])
    nx.draw_networkx_labels(graph, pos, ax=ax, labels={n: str(n) for n in nodes}, font_size=6)


def _label_center(ax, graph, pos: dict, center: int, self_weight: dict[int, float]) -> None:
    """Write the weight of every edge into ``center``, and its self-loop weight under it."""
    import networkx as nx

    into_center = {e: f"{graph.edges[e]['weight']:.2f}" for e in graph.edges if e[1] == center}
    into_center[(center, center)] = f"self {self_weight[center]:.2f}"
    nx.draw_networkx_edge_labels(graph, pos, ax=ax, edge_labels={
        e: t for e, t in into_center.items() if e[0] != e[1]}, font_size=7,
        connectionstyle="arc3,rad=0.12", label_pos=0.3,
        bbox={"boxstyle": "round,pad=0.1", "facecolor": "white", "edgecolor": "none"})
    ax.annotate(into_center[(center, center)], pos[center], xytext=(0, -22),
                textcoords="offset points", ha="center", fontsize=7)
