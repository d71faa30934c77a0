"""Prediction intervals for regression by split conformal calibration on the validation part.

After training, the validation molecules (which training never fits, only early-stops
on) give each target t a scale ``q_t`` such that the interval::

    mean +- q_t * (u + floor_t)

holds the true value for about ``level`` of new molecules drawn like the validation
ones. ``u`` is the calibration's ``spread``: the kernel ridge's posterior std
(``KernelRidge.posterior_std``, how far a molecule lies from the training molecules)
where the model blends a kernel ridge, else the spread of the ensemble's members
(how each was chosen: the README's molecule section). ``floor_t`` is the mean of ``u``
over the validation molecules (1 where that is 0, e.g. one model: then every interval
has the same width, plain absolute-residual conformal). ``q_t`` is the
``ceil((n + 1) * level)``-th smallest normalised validation error
``|y - mean| / (u + floor_t)`` of the n labelled validation molecules (Vovk et al.,
"Algorithmic Learning in a Random World", 2005; Angelopoulos & Bates, "A Gentle
Introduction to Conformal Prediction", 2021), infinite when n is too small for the level.
The coverage holds whatever ``u`` is; a ``u`` that follows the errors gives narrower
intervals.

The guarantee is marginal and needs the test molecules to be exchangeable with the
validation ones (a random split); on a scaffold split, coverage of new scaffolds may be
lower, and the benchmark reports what it is.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
from torch import Tensor

__all__ = ["ENSEMBLE", "KERNEL", "LEVEL", "SPREADS", "Calibration", "bounds", "calibrate",
           "coverage", "interval_report", "quantile"]

LEVEL = 0.9
"""Share of molecules a prediction interval is calibrated to hold."""
ENSEMBLE = "ensemble"  # intervals scaled by the spread of the ensemble's members
KERNEL = "kernel"  # by the kernel ridge's posterior std
SPREADS = (ENSEMBLE, KERNEL)


@dataclass
class Calibration:
    """A fitted split conformal calibration (saved as the run's ``conformal.json``).

    Attributes:
        level: the calibrated coverage, e.g. 0.9.
        scale: q_t per target (T,), in units of ``u + floor``; inf (null in JSON)
            when the validation part had too few labels for the level.
        floor: floor_t per target (T,), added to ``u``.
        calibration_size: labelled validation molecules per target (T,).
        spread: what ``u`` is: ``ENSEMBLE`` (the members' std) or ``KERNEL`` (the kernel
            ridge's posterior std); runs saved before there was a choice have ``ENSEMBLE``.
    """

    level: float
    scale: list[float]
    floor: list[float]
    calibration_size: list[int]
    spread: str = ENSEMBLE

    def to_dict(self) -> dict:
        """JSON-ready: an infinite scale becomes None (null)."""
        d = asdict(self)
        d["scale"] = [v if math.isfinite(v) else None for v in self.scale]
        return d

    @classmethod
    def from_dict(cls, d: dict, source: str = "conformal.json") -> Calibration:
        """Raises ValueError naming ``source`` if a key is missing or the lengths differ."""
        try:
            # JSON has no infinity: the run's metrics.json writes it as null
            cal = cls(level=float(d["level"]),
                      scale=[math.inf if v is None else float(v) for v in d["scale"]],
                      floor=[float(v) for v in d["floor"]],
                      calibration_size=[int(v) for v in d["calibration_size"]],
                      spread=str(d.get("spread", ENSEMBLE)))
        except (KeyError, TypeError, ValueError) as err:
            raise ValueError(f"{source}: not a conformal calibration ({err!r})") from err
        if cal.spread not in SPREADS:
            raise ValueError(f"{source}: the calibration's spread must be one of {SPREADS}, "
                             f"got {cal.spread!r}")
        if not len(cal.scale) == len(cal.floor) == len(cal.calibration_size):
            raise ValueError(f"{source}: scale, floor and calibration_size differ in length")
        return cal


def quantile(scores: Tensor, level: float, guarantee: bool = True) -> float:
    """The conformal quantile of n validation scores.

    Args:
        scores: (n,) sorted ascending.
        level: the coverage aimed at, in (0, 1).
        guarantee: True takes the ``ceil((n + 1) * level)``-th smallest score, whose
            coverage is at least ``level`` (in expectation ``ceil((n + 1) * level) /
            (n + 1)``); False interpolates linearly at the 1-based position
            ``(n + 1) * level``, whose expected coverage is ``level`` itself.

    Returns:
        The quantile; inf where the position passes n (too few scores for the level).
    """
    n = scores.numel()
    position = (n + 1) * level  # 1-based
    if guarantee:
        rank = math.ceil(position)
        return float(scores[rank - 1]) if rank <= n else math.inf
    low = math.floor(position)
    if position > n:
        return math.inf
    if low < 1:
        return float(scores[0])
    if low == n:
        return float(scores[n - 1])
    weight = position - low
    return float((1 - weight) * scores[low - 1] + weight * scores[low])


def calibrate(y: Tensor, mean: Tensor, std: Tensor, level: float = LEVEL,
              guarantee: bool = True, spread: str = ENSEMBLE) -> Calibration:
    """Fit the calibration on validation molecules.

    Args:
        y: (M, T) true values, NaN where missing.
        mean: (M, T) predictions.
        std: (M, T) ``u``, what the intervals are scaled by: the ensemble's spreads
            (zeros for one model), or the kernel ridge's posterior std (``spread``).
        level: the coverage to calibrate, in (0, 1).
        guarantee: which quantile of the scores (see ``quantile``).
        spread: what ``std`` is (``ENSEMBLE`` or ``KERNEL``), recorded in the
            calibration so that predictions scale their intervals by the same.

    Returns:
        The ``Calibration``.

    Raises:
        ValueError: if ``level`` is not in (0, 1), the shapes differ or ``spread`` is
            unknown.
    """
    if spread not in SPREADS:
        raise ValueError(f"conformal spread must be one of {SPREADS}, got {spread!r}")
    if not 0 < level < 1:
        raise ValueError(f"conformal level must be in (0, 1), got {level}")
    if not y.shape == mean.shape == std.shape:
        raise ValueError(f"calibrate: y {tuple(y.shape)}, mean {tuple(mean.shape)} and std "
                         f"{tuple(std.shape)} must have the same shape")
    scale, floor, sizes = [], [], []
    for t in range(y.shape[1]):
        ok = ~torch.isnan(y[:, t])  # (M,)
        u = std[ok, t].double()  # (n,)
        base = float(u.mean()) if u.numel() and float(u.mean()) > 0 else 1.0
        scores = ((y[ok, t].double() - mean[ok, t].double()).abs() / (u + base)).sort()
        scale.append(quantile(scores.values, level, guarantee))
        floor.append(base)
        sizes.append(int(ok.sum()))
    return Calibration(level=level, scale=scale, floor=floor, calibration_size=sizes,
                       spread=spread)


def bounds(mean: Tensor, std: Tensor, cal: Calibration) -> tuple[Tensor, Tensor]:
    """Lower and upper interval ends, each (M, T), for predictions ``mean`` (M, T) with
    ``std`` (M, T) the calibration's ``u``: the ensemble's spreads or the kernel ridge's
    posterior std, as ``cal.spread`` says."""
    scale = torch.tensor(cal.scale, dtype=mean.dtype, device=mean.device)  # (T,)
    floor = torch.tensor(cal.floor, dtype=mean.dtype, device=mean.device)  # (T,)
    half = scale * (std + floor)  # (M, T)
    return mean - half, mean + half


def _finite(values: Tensor) -> float | None:
    """The mean of ``values`` (L,), or None where it is empty or infinite (as JSON keeps it)."""
    mean = float(values.double().mean()) if values.numel() else math.inf
    return mean if math.isfinite(mean) else None


def coverage(y: Tensor, mean: Tensor, std: Tensor, cal: Calibration) -> float | None:
    """Share of the labels of ``y`` (M, T; NaN where missing) inside their interval, pooled
    over the targets; None where there is no label. ``mean`` and ``std`` are (M, T)."""
    lower, upper = bounds(mean, std, cal)  # (M, T) each
    ok = ~torch.isnan(y)  # (M, T)
    hit = (y >= lower) & (y <= upper) & ok  # (M, T)
    labelled = int(ok.sum())
    return float(hit.sum()) / labelled if labelled else None


def interval_report(y: Tensor, mean: Tensor, std: Tensor, cal: Calibration) -> dict:
    """How the intervals did on labelled molecules (e.g. the test part).

    Args:
        y: (M, T) true values, NaN where missing.
        mean, std: (M, T) predictions and the calibration's ``u`` (``bounds``).
        cal: the calibration.

    Returns:
        ``{"level", "coverage", "mean_width", "spearman", "per_target"}``: coverage
        (share of labels inside their interval) and mean width pooled over the targets'
        labels (None where a width is infinite); ``spearman`` the Spearman correlation
        of the absolute error with ``u`` (so with the width), averaged over targets where
        it is defined (None where ``u`` is constant, e.g. one model without a kernel
        ridge).
    """
    lower, upper = bounds(mean, std, cal)  # (M, T) each
    per_target, widths = [], []
    for t in range(y.shape[1]):
        ok = ~torch.isnan(y[:, t])  # (M,)
        hit = (y[ok, t] >= lower[ok, t]) & (y[ok, t] <= upper[ok, t])  # (n,)
        width = upper[ok, t] - lower[ok, t]  # (n,)
        error = (y[ok, t] - mean[ok, t]).abs()  # (n,)
        spread = std[ok, t]  # (n,)
        rho = None
        if int(ok.sum()) > 2 and float(spread.std()) > 0 and float(error.std()) > 0:
            # imported here: scipy.stats adds about 1.4 s to every command's start
            from scipy.stats import spearmanr
            rho = float(spearmanr(error.numpy(), spread.numpy()).statistic)
        per_target.append({"coverage": float(hit.double().mean()) if hit.numel() else None,
                           "mean_width": _finite(width),
                           "spearman": rho, "molecules": int(ok.sum())})
        widths.append(width)
    spans = torch.cat(widths)  # (L,) over all labels
    rhos = [p["spearman"] for p in per_target if p["spearman"] is not None]
    return {"level": cal.level,
            "coverage": coverage(y, mean, std, cal),
            "mean_width": _finite(spans),
            "spearman": sum(rhos) / len(rhos) if rhos else None,
            "per_target": per_target}
