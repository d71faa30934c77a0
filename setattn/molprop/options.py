"""Config fields that are also command-line flags, so each setting lives in one place.

A field made with ``option`` carries its help text (and argparse settings) in its
metadata; ``setattn.cli`` turns every such field into the flag ``--name-with-dashes``.
"""

from __future__ import annotations

from dataclasses import Field, field, fields
from typing import Any

__all__ = ["flag_fields", "option"]


def option(default: Any, help: str, **flag: Any) -> Any:
    """A dataclass field that is also a ``setattn train`` flag.

    Args:
        default: the default value (a list default is copied for every instance).
        help: the flag's help text; the CLI appends the default.
        **flag: further ``argparse.add_argument`` settings (``type``, ``nargs``,
            ``choices``, ``metavar``).
    """
    metadata = {"help": help, **flag}
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata=metadata)
    return field(default=default, metadata=metadata)


def flag_fields(config: type) -> list[Field]:
    """The fields of a config dataclass that are command-line flags, in order."""
    return [f for f in fields(config) if "help" in f.metadata]
