"""File helpers shared by the loaders: opening (gzip too), existence and column checks.

Every loader reports a bad file by naming it: a missing file names the argument, a
missing column lists the columns present, and a bad target cell names its row and column.
"""

from __future__ import annotations

import csv
import gzip
import math
from collections.abc import Sequence
from pathlib import Path
from typing import IO

__all__ = ["PathLike", "as_list", "check_columns", "existing_file", "open_text", "parse_target",
           "read_column"]

PathLike = str | Path


def open_text(path: Path) -> IO[str]:
    """Open a text file for reading, transparently decompressing ``.gz``."""
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8", newline="")
    return open(path, encoding="utf-8", newline="")


def existing_file(path: PathLike, argument: str = "path") -> Path:
    """Return ``path`` as a ``Path`` or raise a ``FileNotFoundError`` naming it."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"argument {argument}: no such file {str(path)!r}")
    return path


def as_list(names: str | Sequence[str]) -> list[str]:
    """Accept one column name or several."""
    return [names] if isinstance(names, str) else list(names)


def check_columns(header: list[str], wanted: list[str], path: Path) -> None:
    """Raise a ``ValueError`` naming the missing columns and listing those present."""
    missing = [name for name in wanted if name not in header]
    if missing:
        raise ValueError(f"{path.name}: missing column(s) {missing}; columns present: {header}")


def parse_target(cell: str | None, path: Path, row: int, column: str) -> float:
    """A numeric label; an empty (or absent) cell is a missing label, NaN."""
    if cell is None or not cell.strip():
        return math.nan
    try:
        return float(cell)
    except ValueError:
        raise ValueError(
            f"{path.name}: row {row}, column {column!r}: target {cell!r} is not a number"
        ) from None


def read_column(path: PathLike, column: str) -> list[str]:
    """The cells of one column of a CSV with a header line (``.csv`` or ``.csv.gz``), one
    per data row ("" for an empty or absent cell).

    Raises:
        FileNotFoundError: naming ``path``.
        ValueError: if the column is missing (listing the columns present).
    """
    path = existing_file(path)
    with open_text(path) as handle:
        reader = csv.DictReader(handle)
        check_columns(list(reader.fieldnames or []), [column], path)
        return [record[column] or "" for record in reader]
