"""What a molecule CSV left out, and why: rows of invalid or empty SMILES, molecules above
the size or time limit (``setattn.molprop.limits``), and rows of several fragments whose
largest fragment was kept. ``setattn train`` lists them (or, with ``--strict``, refuses
the data) and writes them to ``metrics.json``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from setattn.datasets.molecules import MoleculeNote
from setattn.domains.molecules import InvalidSmilesError, MoleculeSkippedError, short_smiles

__all__ = ["report_failures", "skipped_rows"]

Log = Callable[[str], None]


def skipped_rows(failures: Sequence[InvalidSmilesError]) -> list[dict]:
    """``metrics.json``'s ``skipped_rows``: row, SMILES and reason of each row left out."""
    return [{"row": f.row, "smiles": f.smiles, "reason": f.reason} for f in failures]


def _listing(rows: Sequence[tuple[int, str, str]], quote: bool) -> str:
    """One line per (row, SMILES, reason), at most 50 of them."""
    lines = [f"  row {row}: {short_smiles(smiles) if quote else '(not shown)'}: {why}"
             for row, smiles, why in rows]
    shown = lines if len(lines) <= 50 else [*lines[:50], f"  ... and {len(lines) - 50} more"]
    return "\n".join(shown)


def _kinds(failures: Sequence[InvalidSmilesError]) -> str:
    """"3 invalid or empty SMILES and 1 molecule(s) above the size or time limit"."""
    skipped = sum(isinstance(f, MoleculeSkippedError) for f in failures)
    kinds = [f"{len(failures) - skipped} invalid or empty SMILES" if skipped < len(failures)
             else "", f"{skipped} molecule(s) above the size or time limit" if skipped else ""]
    return " and ".join(k for k in kinds if k)


def report_failures(failures: Sequence[InvalidSmilesError], source: str, strict: bool,
                    log: Log = print, notes: Sequence[MoleculeNote] = (),
                    quote: bool = True) -> None:
    """List the rows left out (invalid or empty SMILES, molecules above the size or time
    limit) and the rows of several fragments (the largest kept); with ``strict`` raise.

    Args:
        quote: show the SMILES (False for a file that is not named like a CSV).

    Raises:
        ValueError: with ``strict`` and at least one failure or note, listing them.
    """
    if strict and (failures or notes):
        found = [_kinds(failures)] if failures else []
        found += [f"{len(notes)} SMILES of several fragments"] if notes else []
        raise ValueError(f"{source}: {' and '.join(found)} (--strict):\n" + _listing(
            [(f.row, f.smiles, f.reason) for f in failures] + list(notes), quote))
    if failures:
        plain = not any(isinstance(f, MoleculeSkippedError) for f in failures)
        kinds = "invalid or empty SMILES" if plain else _kinds(failures)
        log(f"{source}: skipping {len(failures)} row(s) with {kinds} (rows counted from 0, "
            f"header excluded):\n"
            + _listing([(f.row, f.smiles, f.reason) for f in failures], quote))
    if notes:
        log(f"{source}: {len(notes)} row(s) of several fragments (a salt or a mixture): the "
            f"largest fragment of each is the molecule (--strict refuses them):\n"
            + _listing(notes, quote))
