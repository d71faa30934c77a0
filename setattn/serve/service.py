"""A trained run held in memory for ``setattn serve``: predictions, explanations and the
model's card, through the same functions as ``setattn predict`` and ``setattn explain``.

``ModelService(run_dir)`` loads the run's ensemble (and kernel ridge) once, reading the
run directory and never writing into it. ``predict`` returns the header and rows that
``setattn predict`` writes for the same SMILES (``predict_table``: one code path);
``explain`` draws each molecule as ``setattn explain`` does, as SVG. Both are plain
blocking calls; ``call`` runs one in a worker process of the service's pool
(``setattn.serve.workers``), within the request's time budget, and stops it when the
budget is spent or the client leaves.
"""

from __future__ import annotations

import csv
import io
import math
import threading
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from setattn.domains.atom_notes import molecule_note
from setattn.domains.errors import short_smiles
from setattn.domains.molecules import InvalidSmilesError, MoleculeSkippedError
from setattn.explain import METHODS
from setattn.molprop.checkpoint import load_run
from setattn.molprop.config import MAX_HEAVY_ATOMS
from setattn.molprop.ensemble import Ensemble
from setattn.molprop.explain import (
    DEFAULT_METHOD,
    explain_molecule,
    picture_labels,
    prediction_text,
    sum_text,
)
from setattn.molprop.predict import predict_table
from setattn.serve.card import model_card
from setattn.serve.workers import WorkerPool
from setattn.viz.contribution_svg import contribution_svg

__all__ = ["ModelService", "ServeLimits", "csv_text", "row_objects", "usable_methods"]


@dataclass(frozen=True)
class ServeLimits:
    """What one request may ask and how much work runs at once.

    Attributes:
        max_molecules: SMILES per ``/predict`` request (more: 422 naming the limit).
        max_explain: SMILES per ``/explain`` request (each is an integrated-gradients
            run, far dearer than a prediction).
        max_body_bytes: bytes of one request's body, and of a compressed body once
            expanded (more: 413 naming the limit).
        workers: processes predicting and explaining; requests beyond them wait their
            turn. Explanations hold at most half of them (at least one), so that
            predictions always find one.
        budget_seconds: the time one request may take, its wait for a worker included;
            its work is stopped then (422 naming it; 503 if it was still waiting).
        max_waiting: requests that may wait for a worker at once (more: 503 with
            ``Retry-After``).
        max_heavy_atoms: the largest molecule a request may hold (None: the run's
            setting); a SMILES longer than ``CHARS_PER_HEAVY_ATOM`` characters per atom
            of it is refused unread (422).
    """

    max_molecules: int = 1000
    max_explain: int = 20
    max_body_bytes: int = 2_000_000
    workers: int = 2
    budget_seconds: float = 30.0
    max_waiting: int = 32
    max_heavy_atoms: int | None = None

    def __post_init__(self) -> None:
        for name in ("max_molecules", "max_explain", "max_body_bytes", "workers",
                     "max_waiting"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if self.max_heavy_atoms is not None and (not isinstance(self.max_heavy_atoms, int)
                                                 or self.max_heavy_atoms < 1):
            raise ValueError(f"max_heavy_atoms must be None or an integer >= 1, got "
                             f"{self.max_heavy_atoms!r}")
        if not isinstance(self.budget_seconds, int | float) or not \
                0 < self.budget_seconds < math.inf:
            raise ValueError(f"budget_seconds must be a number > 0, got "
                             f"{self.budget_seconds!r}")

    @property
    def explain_workers(self) -> int:
        """The most workers explanations may hold at once."""
        return max(1, self.workers // 2)


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


def usable_methods(ensemble: Ensemble) -> list[str]:
    """The explanation methods that can work for this ensemble: ``readout`` only where
    its networks' output is a sum over atoms (a ``decompose`` method)."""
    return [m for m in METHODS if m != "readout" or hasattr(ensemble.networks[0], "decompose")]


class ModelService:
    """One run's models, loaded once, with a bounded pool of worker processes (forked
    from this one, the models in their memory) to run them.

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
        self.max_heavy_atoms: int = self.limits.max_heavy_atoms or self.meta.get(
            "max_heavy_atoms", MAX_HEAVY_ATOMS)
        self.card = model_card(self.run_dir, self.meta, len(self.ensemble))
        self.methods = usable_methods(self.ensemble)
        # attention capture is process-wide: one explanation at a time in a process
        self._explaining = threading.Lock()
        self._pool = WorkerPool({"predict": self.predict, "explain": self.explain},
                                self.limits.workers, {"explain": self.limits.explain_workers},
                                self.limits.max_waiting)

    async def call(self, name: str, args: list, gone: Callable[[], Awaitable[bool]] | None
                   = None) -> Any:
        """``predict`` or ``explain`` (``name``) of ``args`` in a worker process, within
        the request's budget (``setattn.serve.workers.WorkerPool.call``: its errors);
        ``gone`` tells whether the client has left."""
        return await self._pool.call(name, name, args, self.limits.budget_seconds, gone)

    @property
    def waiting(self) -> int:
        """Requests now waiting for a worker."""
        return self._pool.waiting

    def stop_after(self, seconds: float) -> None:
        """The server is stopping: refuse new and waiting requests (503), and stop the
        work still running ``seconds`` from now. Safe in a signal handler."""
        self._pool.stop_after(seconds)

    def close(self) -> None:
        """Stop the workers, whatever they are doing."""
        self._pool.close()

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
            raise ValueError(f"target {short_smiles(target, 40)} is not a target of this model "
                             f"({', '.join(self.targets)})")
        return self.targets.index(target)

    def check_method(self, method: str) -> None:
        """Raise a ValueError naming the usable methods if ``method`` is not one."""
        if method not in METHODS:
            raise ValueError(f"method {short_smiles(method, 40)} is not one of "
                             f"{', '.join(self.methods)}")
        if method not in self.methods:
            raise ValueError(f"method {method!r} cannot explain this model (its output is "
                             f"not a sum of per-atom terms); use one of "
                             f"{', '.join(self.methods)}")

    def explain(self, smiles: Sequence[str], method: str = DEFAULT_METHOD,
                target: str | None = None) -> list[dict]:
        """One explanation per SMILES: its picture (SVG), the prediction and sum in words,
        each atom's contribution; or ``error`` ("invalid SMILES: ...", "skipped: ...").

        Raises:
            ValueError: for an unknown method or target.
        """
        self.check_method(method)
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
