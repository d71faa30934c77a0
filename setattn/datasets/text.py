"""Texts with class labels: ``load_text_csv(path, text_column, label_column)`` for a CSV
file, ``load_labelled_lines(path, classes)`` for ``LABEL text`` lines (TREC, CR)."""

from __future__ import annotations

import csv
from typing import NamedTuple

import torch

from setattn.datasets.files import PathLike, check_columns, existing_file, open_text

__all__ = ["TextSet", "load_labelled_lines", "load_text_csv"]


class TextSet(NamedTuple):
    """Texts with class labels.

    Attributes:
        texts: the N raw texts (an empty cell gives an empty string).
        labels: (N,) long class indices into ``classes``; all zeros without labels.
        classes: class names; index k of ``labels`` means ``classes[k]``.
    """

    texts: list[str]
    labels: torch.Tensor
    classes: list[str]


def _class_indices(labels: list[str]) -> tuple[torch.Tensor, list[str]]:
    """Map label strings to indices of their sorted set (numerically if all integers)."""
    names = sorted(set(labels))
    if all(_is_int(name) for name in names):
        names.sort(key=int)
    index = {name: k for k, name in enumerate(names)}
    return torch.tensor([index[label] for label in labels], dtype=torch.long), names


def _is_int(text: str) -> bool:
    """Whether ``text`` reads as an integer."""
    try:
        int(text)
    except ValueError:
        return False
    return True


def load_text_csv(path: PathLike, text_column: str, label_column: str | None = None) -> TextSet:
    """Read texts (and class labels) from a CSV file with a header line.

    Args:
        path: the CSV file (``.csv`` or ``.csv.gz``).
        text_column: the name of the text column; an empty cell is an empty text.
        label_column: the name of the label column, or None for unlabelled texts.
            Labels are class names; integers are ordered numerically.

    Returns:
        A ``TextSet`` (texts, labels (N,) long, classes).

    Raises:
        FileNotFoundError: if ``path`` does not exist.
        ValueError: if a column is missing (listing the columns present) or a
            label cell is empty (naming the row).
    """
    path = existing_file(path)
    texts: list[str] = []
    labels: list[str] = []
    with open_text(path) as handle:
        reader = csv.DictReader(handle)
        header = list(reader.fieldnames or [])
        wanted = [text_column] + ([label_column] if label_column is not None else [])
        check_columns(header, wanted, path)
        for row, record in enumerate(reader):
            texts.append(record[text_column] or "")
            if label_column is None:
                continue
            label = (record[label_column] or "").strip()
            if not label:
                raise ValueError(f"{path.name}: row {row}, column {label_column!r}: empty label")
            labels.append(label)
    if label_column is None:
        return TextSet(texts, torch.zeros(len(texts), dtype=torch.long), [])
    label_tensor, classes = _class_indices(labels)
    return TextSet(texts, label_tensor, classes)


def load_labelled_lines(path: PathLike, classes: list[str], encoding: str = "latin-1"
                        ) -> TextSet:
    """Read ``LABEL text`` lines: an integer class index, a space, the text.

    Args:
        path: the text file (one example a line; blank lines are skipped).
        classes: the class names; label k means ``classes[k]``.
        encoding: the file's encoding (latin-1 reads any byte).

    Returns:
        A ``TextSet``.

    Raises:
        FileNotFoundError: if ``path`` does not exist.
        ValueError: if a line's label is not an integer in ``range(len(classes))``
            (naming the line).
    """
    path = existing_file(path)
    texts: list[str] = []
    labels: list[int] = []
    for number, line in enumerate(path.read_text(encoding=encoding).splitlines(), start=1):
        if not line.strip():
            continue
        label, _, text = line.partition(" ")
        if not _is_int(label) or not 0 <= int(label) < len(classes):
            raise ValueError(f"{path.name}: line {number}: label {label[:20]!r} is not a "
                             f"class index 0-{len(classes) - 1}")
        texts.append(text.strip())
        labels.append(int(label))
    return TextSet(texts, torch.tensor(labels, dtype=torch.long), list(classes))
