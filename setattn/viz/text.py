"""Words shaded by signed contributions, as an HTML page and as a picture.

- ``WordSection``: sentences (tokens, one value per token, a caption such as the
  prediction) explained by one method, in one unit, around one neutral value.
- ``words_contributions_html(sections, path)``: an HTML page, one part per section.
- ``plot_word_contributions(section, path)``: a picture of one section with a colour bar
  in the section's unit.

Colours are diverging (``contribution_colours``): the neutral value ``centre`` is
white (0 for contributions to an output; 1 for attention weights times the number of
words, "as much as a uniform weight"), red above, blue below, and one symmetric scale
for all sentences of a section, so that a colour means the same value everywhere.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from setattn.viz.colours import contribution_colours, contribution_limit

__all__ = ["WordSection", "plot_word_contributions", "word_layout",
           "words_contributions_html", "write_page"]

WordRow = tuple[Sequence[str], "torch.Tensor | np.ndarray | Sequence[float]", str]
"""One sentence: its tokens, (n,) one value per token, a caption."""


@dataclass
class WordSection:
    """Sentences explained by one method.

    Attributes:
        heading: what the values are (the method), e.g. "integrated gradients".
        rows: (tokens, values (n,), caption) per sentence.
        unit: the values' unit, the colour bar's caption.
        centre: the neutral value, drawn white.
    """

    heading: str
    rows: Sequence[WordRow]
    unit: str
    centre: float = 0.0

    def values(self) -> list[np.ndarray]:
        """Each row's values as float64 arrays; a ValueError if a row's count is off."""
        out = []
        for k, (tokens, values, _) in enumerate(self.rows):
            if isinstance(values, torch.Tensor):
                values = values.detach().cpu().double().numpy()
            v = np.asarray(values, dtype=np.float64)  # (n,)
            if v.shape != (len(tokens),):
                raise ValueError(f"section {self.heading!r}, sentence {k}: {len(tokens)} "
                                 f"tokens but values of shape {tuple(v.shape)}")
            out.append(v)
        return out

    def limit(self) -> float:
        """The distance from ``centre`` drawn at full colour: the largest in the section."""
        values = self.values()
        return contribution_limit(np.concatenate(values), self.centre) if values else 1.0


def _css(rgb: Sequence[float]) -> str:
    return "rgb({}, {}, {})".format(*(round(255 * c) for c in rgb))


def _text_colour(rgb: Sequence[float]) -> str:
    """Black on light colours, white on dark ones."""
    return "white" if 0.299 * rgb[0] + 0.587 * rgb[1] + 0.114 * rgb[2] < 0.5 else "black"


def write_page(name: str, heading: str, parts: Sequence[str], path: str | Path) -> Path:
    """Write an HTML page of word spans: ``parts`` (HTML) under ``heading``.

    Args:
        name: the page's title (the browser tab).
        heading: the heading above the parts.
        parts: HTML fragments, one after the other.
        path: the ``.html`` file (its folder is created).

    Returns:
        ``path`` as a ``Path``.
    """
    page = ("<!doctype html>\n<meta charset=\"utf-8\">\n"
            f"<title>{html.escape(name)}</title>\n"
            "<style>body { font-family: sans-serif; max-width: 60em; margin: 2em auto; }\n"
            "span { padding: 0.1em 0.15em; border-radius: 0.2em; line-height: 1.9; }\n"
            "small { color: #555; }</style>\n"
            f"<h2>{html.escape(heading)}</h2>\n" + "\n".join(parts) + "\n")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page, encoding="utf-8")
    return path


def words_contributions_html(sections: Sequence[WordSection], path: str | Path, *,
                             title: str = "") -> Path:
    """An HTML page of sentences with every word shaded by its value, section by section.

    Args:
        sections: the methods, each with its sentences, unit and neutral value; each
            section has its own symmetric scale, stated under its heading. The exact value
            shows when the mouse rests on a word.
        path: the ``.html`` file.
        title: the page's heading.

    Returns:
        ``path`` as a ``Path``.
    """
    parts = []
    for section in sections:
        limit = section.limit()
        low, high = section.centre - limit, section.centre + limit
        parts.append(f"<h3>{html.escape(section.heading)}</h3>\n<p><small>"
                     f"{html.escape(section.unit)}: blue {low:.3g}, white "
                     f"{section.centre:.3g}, red {high:.3g}</small></p>")
        for (tokens, _, caption), v in zip(section.rows, section.values()):
            spans = [f'<span title="{x:.3f}" style="background: {_css(rgb)}; color: '
                     f'{_text_colour(rgb)}">{html.escape(token)}</span>'
                     for token, x, rgb in zip(tokens, v, contribution_colours(
                         v, section.centre, limit))]
            parts.append(f'<p><small>{html.escape(caption)}</small><br>{" ".join(spans)}</p>')
    return write_page(title or "word contributions", title, parts, path)


def word_layout(rows: Sequence[tuple[Sequence[str], str]], width: float,
                char_w: float = 0.085, line_h: float = 0.3
                ) -> tuple[list[tuple[float, float, str, int, int]], float]:
    """Where each caption and token goes in a picture ``width`` inches wide.

    Args:
        rows: (tokens, caption) per sentence.
        width: inches; long sentences wrap onto further lines.
        char_w: inches per character.
        line_h: inches per text line.

    Returns:
        (x, y, text, sentence, token) in inches from the top left, token -1 for a
        caption; and the height in inches.
    """
    layout = []
    y = 0.0
    for g, (tokens, caption) in enumerate(rows):
        layout.append((0.0, y, caption, g, -1))
        y += line_h * 0.9
        x = 0.0
        for k, token in enumerate(tokens):
            token_w = char_w * (len(token) + 1)
            if x > 0 and x + token_w > width - 0.2:
                x, y = 0.0, y + line_h
            layout.append((x, y, token, g, k))
            x += token_w + 0.05
        y += line_h * 1.5
    return layout, y + 0.2


def plot_word_contributions(section: WordSection, path: str | Path, *, title: str = "",
                            width: float = 9.0) -> Path:
    """A picture of sentences whose words sit on boxes coloured by their values, with a
    colour bar in ``section.unit``.

    Args:
        section: the sentences (their captions above them: e.g. the prediction), the
            unit and the neutral value.
        path: the picture (``.png``, ...).
        title: the picture's title (default: the section's heading).
        width: figure width in inches.

    Returns:
        ``path`` as a ``Path``.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib import cm, colors

    values, limit = section.values(), section.limit()
    colours = [contribution_colours(v, section.centre, limit) for v in values]
    layout, height = word_layout([(t, c) for t, _, c in section.rows], width)
    fig = plt.figure(figsize=(width + 1.2, height + 0.4))
    ax = fig.add_axes((0, 0, width / (width + 1.2), height / (height + 0.4)))
    ax.set_xlim(0, width)
    ax.set_ylim(height, 0)
    ax.axis("off")
    for x, y, text, g, k in layout:
        if k < 0:  # a caption
            ax.text(x + 0.05, y + 0.1, text, fontsize=8, color="#555555", va="top")
            continue
        rgb = colours[g][k]
        ax.text(x + 0.05, y + 0.12, text, fontsize=10, va="top", family="monospace",
                color=_text_colour(rgb),
                bbox={"boxstyle": "round,pad=0.15", "facecolor": rgb, "edgecolor": "none"})
    bar_ax = fig.add_axes((width / (width + 1.2) + 0.02, 0.1, 0.015, 0.8))
    scale = cm.ScalarMappable(colors.Normalize(section.centre - limit,
                                               section.centre + limit), "RdBu_r")
    fig.colorbar(scale, cax=bar_ax).set_label(section.unit, fontsize=9)
    fig.suptitle(title or section.heading, fontsize=10, y=1.0 + 0.1 / height)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path
