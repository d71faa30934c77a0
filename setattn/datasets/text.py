"""Texts with class labels from a CSV file: ``load_text_csv(path, text_column, label_column)``."""

from __future__ import annotations

import csv
from typing import NamedTuple

import torch

from setattn.datasets.files import PathLike, check_columns, existing_file, open_text

__all__ = ["TextSet", "load_text_csv"]


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
