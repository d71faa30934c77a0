"""The page of ``setattn serve``: ``page.html`` (HTML, CSS and a little JavaScript, no
build step) with the model's card and the limits filled in on the server."""

from __future__ import annotations

import functools
import html
import json
from collections.abc import Sequence
from importlib import resources
from typing import Any

from setattn.explain import METHODS
from setattn.molprop.explain import DEFAULT_METHOD
from setattn.serve.service import ServeLimits

__all__ = ["card_html", "page_html"]


@functools.cache
def _template() -> str:
    return resources.files("setattn.serve").joinpath("page.html").read_text(encoding="utf-8")


def _metrics_text(metrics: Any) -> str:
    """``{"rmse": 0.85, "r2": 0.94}`` as "rmse 0.85, r2 0.94" (nested values as JSON)."""
    if not isinstance(metrics, dict):
        return "" if metrics is None else str(metrics)
    return ", ".join(f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {json.dumps(v)}"
                     for k, v in metrics.items())


def _card_rows(card: dict) -> list[tuple[str, str]]:
    """(label, text) lines of the card, plain text (escaped when written)."""
    split = card.get("split") or {}
    parts = ", ".join(f"{k} {split[k]}" for k in ("train", "val", "test") if k in split)
    interval = card.get("interval")
    rows = [("targets", ", ".join(card["targets"])), ("task", str(card.get("task"))),
            ("ensemble", f"{card['members']} model(s)"),
            ("training set", f"{card.get('molecules')} molecules ({split.get('type', '?')} "
                             f"split: {parts})" if split else "unknown"),
            ("test metrics", _metrics_text(card.get("test")) or "none recorded")]
    if interval is not None:
        coverage = interval.get("test_coverage")
        covered = f"; {coverage:.0%} of the test part inside" if coverage is not None else ""
        rows.append(("interval", f"{interval['level']:.0%} conformal, scaled by the "
                                 f"{interval['scaled_by']} spread{covered}"))
    rows.append(("trained", card.get("trained") or "unknown"))
    return rows


def card_html(card: dict) -> str:
    """The card as an HTML table and the run's options as JSON under a disclosure."""
    lines = "".join(f"<tr><td>{html.escape(k)}</td><td>{html.escape(v)}</td></tr>"
                    for k, v in _card_rows(card))
    options = html.escape(json.dumps(card.get("options", {}), indent=1))
    return (f"<table>{lines}</table><details><summary>options</summary>"
            f"<pre>{options}</pre></details>")


def _legend(card: dict, members: int) -> str:
    interval = card.get("interval")
    parts = ["one column per target (the ensemble's mean)"]
    if members > 1:
        parts.append("<target>_std: the spread of the ensemble's members")
    if interval is not None:
        parts.append(f"<target>_lower / _upper: the {interval['level']:.0%} prediction "
                     f"interval")
    parts.append("error: why a row has no prediction, or a note")
    return "; ".join(parts) + "."


def page_html(card: dict, limits: ServeLimits, methods: Sequence[str] = METHODS) -> str:
    """The whole page for a model's ``card`` (``setattn.serve.card.model_card``),
    offering the explanation ``methods`` that can work for it
    (``setattn.serve.service.usable_methods``)."""
    options = "".join(f"<option{' selected' if m == DEFAULT_METHOD else ''}>"
                      f"{html.escape(m)}</option>" for m in methods)
    values = {"title": html.escape(f"setattn: {card['name']} ({', '.join(card['targets'])})"),
              "smiles_column": html.escape(card["smiles_column"]),
              "max_molecules": str(limits.max_molecules),
              "max_explain": str(limits.max_explain), "card": card_html(card),
              "legend": html.escape(_legend(card, card["members"])), "methods": options}
    page = _template()
    for name, value in values.items():
        page = page.replace("{{" + name + "}}", value)
    return page
