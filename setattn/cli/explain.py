"""``setattn explain``: each atom's contribution to a trained model's prediction.

``--smiles S --output PICTURE`` draws one molecule. ``--data CSV --output DIR`` explains
every row: ``DIR/atoms.csv`` (``row,smiles,atom,symbol,contribution``, one line per
atom of ``Chem.MolFromSmiles(smiles)``), ``DIR/molecules.csv`` (each row's prediction,
baseline and what the contributions mean), the first ``--max-pictures`` pictures and
``DIR/errors.csv`` for rows whose SMILES does not parse (they are skipped, never fatal).
``DIR`` is new, or one that ``explain`` wrote before (its marker ``.setattn-explain``),
or holds no file of those names: nothing of the user's is replaced.
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

from tqdm import tqdm

from setattn.datasets.files import read_column
from setattn.domains.atom_notes import molecule_note
from setattn.domains.molecules import InvalidSmilesError
from setattn.files import check_output_file, check_output_target
from setattn.molprop.checkpoint import load_run, run_file_paths
from setattn.molprop.config import MAX_HEAVY_ATOMS, resolve_device
from setattn.molprop.ensemble import Ensemble
from setattn.molprop.explain import (
    MoleculeExplanation,
    explain_molecule,
    explain_smiles,
    picture_labels,
    prediction_text,
    sum_text,
)
from setattn.viz import draw_atom_contributions
from setattn.wording import counted

__all__ = ["EXPLAIN_MARKER", "check_explain_folder", "cmd_explain"]

TABLE_FILES = ("atoms.csv", "molecules.csv", "errors.csv")
"""The tables ``--data`` writes into the ``--output`` folder (besides pictures)."""

EXPLAIN_MARKER = ".setattn-explain"
"""The marker of a folder ``explain --data`` wrote (written first): its files may be
replaced by the next ``explain`` into it."""


def _explain_writes(name: str) -> bool:
    return name in TABLE_FILES or (name.startswith("row_") and name.endswith(".png"))


def check_explain_folder(out: Path) -> None:
    """``--output`` of ``explain --data``: absent, written by ``explain`` before (its
    marker), or holding no file of the names ``explain`` writes; nothing of the user's
    is replaced.

    Raises:
        ValueError: naming ``--output`` and the files it would replace.
    """
    if not out.is_dir() or (out / EXPLAIN_MARKER).is_file():
        return
    taken = sorted(p.name for p in out.iterdir() if _explain_writes(p.name))
    if taken:
        more = " ..." if len(taken) > 5 else ""
        raise ValueError(f"argument --output: {out} holds {', '.join(taken[:5])}{more}, "
                         f"which explain would replace, and is not a folder explain wrote "
                         f"(no {EXPLAIN_MARKER} in it); choose a new or empty folder")


def _check_folder_targets(out: Path) -> None:
    """Each file of ``out`` that ``explain --data`` would write is a regular file (a FIFO
    would hang the command, a link or device would be written through)."""
    if out.is_dir():
        for entry in sorted(out.iterdir()):
            if _explain_writes(entry.name):
                check_output_target(entry)


def _target(args: argparse.Namespace, targets: list[str]) -> int:
    if args.target is None:
        return 0
    if args.target not in targets:
        raise ValueError(f"argument --target: {args.target!r} is not a target of this model "
                         f"({', '.join(targets)})")
    return targets.index(args.target)


def _draw(e: MoleculeExplanation, target: str, method: str, path: Path) -> None:
    labels = picture_labels(e, target, method)
    draw_atom_contributions(e.smiles, e.attribution.values, path, title=labels.title,
                            unit=labels.unit, centre=labels.centre, limit=labels.limit)


def _explain_one(args: argparse.Namespace, ensemble: Ensemble, target: str, t: int) -> int:
    output = Path(args.output)
    if output.suffix.lower() not in (".png", ".svg"):
        raise ValueError(f"argument --output: {output} must end in .png or .svg")
    e = explain_smiles(ensemble, args.smiles, args.method, t, args.max_heavy_atoms)
    _draw(e, target, args.method, output)
    which = f" (the mean of an ensemble of {len(ensemble)})" if len(ensemble) > 1 else ""
    note = molecule_note(args.smiles)
    which += f" (note: {note})" if note else ""
    print(f"{args.smiles}: predicted {prediction_text(e, target)}{which}; {args.method}: "
          f"{e.attribution.note}; {sum_text(e)}; drawn in {output}")
    return 0


def _rows(path: str, column: str) -> list[tuple[int, str]]:
    """(data row, SMILES) of every row of the CSV (the reader ``train`` uses)."""
    try:
        return list(enumerate(read_column(path, column)))
    except ValueError as err:
        if "missing column" not in str(err):
            raise
        raise ValueError(f"{err}; name the SMILES column with --smiles-column") from None


def _explain_table(args: argparse.Namespace, ensemble: Ensemble, target: str, t: int) -> int:
    out = Path(args.output)
    rows = _rows(args.data, args.smiles_column)
    out.mkdir(parents=True, exist_ok=True)
    (out / EXPLAIN_MARKER).write_text("{\"setattn\": \"explain\"}\n", encoding="utf-8")
    errors, explained = [], 0
    atoms_file, molecules_file, errors_file = (out / name for name in TABLE_FILES)
    with open(atoms_file, "w", newline="") as atoms, \
            open(molecules_file, "w", newline="") as molecules:
        atom_rows, molecule_rows = csv.writer(atoms), csv.writer(molecules)
        atom_rows.writerow(["row", "smiles", "atom", "symbol", "contribution"])
        molecule_rows.writerow(["row", "smiles", "prediction", "baseline", "sum", "delta",
                                "unit", "method", "note"])
        for row, smiles in tqdm(rows, desc="explain", unit="mol"):
            try:
                e = explain_molecule(ensemble, smiles, args.method, t, args.max_heavy_atoms)
            except InvalidSmilesError as err:
                errors.append((row, smiles, err.reason))
                continue
            a = e.attribution
            for k, (symbol, value) in enumerate(zip(e.symbols, a.values.tolist())):
                atom_rows.writerow([row, smiles, k, symbol, f"{value:.6g}"])
            molecule_rows.writerow([row, smiles, f"{a.prediction:.6g}",
                                    "" if a.baseline is None else f"{a.baseline:.6g}",
                                    f"{float(a.values.nansum()):.6g}", f"{a.delta:.6g}",
                                    e.unit, args.method, a.note])
            if explained < args.max_pictures:
                _draw(e, target, args.method, out / f"row_{row}.png")
            explained += 1
    with open(errors_file, "w", newline="") as handle:
        csv.writer(handle).writerows([["row", "smiles", "error"], *errors])
    print(f"explained {counted(explained, 'molecule')} of {args.data} with {args.method} "
          f"({min(explained, args.max_pictures)} pictures); {len(errors)} invalid SMILES in "
          f"{errors_file}; contributions in {atoms_file}")
    return 0


def cmd_explain(args: argparse.Namespace) -> int:
    """Explain one SMILES (a picture) or a CSV (a folder). Returns the exit status.

    Args:
        args: the flags of ``setattn.cli.flags.ExplainFlags``, in range.
    """
    if args.device != "auto" and resolve_device(args.device).type != "cpu":
        raise ValueError(f"argument --device: explanations run on the CPU (got {args.device})")
    inputs = run_file_paths(Path(args.model))
    if args.data is not None:
        inputs["--data"] = Path(args.data)
        if Path(args.output).is_file():
            raise ValueError(f"argument --output: {args.output} is a file; with --data it "
                             f"names a folder")
        for name in TABLE_FILES:  # none may replace an input (the CSV explained, a record)
            check_output_file(Path(args.output) / name, inputs)
        check_explain_folder(Path(args.output))
        _check_folder_targets(Path(args.output))
    else:
        check_output_file(args.output, inputs)  # a trailing "/", a device, FIFO or link
    ensemble, meta = load_run(args.model)
    args.max_heavy_atoms = meta.get("max_heavy_atoms", MAX_HEAVY_ATOMS)
    targets = list(meta["target_columns"])
    t = _target(args, targets)
    if args.smiles is not None:
        return _explain_one(args, ensemble, targets[t], t)
    args.smiles_column = args.smiles_column or meta.get("smiles_column", "smiles")
    return _explain_table(args, ensemble, targets[t], t)
