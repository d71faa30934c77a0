"""``setattn embed``: the networks' molecule vectors for a CSV of SMILES, streamed: a
trained run's, or a pretrained encoder's."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tqdm import tqdm

from setattn.cli.predict import run_columns
from setattn.datasets.files import check_encoding, existing_file
from setattn.molprop.checkpoint import run_file_paths
from setattn.molprop.config import resolve_device
from setattn.molprop.predict import embed_csv
from setattn.molprop.pretrain import CORPUS_FILE, LAST_FILE, RECORD_FILE, load_embedding_model
from setattn.wording import counted

__all__ = ["cmd_embed"]


def _model_files(model: Path, meta: dict) -> dict[str, Path]:
    """The files of ``--model`` that the output may not be: a run's, or an encoder and
    the records of its pretraining beside it."""
    if meta.get("kind") != "pretrained":
        return run_file_paths(model)
    encoder = Path(meta["encoder"])
    beside = [encoder.parent / name for name in (RECORD_FILE, LAST_FILE, CORPUS_FILE)]
    return {"--model": encoder, **{f"--model's {f.name}": f for f in beside if f.is_file()}}


def cmd_embed(args: argparse.Namespace) -> int:
    """Write the vectors; print the row counts. Returns the exit status.

    Args:
        args: the flags of ``setattn.cli.flags.EmbedFlags``, in range.
    """
    check_encoding(args.encoding)
    existing_file(args.data, "--data")
    ensemble, meta = load_embedding_model(args.model, resolve_device(args.device))
    smiles_column, max_atoms = run_columns(args, meta)
    with tqdm(desc="embed", unit="mol", file=sys.stderr, disable=None) as bar:
        counts = embed_csv(ensemble, args.data, args.output, smiles_column, args.member,
                           encoding=args.encoding, max_heavy_atoms=max_atoms,
                           protect=_model_files(Path(args.model), meta),
                           progress=lambda rows: bar.update(rows - bar.n))
    members = len(ensemble) if args.member is None else 1
    print(f"wrote {counted(counts['rows'], 'row')} of {counts['width']} numbers to {args.output} "
          f"({members} member(s) x {counts['width'] // members}; {counts['errors']} invalid "
          f"or skipped SMILES with empty cells)")
    return 0
