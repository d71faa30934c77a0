"""The ``setattn`` command: molecule property prediction from a CSV of SMILES.

    setattn train   --data CSV --target-columns T1 [T2 ...] --output-dir DIR [...]
    setattn predict --model DIR --data CSV --output preds.csv
    setattn explain --model DIR (--smiles S --output PIC.png | --data CSV --output DIR) [...]

A thin layer over ``setattn.molprop``: ``parser`` (the flags), ``process`` (the process
settings only a program may make), and one module per command. Bad input (a missing
file or column, a non-numeric target, a foreign checkpoint, a flag out of range) ends
the command with exit status 2 and one message naming the file, row, column or
argument; an interrupted ``train`` (Ctrl-C) exits with 130 and is continued by the same
command with ``--resume``.

``train`` runs data-parallel when started by ``torchrun`` (see
``setattn.molprop.distributed``):

    torchrun --standalone --nproc_per_node 2 -m setattn.cli train --data CSV ...
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from setattn.cli import process
from setattn.cli.explain import cmd_explain
from setattn.cli.parser import build_parser
from setattn.cli.predict import cmd_predict
from setattn.cli.train import cmd_train
from setattn.molprop.checkpoint import CheckpointError

__all__ = ["build_parser", "main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``setattn`` command; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.num_threads < 1:
        parser.error(f"argument --num-threads: must be >= 1, got {args.num_threads}")
    if args.command == "train" and not 0 <= args.checkpoint_seconds < float("inf"):
        parser.error(f"argument --checkpoint-seconds: must be >= 0 and finite, "
                     f"got {args.checkpoint_seconds}")
    process.set_up(args.command, args.num_threads)
    command = {"train": cmd_train, "predict": cmd_predict, "explain": cmd_explain}[args.command]
    try:
        return command(args)
    except (FileNotFoundError, CheckpointError, ValueError) as err:
        print(f"setattn {args.command}: error: {err}", file=sys.stderr)
        return 2
    except OSError as err:  # a folder not writable, a disk full: one line, no traceback
        where = f"{err.filename}: " if err.filename else ""
        print(f"setattn {args.command}: error: {where}{err.strerror or err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        if args.command == "train":
            print(f"\nsetattn train: interrupted; the last finished epoch is saved. Continue "
                  f"with: setattn train --output-dir {args.output_dir} --resume",
                  file=sys.stderr)
        return 130
