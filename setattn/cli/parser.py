"""The ``setattn`` argument parser. ``train``'s settings come from the config dataclasses
(``setattn.molprop.config.option``), so each flag is defined once, beside its default."""

from __future__ import annotations

import argparse
from dataclasses import MISSING, Field

from setattn.cli.process import DEFAULT_THREADS
from setattn.explain import METHODS
from setattn.molprop.explain import DEFAULT_METHOD
from setattn.molprop.limits import MAX_HEAVY_ATOMS
from setattn.molprop.loop import CHECKPOINT_SECONDS
from setattn.molprop.settings import DEFAULT_DESCRIPTORS, run_flags

DEVICE = next(f for _, f in run_flags() if f.name == "device")
"""The config field behind every command's ``--device``."""

__all__ = ["DEFAULT_DESCRIPTORS", "build_parser", "run_flags"]

def flag_name(name: str) -> str:
    """``--split-sizes`` for the field ``split_sizes``."""
    return "--" + name.replace("_", "-")


def _default_text(f: Field) -> str:
    default = f.default_factory() if f.default is MISSING else f.default
    if default is None:
        return ""
    shown = " ".join(map(str, default)) if isinstance(default, list) else default
    return f" (default: {shown})"


def _add_config_flags(train: argparse.ArgumentParser) -> None:
    """One flag per config field; left out, a flag is None (the default, or the run's
    own setting with --resume)."""
    for _, f in run_flags():
        settings = {k: v for k, v in f.metadata.items() if k != "help"}
        train.add_argument(flag_name(f.name), dest=f.name, default=None,
                           help=f.metadata["help"] + _default_text(f), **settings)


def _add_train(sub: argparse._SubParsersAction) -> None:
    train = sub.add_parser("train", help="train a model (or an ensemble) on a CSV of SMILES",
                           description="Train on a CSV of SMILES and targets. Flags left out "
                           "take the defaults shown; with --resume they come from the run.")
    train.add_argument("--output-dir", required=True, help="run directory to write")
    train.add_argument("--resume", action="store_true",
                       help="continue the interrupted run in --output-dir")
    _add_config_flags(train)
    train.add_argument("--descriptors", choices=["none", "rdkit"],
                       help="append RDKit 2D descriptors to the readout (default: "
                       f"{DEFAULT_DESCRIPTORS})")
    train.add_argument("--checkpoint-seconds", type=float, default=CHECKPOINT_SECONDS,
                       metavar="S", help="least training time between two writes of "
                       "last.pt, which --resume continues from; it is also written at the "
                       "end and on Ctrl-C or an error, so only a process killed outright "
                       "loses up to S seconds of training (default: "
                       f"{CHECKPOINT_SECONDS:g}; 0: after every epoch)")
    _add_threads(train)


def _add_device(parser: argparse.ArgumentParser, note: str = "") -> None:
    """``--device`` of ``predict`` and ``explain``: ``train``'s flag (the field
    ``TrainConfig.device``), with its default and the command's own ``note``."""
    parser.add_argument(flag_name(DEVICE.name), default=DEVICE.default,
                        metavar=DEVICE.metadata["metavar"],
                        help=DEVICE.metadata["help"] + _default_text(DEVICE) + note)


def _add_threads(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--num-threads", type=int, default=DEFAULT_THREADS,
                        help=f"torch CPU threads (default: {DEFAULT_THREADS}; small molecule "
                        "batches rarely gain from more)")


def build_parser() -> argparse.ArgumentParser:
    """The ``setattn`` argument parser with its three subcommands."""
    parser = argparse.ArgumentParser(
        prog="setattn", description="Molecule property prediction with attention over atoms.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_train(sub)

    predict = sub.add_parser("predict", help="predict the targets of a CSV of SMILES",
                             description="One output row per input row, in order; an "
                             "unparsable SMILES gets empty predictions and a message in the "
                             "error column. An ensemble adds a <target>_std column per target.")
    predict.add_argument("--model", required=True, help="run directory (or one best.pt)")
    predict.add_argument("--data", required=True, help="CSV file with a header line")
    predict.add_argument("--output", required=True, help="CSV file to write")
    predict.add_argument("--smiles-column", help="default: the one the model was trained with")
    predict.add_argument("--encoding", help="text encoding of the CSV, e.g. latin-1 or cp1252 "
                         "(default: UTF-8, or UTF-16 with its byte-order mark)")
    predict.add_argument("--max-heavy-atoms", type=int, metavar="N",
                         help="molecules with more heavy atoms get no prediction (default: "
                         f"the run's setting, {MAX_HEAVY_ATOMS} unless it set another)")
    predict.add_argument("--workers", type=int, default=1,
                         help="processes featurising and predicting chunks in parallel "
                         "(default: 1, this process alone); the output is the same")
    _add_device(predict)
    _add_threads(predict)

    explain = sub.add_parser(
        "explain", help="each atom's contribution to the model's prediction",
        description="One contribution per atom to the prediction predict makes (an "
        "ensemble's mean), in the target's units (logits for classification). --smiles "
        "draws one molecule; --data explains every row of a CSV into a folder (atoms.csv, "
        "molecules.csv, pictures, errors.csv).")
    explain.add_argument("--model", required=True, help="run directory (or one best.pt)")
    given = explain.add_mutually_exclusive_group(required=True)
    given.add_argument("--smiles", help="one molecule: --output is its picture")
    given.add_argument("--data", help="a CSV of molecules: --output is a folder")
    explain.add_argument("--smiles-column", help="with --data; default: the one the model "
                         "was trained with")
    explain.add_argument("--output", required=True,
                         help="picture (.png or .svg) for --smiles, folder for --data")
    explain.add_argument("--method", choices=list(METHODS), default=DEFAULT_METHOD,
                         help=f"how contributions are measured (default: {DEFAULT_METHOD}, "
                         "the best on benchmarks/attribution.py's validation molecules)")
    explain.add_argument("--target", help="the target explained (default: the first)")
    explain.add_argument("--max-pictures", type=int, default=50,
                         help="with --data: pictures of the first N molecules (default: 50)")
    _add_device(explain, "; explanations run on the CPU, so auto means cpu here")
    _add_threads(explain)
    return parser
