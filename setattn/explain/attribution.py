"""The result of every explanation method: one contribution per node, and what it means."""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

__all__ = ["Attribution"]


@dataclass
class Attribution:
    """Per-node contributions to one output of one graph.

    Attributes:
        values: (N,) one contribution per node, in the output's units (for ``attention``:
            the weight times N, 1 meaning "as much as a uniform weight").
        method: the method's name (``setattn.explain.METHODS``).
        prediction: the explained output for the graph as given.
        baseline: the output for the method's baseline input when the contributions sum
            to ``prediction - baseline`` (up to ``delta``); None when they do not claim to.
        delta: how far the method itself says the sum may be from ``prediction -
            baseline`` (integrated gradients' convergence delta; 0 for exact methods).
        centre: the neutral value for pictures (0, or 1 for attention relative to uniform).
        note: one sentence saying what the contributions are (baseline, what is removed).
    """

    values: Tensor
    method: str
    prediction: float
    baseline: float | None
    delta: float = 0.0
    centre: float = 0.0
    note: str = ""

    @property
    def complete(self) -> bool:
        """Whether the values claim to sum to ``prediction - baseline``."""
        return self.baseline is not None

    def gap(self) -> float:
        """``prediction - baseline - sum(values)`` (NaN when the method claims no sum)."""
        if self.baseline is None:
            return float("nan")
        return self.prediction - self.baseline - float(self.values.sum())
