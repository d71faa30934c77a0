"""What every example script shares: run options, run setup, metrics.json and result line.

The examples run as scripts (``python examples/x.py``), so this folder is on
``sys.path`` and they import this module as ``common``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch


def new_parser(doc: str) -> argparse.ArgumentParser:
    """An argument parser described by the first paragraph of ``doc``, defaults in --help.

    Args:
        doc: the example's module docstring.

    Returns:
        The parser, without options yet.
    """
    return argparse.ArgumentParser(description=doc.split("\n\n")[0],
                                   formatter_class=argparse.ArgumentDefaultsHelpFormatter)


def add_run_options(parser: argparse.ArgumentParser, out: str, seed_help: str = "random seed",
                    threads_help: str = "torch intra-op threads",
                    quick_help: str = "a few seconds: a smoke test") -> None:
    """Add ``--threads``, ``--seed``, ``--out`` and ``--quick``, the options of every example.

    Args:
        parser: the example's parser.
        out: default output directory.
        seed_help: help text of ``--seed`` (what the seed decides).
        threads_help: help text of ``--threads``.
        quick_help: help text of ``--quick``.
    """
    parser.add_argument("--threads", type=int, default=1, help=threads_help)
    parser.add_argument("--seed", type=int, default=0, help=seed_help)
    parser.add_argument("--out", type=Path, default=Path(out), help="output directory")
    parser.add_argument("--quick", action="store_true", help=quick_help)


def start_run(args: argparse.Namespace) -> torch.Generator:
    """Set the torch threads, seed torch, create the output directory.

    Args:
        args: parsed options with ``threads``, ``seed`` and ``out``.

    Returns:
        A generator seeded with ``args.seed``, for the example's own random draws.
    """
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    args.out.mkdir(parents=True, exist_ok=True)
    return torch.Generator().manual_seed(args.seed)


def write_metrics(metrics: dict, args: argparse.Namespace, start: float) -> dict:
    """Add ``config`` (the options) and ``seconds`` to ``metrics``; write ``metrics.json``.

    Args:
        metrics: the example's results (JSON-ready).
        args: parsed options; ``args.out`` is the output directory.
        start: ``time.perf_counter()`` when the run began.

    Returns:
        ``metrics`` with ``config`` and ``seconds`` as its last keys.
    """
    metrics["config"] = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    metrics["seconds"] = round(time.perf_counter() - start, 2)
    (args.out / "metrics.json").write_text(json.dumps(metrics, indent=2))
    return metrics


def print_result(summary: str, metrics: dict, out: Path, detail: str = "") -> None:
    """Print the final line: ``result: <summary> ([detail; ]<seconds> s; ... in <out>)``.

    Args:
        summary: the headline numbers.
        metrics: as returned by ``write_metrics`` (its ``seconds`` are printed).
        out: the output directory.
        detail: printed before the seconds when given (e.g. the protocol).
    """
    lead = f"{detail}; " if detail else ""
    print(f"result: {summary} ({lead}{metrics['seconds']:.0f} s; metrics and pictures in "
          f"{out})")
