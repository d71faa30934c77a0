"""Counts in messages: "1 row", "2 rows"."""

from __future__ import annotations

__all__ = ["counted"]


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``n`` (with thousands separators) and ``noun``, or ``plural`` (default: the noun
    and an "s") unless n is 1."""
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"
