"""``setattn.domains.smiles_text``: text RDKit would read otherwise than written is
refused before RDKit sees it, naming the character's code point; a SMILES too long for
the size limit is refused unread, fast, and echoed short."""

from __future__ import annotations

import time

import pytest
from rdkit import Chem

from setattn.domains.molecules import InvalidSmilesError, MoleculeSkippedError, parse_smiles
from setattn.domains.smiles_text import CHARS_PER_HEAVY_ATOM, check_smiles_text


@pytest.mark.parametrize(("smiles", "point", "what"), [
    ("C\U0001F600", "U+1F600", "GRINNING FACE, not an ASCII character"),
    ("CCO\x00", "U+0000", "a control character"),
    ("CCO\u200b", "U+200B", "an invisible format character"),
    ("C\ue000", "U+E000", "a private-use character"),
    ("CC\u0378", "U+0378", "an unassigned code point"),
    ("\ud800", "U+D800", "a lone surrogate"),
    ("CC\u00e9", "U+00E9", "LATIN SMALL LETTER E WITH ACUTE"),
])
def test_characters_rdkit_drops_are_named_by_code_point(smiles, point, what):
    with pytest.raises(InvalidSmilesError) as caught:
        parse_smiles(smiles, row=4, source="in.csv")
    assert f"character {point} ({what}" in caught.value.reason
    assert "row 4 of in.csv" in str(caught.value)
    str(caught.value).encode("utf-8")  # the message itself can be printed


def test_rdkit_alone_would_read_them_as_another_molecule():
    """Why the check exists: RDKit reads a trailing emoji or NUL as nothing."""
    methane = Chem.MolToSmiles(Chem.MolFromSmiles("C"))
    for smiles in ("C\U0001F600", "C\x00"):
        mol = Chem.MolFromSmiles(smiles)
        assert mol is not None and Chem.MolToSmiles(mol) == methane


def test_plain_smiles_and_surrounding_whitespace_pass():
    for smiles in ("CCO", " c1ccccc1 ", "[NH4+].[Cl-]", "C/C=C\\C", "C[C@@H](O)N"):
        check_smiles_text(smiles, max_heavy_atoms=300)
    assert parse_smiles("\tCCO\n").GetNumAtoms() == 3


def test_a_smiles_too_long_for_the_limit_is_refused_unread_and_echoed_short():
    smiles = "C" * 2_000_000
    started = time.perf_counter()
    with pytest.raises(MoleculeSkippedError) as caught:
        parse_smiles(smiles, max_heavy_atoms=300)
    assert time.perf_counter() - started < 1.5  # RDKit takes 3.5 s on an idle core
    assert "2,000,000 characters" in caught.value.reason and "not read" in caught.value.reason
    assert len(str(caught.value)) < 400
    check_smiles_text("C" * CHARS_PER_HEAVY_ATOM * 10, max_heavy_atoms=10)  # at the limit
    with pytest.raises(MoleculeSkippedError):
        check_smiles_text("C" * (CHARS_PER_HEAVY_ATOM * 10 + 1), max_heavy_atoms=10)
