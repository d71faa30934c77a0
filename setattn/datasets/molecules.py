"""Molecules with their targets from a CSV (SMILES column) or an SD file.

- ``load_molecule_csv(path, smiles_column, target_columns)``: one ``Data`` per
  parsable molecule, missing labels as NaN, plus the rows that failed and why.
- ``load_molecule_sdf(path, target_properties)``: the same for an SD file.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, NamedTuple

import torch
from rdkit import Chem, rdBase
from torch_geometric.data import Data

from setattn.datasets.files import (
    PathLike,
    as_list,
    check_columns,
    existing_file,
    open_csv,
    parse_target,
)
from setattn.domains.molecules import InvalidSmilesError, fragment_note, mol_to_data

__all__ = ["MoleculeNote", "MoleculeSet", "MoleculeTable", "load_molecule_csv", "load_molecule_sdf",
           "read_molecule_table"]


class MoleculeNote(NamedTuple):
    """A row featurised with a remark, e.g. a salt of which the largest fragment was kept.

    Attributes:
        row: the 0-based data row (header excluded).
        smiles: its SMILES.
        note: the remark (``fragment_note``).
    """

    row: int
    smiles: str
    note: str


class MoleculeSet(NamedTuple):
    """Molecules read from a file.

    Attributes:
        data: one ``Data`` per parsed molecule (see ``mol_to_data``), with
            ``y`` (1, T) float32 targets (NaN where the label is missing) and
            ``row`` the 0-based data row of the file (header excluded).
        failures: one ``InvalidSmilesError`` per row that could not be parsed,
            each carrying ``.row``, ``.smiles`` and ``.reason``.
        target_columns: the T target names, in the order of ``y``'s columns.
        notes: one ``MoleculeNote`` per parsed row of several fragments (the largest
            was kept), in row order.
    """

    data: list[Data]
    failures: list[InvalidSmilesError]
    target_columns: list[str]
    notes: Sequence[MoleculeNote] = ()


class MoleculeTable(NamedTuple):
    """The raw columns of a molecule CSV, before any SMILES is parsed.

    Attributes:
        path: the file.
        smiles: R SMILES strings, one per data row ("" for an empty cell).
        y: (R, T) float32 targets, NaN where a cell is empty.
        target_columns: the T target names.
    """

    path: Path
    smiles: list[str]
    y: torch.Tensor
    target_columns: list[str]


def read_molecule_table(path: PathLike, smiles_column: str,
                        target_columns: str | Sequence[str],
                        encoding: str | None = None) -> MoleculeTable:
    """Read the SMILES and target columns of a molecule CSV: the one CSV reader of
    molecule files (``load_molecule_csv``, the trainer's ``featurize_csv`` and, record
    by record, ``predict_csv`` use ``open_csv``'s dialect handling).

    Args:
        path: the CSV file with a header line: comma, semicolon or tab delimited,
            optionally gzip-compressed and with a byte-order mark (see ``open_csv``).
        smiles_column: the name of the SMILES column.
        target_columns: the name(s) of the numeric target column(s).
        encoding: the file's text encoding (None: UTF-8, or UTF-16 with its BOM).

    Raises:
        FileNotFoundError: if ``path`` does not exist.
        ValueError: if a column is missing (listing the columns present) or appears
            twice, a target cell is not a finite number (naming its row and column), or
            a line cannot be decoded or parsed (naming it).
    """
    targets = as_list(target_columns)
    smiles, ys = [], []
    with open_csv(path, encoding) as table:
        path = table.path
        smiles_at, *target_at = check_columns(table.header, [smiles_column, *targets], path)
        for row, record in enumerate(table.records):
            smiles.append(_cell(record, smiles_at))
            ys.append([parse_target(_cell(record, i), path, row, name)
                       for i, name in zip(target_at, targets)])
    y = torch.tensor(ys, dtype=torch.float32).reshape(len(ys), len(targets))  # (R, T)
    return MoleculeTable(path, smiles, y, targets)


def _cell(record: list[str], index: int) -> str:
    """The cell at ``index``; "" for a short record."""
    return record[index] if index < len(record) else ""


def load_molecule_csv(
    path: PathLike,
    smiles_column: str,
    target_columns: str | Sequence[str],
    *,
    graph: Literal["bonds", "complete"] = "bonds",
    largest_fragment: bool = True,
    encoding: str | None = None,
) -> MoleculeSet:
    """Read molecules and their targets from a CSV file with a header line.

    Rows whose SMILES is empty or unparsable do not stop the load: they are
    returned in ``failures`` with their row and reason, so that you can report
    or fix them.

    Args:
        path: the CSV file (any dialect ``open_csv`` reads).
        smiles_column: the name of the SMILES column.
        target_columns: the name(s) of the numeric target column(s); empty cells
            are missing labels and become NaN.
        graph: ``"bonds"`` or ``"complete"``, passed to ``mol_to_data``.
        largest_fragment: keep only the largest fragment of each molecule.
        encoding: the file's text encoding (None: UTF-8, or UTF-16 with its BOM).

    Returns:
        A ``MoleculeSet`` (data, failures, target_columns); each ``Data`` has
        ``y`` of shape (1, T) and ``row``, its 0-based data row.

    Raises:
        FileNotFoundError: if ``path`` does not exist.
        ValueError: if a column is missing (the message lists the columns
            present) or a target cell is not a number (naming row and column).
    """
    table = read_molecule_table(path, smiles_column, target_columns, encoding)
    data_list: list[Data] = []
    failures: list[InvalidSmilesError] = []
    notes: list[MoleculeNote] = []
    for row, smiles in enumerate(table.smiles):
        try:
            data = mol_to_data(smiles, graph=graph, largest_fragment=largest_fragment, row=row,
                               source=table.path.name)
        except InvalidSmilesError as err:
            failures.append(err)
            continue
        data.y = table.y[row:row + 1].clone()  # (1, T)
        data.row = row
        data_list.append(data)
        note = fragment_note(smiles) if largest_fragment else ""
        if note:
            notes.append(MoleculeNote(row, smiles, note))
    return MoleculeSet(data_list, failures, table.target_columns, notes)


def load_molecule_sdf(
    path: PathLike,
    target_properties: str | Sequence[str],
    *,
    graph: Literal["bonds", "complete"] = "bonds",
    largest_fragment: bool = True,
) -> MoleculeSet:
    """Read molecules and numeric SD properties from an SD file.

    Args:
        path: the ``.sdf`` file.
        target_properties: the SD property name(s) to use as targets; a record
            without the property has a missing label (NaN).
        graph: ``"bonds"`` or ``"complete"``, passed to ``mol_to_data``.
        largest_fragment: keep only the largest fragment of each molecule.

    Returns:
        A ``MoleculeSet``; ``row`` is the 0-based record index, and a failure's
        ``smiles`` is the record's title line (RDKit gives no SMILES for it).

    Raises:
        FileNotFoundError: if ``path`` does not exist.
        ValueError: if no record has one of the properties (the message lists
            the properties present) or a value is not a number.
    """
    path = existing_file(path)
    targets = as_list(target_properties)
    data_list: list[Data] = []
    failures: list[InvalidSmilesError] = []
    seen_properties: set[str] = set()
    with rdBase.BlockLogs():
        supplier = Chem.SDMolSupplier(str(path))
        for row in range(len(supplier)):
            mol = supplier[row]
            if mol is None:
                title = supplier.GetItemText(row).split("\n", 1)[0].strip()
                failures.append(
                    InvalidSmilesError(title, "RDKit could not read the record", row, path.name)
                )
                continue
            properties = mol.GetPropsAsDict()
            seen_properties.update(properties)
            y = [parse_target(_str_or_none(properties.get(n)), path, row, n) for n in targets]
            data = mol_to_data(mol, graph=graph, largest_fragment=largest_fragment)
            data.y = torch.tensor([y], dtype=torch.float32)  # (1, T)
            data.row = row
            data_list.append(data)
    missing = [name for name in targets if name not in seen_properties]
    if missing and data_list:
        raise ValueError(
            f"{path.name}: missing property(ies) {missing}; properties present: "
            f"{sorted(seen_properties)}"
        )
    return MoleculeSet(data_list, failures, targets)


def _str_or_none(value: Any) -> str | None:
    """SD properties come back typed (int, float, str); targets are parsed from text."""
    return None if value is None else str(value)
