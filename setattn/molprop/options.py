"""Config fields that are also command-line flags, so each setting lives in one place.

A field made with ``option`` carries its help text (and argparse settings) in its
metadata; ``setattn.cli`` turns every such field into the flag ``--name-with-dashes``.
"""

from __future__ import annotations

import re
from dataclasses import Field, field, fields
from typing import Any, TypeVar

import dacite

__all__ = ["config_from_dict", "flag_fields", "key_error", "option"]

T = TypeVar("T")


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


def _float_from_int(value: Any) -> Any:
    """JSON writes 1.0 as 1: an integer is a float where a float is expected."""
    return float(value) if isinstance(value, int) and not isinstance(value, bool) else value


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def config_from_dict(config: type[T], d: Any, source: str, prefix: str = "") -> T:
    """A config dataclass from a JSON dict, every key and type checked (``dacite``).

    Args:
        config: the dataclass.
        d: the parsed JSON value.
        source: the file it came from, for messages.
        prefix: the key of ``d`` in an enclosing dict ("model."), for messages.

    Raises:
        ValueError: ``source`` and the key (with its section) that is unknown or has
            the wrong type, in one line.
    """
    if not isinstance(d, dict):
        where = f"key {prefix[:-1]!r}" if prefix else "the file"
        raise ValueError(f"{source}: {where} holds a JSON {type(d).__name__}, not an object "
                         f"of settings")
    known = {f.name for f in fields(config)}
    unknown = sorted(set(d) - known)
    if unknown:
        raise ValueError(f"{source}: unknown key(s) {[prefix + k for k in unknown]}")
    settings = dacite.Config(strict=True, type_hooks={float: _float_from_int})
    try:
        return dacite.from_dict(config, d, settings)
    except dacite.WrongTypeError as err:
        path = prefix + (err.field_path or "")
        raise ValueError(f"{source}: key {path!r}: {_shown(err.value)} is not of type "
                         f"{getattr(err.field_type, '__name__', err.field_type)}") from None
    except dacite.DaciteError as err:
        raise ValueError(f"{source}: {prefix}{err}") from None


_FLAG = re.compile(r"argument --([a-z][a-z-]*): ")


def key_error(err: ValueError, source: str, sections: dict[str, str]) -> ValueError:
    """A setting's check failure (``argument --flag: ...``) reworded for a file: the
    flag becomes its key there, ``sections`` giving the key's section (``"train."``)."""
    text = str(err)
    match = _FLAG.match(text)
    if match is None:
        return ValueError(f"{source}: {text}")
    name = match.group(1).replace("-", "_")
    return ValueError(f"{source}: key {sections.get(name, '') + name!r}: {text[match.end():]}")
