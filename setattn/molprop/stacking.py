"""The one stacking rule of the molecule model: a least-squares weight between two parts.

Two predictors of the same targets, a and b, are stacked as ``w a + (1 - w) b``. Given
their residuals r_a and r_b (L,) on molecules neither was fitted to (leave-one-out
residuals, or a validation part), the weight that minimises the stack's mean squared
residual ``mean((w r_a + (1 - w) r_b)^2)`` has a closed form::

    g = r_a - r_b
    w = -sum(r_b g) / sum(g^2)

``stack_weight`` gives it clipped to [0, 1]; with ``shrink`` its step away from a
``centre`` is first shrunk by its own standard error, ``d -> d^3 / (d^2 + se^2)`` with
``d = w - centre`` and ``se^2 = mean(e^2) / sum(g^2)`` (``e = r_b + w g``, the stack's
residual), so that a weight fitted on a few dozen molecules stays near the centre and
one the data clearly support is kept. The model uses it twice:

- the descriptor kernel ridge against the fingerprint one, on their leave-one-out
  residuals over the training molecules (no shrinkage; centre 1: the descriptors alone
  where the two agree everywhere), ``setattn.molprop.kernels``;
- the attention networks against the kernel part, on the validation part (shrunk
  toward 0.5), ``setattn.molprop.ensemble``.
"""

from __future__ import annotations

from torch import Tensor

__all__ = ["stack_weight"]


def stack_weight(r_a: Tensor, r_b: Tensor, centre: float, shrink: bool) -> float:
    """The weight in [0, 1] of part a in ``w a + (1 - w) b`` (module docstring).

    Args:
        r_a: (L,) part a's residuals (target minus prediction) on labelled molecules.
        r_b: (L,) part b's residuals on the same molecules.
        centre: the weight where the two parts' residuals are equal on every molecule
            (no information), and what ``shrink`` pulls toward.
        shrink: shrink the step away from ``centre`` by its standard error.

    Returns:
        The weight, a Python float.
    """
    r_a, r_b = r_a.double(), r_b.double()
    gap = r_a - r_b  # (L,)
    denominator = float(gap.square().sum())
    if denominator == 0.0:
        return centre
    w = -float((r_b * gap).sum()) / denominator
    if shrink:
        se2 = float((r_b + w * gap).square().mean()) / denominator
        d = w - centre
        factor = d * d / (d * d + se2) if d * d + se2 > 0 else 0.0
        w = centre + factor * d
    return min(max(w, 0.0), 1.0)
