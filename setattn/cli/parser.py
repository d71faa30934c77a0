"""The ``setattn`` argument parser. Every flag is a dataclass field made with ``option``:
``train``'s come from the run's config dataclasses (``setattn.molprop.config``) and
``TrainFlags``, ``pretrain``'s from ``PretrainConfig`` (``setattn.molprop.pretrain``) and
``PretrainFlags``, ``predict``'s from ``PredictFlags``, ``embed``'s from ``EmbedFlags``,
``explain``'s from ``ExplainFlags``, ``serve``'s from ``ServeFlags``
(``setattn.cli.flags``), so each flag is defined once, beside its default and the range
of values it accepts."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable
from dataclasses import MISSING, Field
from typing import Any

from setattn.cli.flags import (
    RUN_DIR_FLAGS,
    EmbedFlags,
    ExplainFlags,
    PredictFlags,
    PretrainFlags,
    ServeFlags,
    TrainFlags,
)
from setattn.molprop.config import Range, flag_fields, range_error, run_flags
from setattn.molprop.pretrain import PretrainConfig

__all__ = ["build_parser", "flag_name"]


def flag_name(name: str) -> str:
    """``--split-sizes`` for the field ``split_sizes``."""
    return "--" + name.replace("_", "-")


def _default(f: Field) -> Any:
    return f.default_factory() if f.default is MISSING else f.default


def _help(f: Field) -> str:
    """The field's help text, with ``(default: ...)`` unless it says the default itself."""
    default = _default(f)
    if default is None or not f.metadata["show_default"]:
        return f.metadata["help"]
    shown = " ".join(map(str, default)) if isinstance(default, list) else default
    return f"{f.metadata['help']} (default: {shown})"


def _checked(kind: Callable[[str], Any], allowed: Range) -> Callable[[str], Any]:
    """An argparse ``type``: the flag's text read as ``kind`` and checked against
    ``allowed``; argparse names the flag in the error (``argument --epochs: must be
    >= 1, got 0``) and exits with status 2."""
    def read(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"invalid {kind.__name__} value: {text!r}") from None
        reason = range_error(value, allowed)
        if reason is not None:
            raise argparse.ArgumentTypeError(reason)
        return value
    return read


def _add_flags(parser: argparse.ArgumentParser, flags: Iterable[Field],
               left_out_is_none: bool = False) -> None:
    """One flag per field, in order; fields naming the same ``group`` form a required
    choice of one of their flags.

    Args:
        left_out_is_none: a flag left out is None (``train``'s run settings: the default,
            or the run's own setting with --resume) rather than the field's default.
    """
    groups: dict[str, Any] = {}  # argparse's mutually exclusive groups, by name
    for f in flags:
        settings = dict(f.metadata["flag"])
        if f.metadata["range"] is not None:
            settings["type"] = _checked(settings["type"], f.metadata["range"])
        where = parser
        group = f.metadata["group"]
        if group is not None:
            if group not in groups:
                groups[group] = parser.add_mutually_exclusive_group(required=True)
            where = groups[group]
        where.add_argument(flag_name(f.name), dest=f.name, help=_help(f),
                           default=None if left_out_is_none else _default(f), **settings)


def _add_train(sub: argparse._SubParsersAction) -> None:
    train = sub.add_parser("train", help="train a model (or an ensemble) on a CSV of SMILES",
                           description="Train on a CSV of SMILES and targets. Flags left out "
                           "take the defaults shown; with --resume they come from the run.")
    own = flag_fields(TrainFlags)
    _add_flags(train, [f for f in own if f.name in RUN_DIR_FLAGS])
    _add_flags(train, [f for _, f in run_flags()], left_out_is_none=True)
    _add_flags(train, [f for f in own if f.name not in RUN_DIR_FLAGS])


def build_parser() -> argparse.ArgumentParser:
    """The ``setattn`` argument parser with its subcommands."""
    parser = argparse.ArgumentParser(
        prog="setattn", description="Molecule property prediction with attention over atoms.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_train(sub)
    pretrain = sub.add_parser(
        "pretrain", help="pretrain the networks' encoder on a CSV of unlabelled SMILES",
        description="Self-supervised pretraining: the encoder learns to predict each "
        "molecule's RDKit 2D descriptors and Morgan fingerprint bits from its atom graph. "
        "Writes encoder.pt, which setattn train --pretrained fine-tunes. Flags left out "
        "take the defaults shown; with --resume they come from the run.")
    _add_flags(pretrain, flag_fields(PretrainFlags))
    _add_flags(pretrain, flag_fields(PretrainConfig), left_out_is_none=True)
    predict = sub.add_parser("predict", help="predict the targets of a CSV of SMILES",
                             description="One output row per input row, in order; an "
                             "unparsable SMILES gets empty predictions and a message in the "
                             "error column. An ensemble adds a <target>_std column per target.")
    _add_flags(predict, flag_fields(PredictFlags))
    embed = sub.add_parser(
        "embed", help="the networks' molecule vectors for a CSV of SMILES",
        description="One output row per input row, in order: the vector each network of "
        "the run reads a molecule into (its attention readout and the sum of its atoms' "
        "states, 2 x --hidden numbers per member), for models of one's own. An unparsable "
        "SMILES gets empty cells and a message in the error column.")
    _add_flags(embed, flag_fields(EmbedFlags))
    explain = sub.add_parser(
        "explain", help="each atom's contribution to the model's prediction",
        description="One contribution per atom to the prediction predict makes (an "
        "ensemble's mean), in the target's units (logits for classification). --smiles "
        "draws one molecule; --data explains every row of a CSV into a folder (atoms.csv, "
        "molecules.csv, pictures, errors.csv).")
    _add_flags(explain, flag_fields(ExplainFlags))
    serve = sub.add_parser(
        "serve", help="a web page and a JSON API for a trained run",
        description="Serve a run on http://HOST:PORT/: a page to paste SMILES or upload a "
        "CSV (predictions, intervals, atom pictures, a CSV download) and a JSON API "
        "(/predict, /explain, /model; its description at /docs). Needs the serve extra: "
        "pip install 'setattn[serve]'.")
    _add_flags(serve, flag_fields(ServeFlags))
    return parser
