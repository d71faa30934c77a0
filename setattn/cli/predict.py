"""``setattn predict``: a CSV of SMILES through a trained run, streamed."""

from __future__ import annotations

import argparse
import sys
from concurrent.futures.process import BrokenProcessPool

from setattn.cli.process import one_thread
from setattn.molprop.checkpoint import load_run
from setattn.molprop.device import resolve_device
from setattn.molprop.predict import predict_csv

__all__ = ["cmd_predict"]


def cmd_predict(args: argparse.Namespace) -> int:
    """Predict; print the row counts. Returns the exit status."""
    if args.workers < 1:
        raise ValueError(f"argument --workers: must be >= 1, got {args.workers}")
    device = resolve_device(args.device)
    if args.workers > 1 and device.type != "cpu":  # CUDA does not survive a fork
        raise ValueError(f"argument --workers: {args.workers} worker processes need "
                         f"--device cpu (got {args.device}, which is {device})")
    models, meta = load_run(args.model, device)
    smiles_column = args.smiles_column or meta.get("smiles_column", "smiles")
    try:
        counts = predict_csv(models, meta["target_columns"], args.data, args.output,
                             smiles_column, workers=args.workers, worker_init=one_thread)
    except BrokenProcessPool:
        print(f"setattn predict: error: a --workers process died (killed, or out of memory); "
              f"{args.output} was not written", file=sys.stderr)
        return 1
    print(f"wrote {counts['rows']} rows to {args.output} ({len(models)} model(s); "
          f"{counts['errors']} invalid SMILES with empty predictions)")
    return 0
