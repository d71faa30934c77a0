"""A trained run held in memory for ``setattn serve``: predictions, explanations and the
model's card, through the same functions as ``setattn predict`` and ``setattn explain``.

``ModelService(run_dir)`` loads the run's ensemble (and kernel ridge) once, reading the
run directory and never writing into it. ``predict`` returns the header and rows that
``setattn predict`` writes for the same SMILES (``predict_table``: one code path);
``explain`` draws each molecule as ``setattn explain`` does, as SVG. Both are plain
blocking calls; ``run`` puts one on the service's bounded pool of threads, off the
event loop of the web server.
"""

from __future__ import annotations

import asyncio
import csv
import functools
import io
import math
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from setattn.domains.atom_notes import molecule_note
from setattn.domains.molecules import InvalidSmilesError, MoleculeSkippedError
from setattn.explain import METHODS
from setattn.molprop.checkpoint import load_run
from setattn.molprop.config import MAX_HEAVY_ATOMS
from setattn.molprop.explain import (
    DEFAULT_METHOD,
    explain_molecule,
    picture_labels,
    prediction_text,
    sum_text,
)
from setattn.molprop.predict import predict_table
from setattn.serve.card import model_card
from setattn.viz.contribution_svg import contribution_svg

__all__ = ["ModelService", "ServeLimits", "csv_text", "row_objects"]

T = TypeVar("T")


@dataclass(frozen=True)
class ServeLimits:
    """What one request may ask and how much work runs at once.

    Attributes:
        max_molecules: SMILES per ``/predict`` request (more: 422 naming the limit).
        max_explain: SMILES per ``/explain`` request (each is an integrated-gradients
            run, far dearer than a prediction).
        max_body_bytes: bytes of one request's body (more: 413 naming the limit).
        workers: threads predicting and explaining; requests beyond them wait their turn.
    """

    max_molecules: int = 1000
    max_explain: int = 20
    max_body_bytes: int = 2_000_000
    workers: int = 2

    def __post_init__(self) -> None:
        for name in ("max_molecules", "max_explain", "max_body_bytes", "workers"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")


def _number(cell: str) -> float | str | None:
    """A prediction cell for JSON: a number, None for "" (no prediction), and the text
    "inf" / "-inf" for an unbounded interval end (JSON has no infinity)."""
    if not cell:
        return None
    value = float(cell)
    return value if math.isfinite(value) else cell


def row_objects(columns: Sequence[str], rows: Sequence[Sequence[str]]) -> list[dict]:
    """Rows of text cells as JSON objects: the first column (SMILES) and ``error`` as
    text, every other column as a number (None where there is none; "inf" / "-inf" for
    an unbounded interval end), keyed by the column names."""
    numeric = range(1, len(columns) - 1)
    return [{columns[0]: row[0], **{columns[c]: _number(row[c]) for c in numeric},
             columns[-1]: row[-1]} for row in rows]


def csv_text(columns: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """The table as the CSV text ``setattn predict`` writes (its ``csv.writer``)."""
    out = io.StringIO(newline="")
    writer = csv.writer(out)
    writer.writerow(columns)
    writer.writerows(rows)
    return out.getvalue()


class ModelService:
    """One run's models, loaded once, with a bounded pool of threads to run them.

    Args:
        run_dir: a run directory of ``setattn train`` (or one ``best.pt``); only read.
        limits: per-request limits and the pool's size.

    Raises:
        FileNotFoundError, CheckpointError: naming what is missing or not ours.
    """

    def __init__(self, run_dir: str | Path, limits: ServeLimits | None = None) -> None:
        self.run_dir = Path(run_dir)
        self.limits = limits or ServeLimits()
        self.ensemble, self.meta = load_run(self.run_dir, "cpu")
        self.targets: list[str] = list(self.meta["target_columns"])
        self.smiles_column: str = self.meta.get("smiles_column", "smiles")
        self.max_heavy_atoms: int = self.meta.get("max_heavy_atoms", MAX_HEAVY_ATOMS)
        self.card = model_card(self.run_dir, self.meta, len(self.ensemble))
        self._pool = ThreadPoolExecutor(self.limits.workers, thread_name_prefix="setattn-serve")
        # attention capture is process-wide: one explanation at a time
        self._explaining = threading.Lock()

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on the service's pool, awaited without blocking the event loop."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, functools.partial(fn, *args))

    def close(self) -> None:
        """Stop the pool (work already queued finishes)."""
        self._pool.shutdown(wait=True)

    def predict(self, smiles: Sequence[str]) -> tuple[list[str], list[list[str]]]:
        """The header and the M rows ``setattn predict`` writes for these M SMILES."""
        return predict_table(self.ensemble, self.targets, list(smiles), self.smiles_column,
                             max_heavy_atoms=self.max_heavy_atoms,
                             calibration=self.meta.get("conformal"), source="request")

    def check_target(self, target: str | None) -> int:
        """The index of ``target`` (None: the first).

        Raises:
            ValueError: naming the model's targets.
        """
        if target is None:
            return 0
        if target not in self.targets:
            raise ValueError(f"target {target!r} is not a target of this model "
                             f"({', '.join(self.targets)})")
        return self.targets.index(target)

    def explain(self, smiles: Sequence[str], method: str = DEFAULT_METHOD,
                target: str | None = None) -> list[dict]:
        """One explanation per SMILES: its picture (SVG), the prediction and sum in words,
        each atom's contribution; or ``error`` ("invalid SMILES: ...", "skipped: ...").

        Raises:
            ValueError: for an unknown method or target.
        """
        if method not in METHODS:
            raise ValueError(f"method {method!r} is not one of {', '.join(METHODS)}")
        t = self.check_target(target)
        with self._explaining:
            return [self._explain_one(s, method, t) for s in smiles]

    def _explain_one(self, smiles: str, method: str, t: int) -> dict:
        try:
            e = explain_molecule(self.ensemble, smiles, method, t, self.max_heavy_atoms)
        except InvalidSmilesError as err:
            prefix = "skipped" if isinstance(err, MoleculeSkippedError) else "invalid SMILES"
            return {"smiles": smiles, "error": f"{prefix}: {err.reason}"}
        target = self.targets[t]
        labels = picture_labels(e, target, method)
        svg = contribution_svg(smiles, e.attribution.values, title=labels.title,
                               unit=labels.unit, centre=labels.centre, limit=labels.limit)
        values = e.attribution.values.tolist()
        note = molecule_note(smiles)
        return {"smiles": smiles, "error": f"note: {note}" if note else "",
                "target": target, "method": method, "unit": e.unit,
                "prediction": prediction_text(e, target), "sum": sum_text(e),
                "method_note": e.attribution.note, "svg": svg,
                "atoms": [{"symbol": s, "contribution": None if math.isnan(v) else v}
                          for s, v in zip(e.symbols, values)]}
