"""``log.csv``: one row per epoch of every ensemble member, rewritten after each epoch.

    model, epoch, train_loss, val_loss, val_<metric>, lr, seconds

``lr`` is the learning rate of the epoch's last optimiser step (the schedule's value
after it would be the next epoch's first).

The file is rewritten whole and atomically (a reader never sees half of it), so a
resumed run, whose epochs since the last ``last.pt`` are redone, leaves no stale rows.
Each row is formatted once: ``EpochLog`` keeps the lines of the rows it has seen, and a
rewrite formats only the new ones (formatting every row every epoch cost more than the
write itself).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from pathlib import Path

from setattn.files import atomic_open

__all__ = ["EpochLog"]


def _line(row: dict) -> str:
    """One CSV line of ``row``'s values, floats to 6 significant digits."""
    buffer = io.StringIO()
    csv.writer(buffer).writerow([f"{v:.6g}" if isinstance(v, float) else v
                                 for v in row.values()])
    return buffer.getvalue()


class EpochLog:
    """The CSV log at ``path``.

    Args:
        path: the file to write.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._rows: list[dict] = []  # the rows formatted so far (held: compared by identity)
        self._lines: list[str] = []  # their CSV lines

    def write(self, rows: Sequence[dict]) -> None:
        """Rewrite the file with ``rows`` (nothing for none); the header is the first
        row's keys. Rows already written, as the same objects in the same places, keep
        their lines."""
        if not rows:
            return
        keep = 0
        while (keep < min(len(rows), len(self._rows))
               and rows[keep] is self._rows[keep]):
            keep += 1
        self._rows = list(rows)
        self._lines = [*self._lines[:keep], *(_line(row) for row in rows[keep:])]
        header = _line({key: key for key in rows[0]})
        # rewritten after every epoch, and its rows are in last.pt too: no fsync
        with atomic_open(self.path, "w", sync=False, encoding="utf-8", newline="") as handle:
            handle.write(header + "".join(self._lines))
