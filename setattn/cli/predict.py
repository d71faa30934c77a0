"""``setattn predict``: a CSV of SMILES through a trained run, streamed."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from setattn.cli.process import one_thread
from setattn.datasets.files import check_encoding, existing_file
from setattn.molprop.checkpoint import load_run, run_file_paths
from setattn.molprop.config import MAX_HEAVY_ATOMS, resolve_device
from setattn.molprop.predict import free_cores, predict_csv
from setattn.molprop.workers import WorkerDiedError
from setattn.wording import counted

__all__ = ["cmd_predict", "run_columns"]


def run_columns(args: argparse.Namespace, meta: dict) -> tuple[str, int]:
    """The SMILES column and the heavy-atom limit of a command reading a CSV through a
    run: the flags' where given, else the run's (``load_run``'s ``meta``)."""
    return (args.smiles_column or meta.get("smiles_column", "smiles"),
            args.max_heavy_atoms or meta.get("max_heavy_atoms", MAX_HEAVY_ATOMS))


def cmd_predict(args: argparse.Namespace) -> int:
    """Predict; print the row counts. Returns the exit status.

    Args:
        args: the flags of ``setattn.cli.flags.PredictFlags``, in range.
    """
    check_encoding(args.encoding)
    existing_file(args.data, "--data")
    device = resolve_device(args.device)
    workers = args.workers
    if workers is None:  # CUDA does not survive a fork: one process with a GPU
        workers = free_cores() if device.type == "cpu" else 1
    if workers > 1 and device.type != "cpu":
        raise ValueError(f"argument --workers: {workers} worker processes need "
                         f"--device cpu (got {args.device}, which is {device})")
    ensemble, meta = load_run(args.model, device)
    smiles_column, max_atoms = run_columns(args, meta)
    try:
        counts = predict_csv(ensemble, meta["target_columns"], args.data, args.output,
                             smiles_column, workers=workers, worker_init=one_thread,
                             protect=run_file_paths(Path(args.model)),
                             encoding=args.encoding, max_heavy_atoms=max_atoms,
                             calibration=meta.get("conformal"))
    except WorkerDiedError:
        print(f"setattn predict: error: a --workers process died (killed, or out of memory); "
              f"{args.output} was not written", file=sys.stderr)
        return 1
    notes = f"; {counts['notes']} with a note (salts: the largest fragment)" \
        if counts["notes"] else ""
    print(f"wrote {counted(counts['rows'], 'row')} to {args.output} ({len(ensemble)} model(s); "
          f"{counts['errors']} invalid or skipped SMILES with empty predictions{notes})")
    if meta.get("conformal") is not None:
        print(f"<target>_lower / _upper: {meta['conformal'].level:.0%} prediction intervals, "
              f"calibrated on the run's validation part")
    return 0
