"""Why a molecule was not featurised: an invalid SMILES, or a valid molecule skipped.

Both carry the SMILES, the file row and name it came from, and the reason, so that a
loader can list them and carry on; ``short_smiles`` keeps a 5,000-atom SMILES from
filling a screen.
"""

from __future__ import annotations

__all__ = ["InvalidSmilesError", "MoleculeSkippedError", "short_smiles"]


def short_smiles(smiles: str, limit: int = 60) -> str:
    """``repr(smiles)``, cut in the middle when longer than ``limit`` characters."""
    if len(smiles) <= limit:
        return repr(smiles)
    return f"{smiles[:limit // 2]!r}...{smiles[-10:]!r} ({len(smiles):,} characters)"


class InvalidSmilesError(ValueError):
    """A SMILES string that RDKit cannot turn into a molecule, or an empty one.

    Attributes:
        smiles: the offending string, exactly as given.
        row: the 0-based data row of the file it came from (header excluded), or
            None when it did not come from a file.
        reason: what RDKit (or the empty check) reported.
        source: the file name, or None.
    """

    def __init__(
        self, smiles: str, reason: str, row: int | None = None, source: str | None = None
    ) -> None:
        self.smiles = smiles
        self.row = row
        self.reason = reason
        self.source = source
        where = ""
        if row is not None:
            where = f" in row {row}" + (f" of {source}" if source else "")
        elif source:
            where = f" in {source}"
        super().__init__(self._describe(where))

    def _describe(self, where: str) -> str:
        return f"invalid SMILES {short_smiles(self.smiles)}{where}: {self.reason}"


class MoleculeSkippedError(InvalidSmilesError):
    """A valid molecule left out: more heavy atoms than the size limit, or slower to
    featurise than the time budget. Reported and skipped like an invalid SMILES."""

    def _describe(self, where: str) -> str:
        return f"molecule {short_smiles(self.smiles)}{where} skipped: {self.reason}"
