"""setattn.viz.text: words shaded by signed contributions, HTML and PNG (known answers)."""

from __future__ import annotations

import re

import matplotlib.image
import numpy as np
import pytest
import torch

from setattn.viz import (
    WordSection,
    contribution_colours,
    plot_word_contributions,
    words_contributions_html,
)
from setattn.viz.text import word_layout

RED, BLUE = contribution_colours([1.0, -1.0])  # the two ends of the colour map


def _section(centre: float = 0.0) -> WordSection:
    rows = [(["awful", "plot", ",", "great", "cast"], torch.tensor([-2.0, 0.1, 0.0, 1.5, 0.3])
             + centre, "predicted: positive (p=0.71)"),
            (["fine"], [0.5 + centre], "predicted: positive (p=0.60)")]
    return WordSection("integrated gradients", rows, "contribution to the logit", centre)


def _spans(page: str) -> dict[str, tuple[int, int, int]]:
    found = re.findall(r'background: rgb\((\d+), (\d+), (\d+)\)[^>]*>([^<]+)</span>', page)
    return {word: (int(r), int(g), int(b)) for r, g, b, word in found}


@pytest.mark.parametrize("centre", [0.0, 1.0])
def test_html_puts_the_extreme_colours_on_the_extreme_words(tmp_path, centre):
    page = words_contributions_html([_section(centre)], tmp_path / "w.html",
                                    title="t").read_text(encoding="utf-8")
    spans = _spans(page)
    assert len(spans) == 6
    # one symmetric scale for the section: the largest distance (2.0) is full colour
    assert spans["awful"] == tuple(round(255 * c) for c in BLUE)
    red = np.array(spans["great"]) / 255  # 1.5 of 2.0: red, paler than the end
    assert red[0] > red[2] and red[0] >= RED[0] - 0.3 and spans["great"] != spans["cast"]
    white = contribution_colours([0.0])[0]  # the middle of the map: near white
    assert spans[","] == tuple(round(255 * c) for c in white) and min(white) > 0.9
    assert "blue -2, white 0, red 2" in page.replace(f"{centre + 2:.3g}", "2").replace(
        f"{centre - 2:.3g}", "-2").replace(f"{centre:.3g}", "0")
    assert "predicted: positive (p=0.71)" in page


def test_png_puts_blue_left_and_red_right(tmp_path):
    rows = [(["bad", "the", "good"], [-1.0, 0.0, 1.0], "predicted: positive")]
    path = plot_word_contributions(WordSection("ig", rows, "logit"), tmp_path / "w.png")
    image = matplotlib.image.imread(path)[..., :3]  # (H, W, 3)
    words = image[:, : int(0.6 * image.shape[1])]  # left of the colour bar

    def columns(colour):
        close = np.abs(words - np.array(colour)).max(-1) < 0.05  # (H, W')
        return close.nonzero()[1]
    blue, red = columns(BLUE), columns(RED)
    assert blue.size > 50 and red.size > 50  # the boxes of "bad" and "good"
    assert blue.max() < red.min()  # "bad" (left) blue, "good" (right) red
    bar = image[:, int(0.8 * image.shape[1]):]  # the colour bar holds both ends
    assert (np.abs(bar - np.array(RED)).max(-1) < 0.05).any()
    assert (np.abs(bar - np.array(BLUE)).max(-1) < 0.05).any()


def test_layout_wraps_long_sentences():
    layout, height = word_layout([(["word"] * 40, "caption")], width=4.0)
    assert layout[0][2:] == ("caption", 0, -1)
    ys = {y for _, y, _, _, k in layout if k >= 0}
    assert len(ys) > 3 and height > max(ys)
    assert all(x + 0.085 * 5 <= 4.0 for x, _, _, _, k in layout if k >= 0)


def test_values_must_match_the_tokens(tmp_path):
    bad = WordSection("m", [(["a", "b"], [1.0], "c")], "u")
    with pytest.raises(ValueError, match=r"section 'm', sentence 0: 2 tokens but values of "
                                         r"shape \(1,\)"):
        words_contributions_html([bad], tmp_path / "x.html")
    with pytest.raises(ValueError, match="2 tokens"):
        plot_word_contributions(bad, tmp_path / "x.png")
