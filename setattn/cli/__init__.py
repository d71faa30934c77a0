"""The ``setattn`` command: molecule property prediction from a CSV of SMILES.

    setattn train   --data CSV --target-columns T1 [T2 ...] --output-dir DIR [...]
    setattn pretrain --corpus CSV --output-dir DIR [...]
    setattn predict --model DIR --data CSV --output preds.csv
    setattn embed   --model DIR|ENCODER --data CSV --output vectors.csv [--member K]
    setattn explain --model DIR (--smiles S --output PIC.png | --data CSV --output DIR) [...]
    setattn serve   --model DIR [--host 127.0.0.1] [--port 8000] [...]

A thin layer over ``setattn.molprop``: ``flags`` (each command's own flags, declared as
dataclass fields like the run's settings), ``parser`` (the flags of those fields),
``process`` (the process settings only a program may make), and one module per
command. Bad input (a missing file or column, a non-numeric target, a foreign
checkpoint, a flag out of range) ends the command with exit status 2 and one message
naming the file, row, column or argument; an interrupted ``train`` (Ctrl-C) exits with
130 and is continued by the same command with ``--resume``.

``train`` runs data-parallel when started by ``torchrun`` (see
``setattn.molprop.distributed``):

    torchrun --standalone --nproc_per_node 2 -m setattn.cli train --data CSV ...
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from setattn.cli import process
from setattn.cli.embed import cmd_embed
from setattn.cli.explain import cmd_explain
from setattn.cli.parser import build_parser, flag_name
from setattn.cli.predict import cmd_predict
from setattn.cli.pretrain import cmd_pretrain
from setattn.cli.serve import cmd_serve
from setattn.cli.train import cmd_train
from setattn.molprop.checkpoint import CheckpointError
from setattn.molprop.config import SettingError

__all__ = ["build_parser", "entry", "main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``setattn`` command; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)  # flags out of range end here (argparse's error)
    process.set_up(args.command, args.num_threads)
    command = {"train": cmd_train, "pretrain": cmd_pretrain, "predict": cmd_predict,
               "embed": cmd_embed, "explain": cmd_explain, "serve": cmd_serve}[args.command]
    try:
        return _run(command, args)
    finally:
        process.command_done()


def _run(command: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    """``command(args)``, its errors as one line and an exit status."""
    try:
        return command(args)
    except SettingError as err:  # named by its flag here, by its keyword in the library
        print(f"setattn {args.command}: error: argument {flag_name(err.name)}: {err.reason}",
              file=sys.stderr)
        return 2
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
        elif args.command == "pretrain":
            print(f"\nsetattn pretrain: interrupted; its state is saved. Continue with: "
                  f"setattn pretrain --output-dir {args.output_dir} --resume", file=sys.stderr)
        return 130


def entry() -> None:
    """The ``setattn`` program (and ``python -m setattn.cli``): ``main``, then the end of
    the process (``process.exit_process``: a server's at once)."""
    process.exit_process(main())
