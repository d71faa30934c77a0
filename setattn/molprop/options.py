"""Config fields that are also command-line flags, so each setting lives in one place.

A field made with ``option`` carries its help text, its argparse settings and the range
of values it accepts in its metadata; ``setattn.cli`` turns every such field into the
flag ``--name-with-dashes``. A field made with ``bounded`` has a range but no flag.
``range_error`` is the one check of a value against its range: a config's ``validate``
calls it through ``check_ranges`` (the error names the keyword: ``epochs must be >= 1,
got -1``), and the command line on each flag's value as argparse reads it (the error
names the flag: ``argument --epochs: must be >= 1, got -1``).
"""

from __future__ import annotations

import math
import re
from dataclasses import Field, dataclass, field, fields
from typing import Any, TypeVar

import dacite

__all__ = ["Range", "SettingError", "bounded", "check_ranges", "config_from_dict",
           "flag_fields", "key_error", "option", "range_error"]

T = TypeVar("T")


@dataclass(frozen=True)
class Range:
    """The values a numeric setting accepts (None, "not set", is always accepted).

    Attributes:
        low: the smallest value (None: no lower end).
        low_open: the value must be above ``low``, not equal to it.
        below: the value must be under this (None: no upper end).
        finite: the value must be finite.
        largest: the largest value setattn accepts, a size it can hold
            (``setattn.molprop.limits``); None: no such limit.
    """

    low: float | None = None
    low_open: bool = False
    below: float | None = None
    finite: bool = False
    largest: int | None = None

    def text(self) -> str:
        """The condition in words, largest value aside: ``>= 0 and < 1``."""
        parts = [] if self.low is None else [f"{'>' if self.low_open else '>='} {self.low:g}"]
        parts += [] if self.below is None else [f"< {self.below:g}"]
        return " and ".join(parts + (["finite"] if self.finite else []))


class SettingError(ValueError):
    """A setting's value refused: out of its ``Range``, not one of its choices, or at odds
    with another setting. The message names the keyword (``epochs must be >= 1, got 0``);
    the command line names the flag instead (``argument --epochs: must be >= 1, got 0``),
    a settings file the key.

    Attributes:
        name: the setting (the field's name, ``batch_size``).
        reason: what is wrong with its value, ``must be >= 1, got 0``.
    """

    def __init__(self, name: str, reason: str, *, colon: bool = False) -> None:
        """``colon``: the reason is a clause of its own (``device: cuda asked for, but
        ...``) rather than the rest of a sentence about ``name``."""
        super().__init__(f"{name}{':' if colon else ''} {reason}")
        self.name, self.reason = name, reason


def range_error(value: Any, allowed: Range) -> str | None:
    """Why ``value`` is outside ``allowed`` (``must be >= 1, got 0``), or None if it is
    inside (or None). NaN is inside no range that has a lower end, an upper end or
    ``finite``."""
    if value is None or isinstance(value, bool):
        return None
    if allowed.largest is not None and value > allowed.largest:
        return f"must be <= {allowed.largest:,} (the largest setattn accepts), got {value}"
    low_ok = allowed.low is None or (value > allowed.low if allowed.low_open
                                     else value >= allowed.low)
    below_ok = allowed.below is None or value < allowed.below
    if low_ok and below_ok and (not allowed.finite or math.isfinite(value)):
        return None
    return f"must be {allowed.text()}, got {value}"


def check_ranges(config: Any) -> None:
    """Check every field of the dataclass instance ``config`` that has a ``Range``.

    Raises:
        SettingError: naming the first field outside its range.
    """
    for f in fields(config):
        allowed = f.metadata.get("range")
        reason = None if allowed is None else range_error(getattr(config, f.name), allowed)
        if reason is not None:
            raise SettingError(f.name, reason)


def option(default: Any, help: str, *, bounds: Range | None = None,
           show_default: bool = True, group: str | None = None, **flag: Any) -> Any:
    """A dataclass field that is also a command-line flag.

    Args:
        default: the default value (a list default is copied for every instance).
        help: the flag's help text; the CLI appends ``(default: ...)`` to it unless
            ``show_default`` is False (a help text that says the default its own way).
        bounds: the values it accepts (``check_ranges``), if it is a number.
        group: fields of one command naming the same group are a required choice of
            exactly one of their flags (``setattn explain --smiles | --data``).
        **flag: further ``argparse.add_argument`` settings (``type``, ``nargs``,
            ``choices``, ``metavar``, ``action``, ``required``).
    """
    metadata = {"help": help, "flag": flag, "range": bounds, "show_default": show_default,
                "group": group}
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata=metadata)
    return field(default=default, metadata=metadata)


def bounded(default: Any, bounds: Range) -> Any:
    """A dataclass field that is no flag but accepts only the values of ``bounds``."""
    return field(default=default, metadata={"range": bounds})


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
    """A setting's check failure (a ``SettingError``, or ``argument --flag: ...``)
    reworded for a file: the setting becomes its key there, ``sections`` giving the key's
    section (``"train."``)."""
    if isinstance(err, SettingError):
        return ValueError(f"{source}: key {sections.get(err.name, '') + err.name!r}: "
                          f"{err.reason}")
    text = str(err)
    match = _FLAG.match(text)
    if match is None:
        return ValueError(f"{source}: {text}")
    name = match.group(1).replace("-", "_")
    return ValueError(f"{source}: key {sections.get(name, '') + name!r}: {text[match.end():]}")
