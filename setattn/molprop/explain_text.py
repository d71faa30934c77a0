"""The words and scale of an explanation's picture, shared by every place that draws one
(``setattn explain`` and ``setattn serve``), so both say the same and colour alike.

- ``prediction_text(e, target)``: "expt -4.123", or "P(NR-AR) 0.123 (logit -1.963)".
- ``sum_text(e)``: what the contributions add up to, or that the method claims no sum.
- ``picture_labels(e, target, method)``: the title, the colour bar's caption, its
  neutral value and the distance from it drawn at full colour.
"""

from __future__ import annotations

from dataclasses import dataclass

from setattn.molprop.explain import MoleculeExplanation

__all__ = ["PictureLabels", "picture_labels", "prediction_text", "sum_text"]


@dataclass(frozen=True)
class PictureLabels:
    """What an explanation's picture says besides the atoms' colours.

    Attributes:
        title: three lines: the SMILES, the prediction, the method and the sum.
        unit: the colour bar's caption, in the contributions' units.
        centre: the neutral (white) value: 0, or 1 for attention relative to uniform.
        limit: the distance from ``centre`` drawn at full colour (None: the largest).
    """

    title: str
    unit: str
    centre: float
    limit: float | None


def prediction_text(e: MoleculeExplanation, target: str) -> str:
    """The explained prediction in words: the value, or the probability and its logit."""
    a = e.attribution
    if e.probability is not None:
        return f"P({target}) {e.probability:.3f} (logit {a.prediction:+.3f})"
    return f"{target} {a.prediction:.3f}"


def sum_text(e: MoleculeExplanation) -> str:
    """What the contributions sum to (prediction minus baseline), or that the method
    claims no sum."""
    a = e.attribution
    if not a.complete:
        return "contributions claim no sum"
    return (f"contributions sum to prediction - baseline ({a.prediction - a.baseline:+.3f}; "
            f"baseline {a.baseline:+.3f})")


def picture_labels(e: MoleculeExplanation, target: str, method: str) -> PictureLabels:
    """The title, caption and colour scale of ``e``'s picture (``method`` named in it)."""
    a = e.attribution
    unit = {"target units": f"contribution to {target}", "logit": f"contribution to the logit "
            f"of {target}", "relative attention": "attention weight x atoms (1 = uniform)"}
    title = f"{e.smiles}\npredicted {prediction_text(e, target)}\n{method}: {sum_text(e)}"
    # attention: full colour at 0 and 2 (never / twice uniform), so near-uniform looks pale
    limit = max(float((a.values - 1).abs().max()), 1.0) if e.unit == "relative attention" \
        else None
    return PictureLabels(title, unit[e.unit], float(a.centre), limit)
