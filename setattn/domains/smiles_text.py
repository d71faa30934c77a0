"""A SMILES string's text, checked before RDKit reads it.

RDKit silently drops one trailing foreign or control character (``C\U0001F600``,
``CCO\x00`` and ``CCO`` followed by a zero-width space all read as the molecule before
it), raises ``UnicodeEncodeError`` on a lone surrogate, and reads a 2 MB SMILES whole
(seconds, a gigabyte) before any size limit can look at it. ``check_smiles_text``
refuses such text with an ``InvalidSmilesError`` naming the character by its code
point, or a ``MoleculeSkippedError`` naming the length, before any RDKit call.
``parse_failure_reason`` says why RDKit refused a SMILES it read.
"""

from __future__ import annotations

import unicodedata

from rdkit import Chem, rdBase

from setattn.domains.errors import InvalidSmilesError, MoleculeSkippedError

__all__ = ["CHARS_PER_HEAVY_ATOM", "LIMIT_NAMES", "check_smiles_text", "parse_failure_reason"]


CHARS_PER_HEAVY_ATOM = 20
"""The most characters a SMILES may hold per heavy atom of the size limit: longer ones
are refused unread (``check_smiles_text``). The bundled data sets need at most 8 (a
one-atom ion such as ``[NH4+]``); a SMILES over the limit's length cannot be a molecule
within it, and reading a 2 MB one takes RDKit seconds and a gigabyte."""

LIMIT_NAMES = "max_heavy_atoms; on the command line --max-heavy-atoms"
"""How messages name the size limit, for Python and command-line readers alike."""

_UNSEEN = {"Cc": "a control character", "Cf": "an invisible format character",
           "Cn": "an unassigned code point", "Co": "a private-use character",
           "Cs": "a lone surrogate, not a character"}
"""Unicode categories of characters RDKit drops or ignores, by what they are."""


def _character_reason(text: str) -> str | None:
    """Why ``text`` holds a character RDKit would not read as written (None: it holds
    none): SMILES are printable ASCII, and RDKit silently drops one trailing foreign or
    control character (``C\U0001F600`` reads as methane), so the first character that is
    neither printable ASCII nor whitespace is named by its code point."""
    if text.isascii() and text.isprintable():
        return None
    for position, char in enumerate(text, 1):
        if char.isascii() and (char.isprintable() or char.isspace()):
            continue
        category = unicodedata.category(char)
        what = _UNSEEN.get(category) or (f"{unicodedata.name(char, 'a character')}, not an "
                                         f"ASCII character")
        return (f"character U+{ord(char):04X} ({what}) at position {position}: SMILES are "
                f"printable ASCII, and RDKit would drop or misread it")
    return None


def check_smiles_text(smiles: str, *, row: int | None = None, source: str | None = None,
                      max_heavy_atoms: int | None = None) -> None:
    """Refuse, before RDKit reads it, a SMILES RDKit would read otherwise than written or
    that is too long for the size limit.

    Args:
        smiles: the SMILES string.
        row, source: the file row and name it came from, carried into the error.
        max_heavy_atoms: the size limit; a SMILES of more than ``CHARS_PER_HEAVY_ATOM``
            characters per heavy atom of it is refused without being read.

    Raises:
        InvalidSmilesError: naming the first character that is neither printable ASCII
            nor whitespace (control, format, unassigned, private-use or foreign
            characters, NUL, a lone surrogate) by its code point, e.g. "U+0000";
            ``MoleculeSkippedError`` for a SMILES over the length limit.
    """
    if max_heavy_atoms is not None and len(smiles) > CHARS_PER_HEAVY_ATOM * max_heavy_atoms:
        raise MoleculeSkippedError(
            smiles, f"{len(smiles):,} characters, more than a molecule within the limit of "
            f"{max_heavy_atoms} heavy atoms ({LIMIT_NAMES}) needs "
            f"({CHARS_PER_HEAVY_ATOM} per atom); not read", row=row, source=source)
    reason = _character_reason(smiles)
    if reason is not None:
        raise InvalidSmilesError(smiles, reason, row=row, source=source)


def parse_failure_reason(smiles: str) -> str:
    """Explain why RDKit rejected ``smiles`` (only called on the slow error path)."""
    with rdBase.BlockLogs():
        mol = Chem.MolFromSmiles(smiles, sanitize=False)
        if mol is None:
            return "SMILES syntax error"
        try:
            Chem.SanitizeMol(mol)
        except Exception as err:  # RDKit raises several exception types here
            return f"{type(err).__name__}: {str(err).strip()}"
    return "RDKit could not parse it"
