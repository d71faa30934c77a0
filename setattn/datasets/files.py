"""File helpers shared by the loaders: opening, CSV dialects, existence and column checks.

Every loader reports a bad file by naming it: a missing file names the argument, a
missing column lists the columns present, a bad target cell names its row and column,
and an unreadable line (bad encoding, broken quoting, a cell over the CSV module's
limit) names its line.

What ``open_csv`` accepts: gzip-compressed files (recognised by their first bytes,
whatever the name), a UTF-8 or UTF-16 byte-order mark (as Excel writes), comma,
semicolon or tab delimiters (sniffed from the first lines), and any encoding Python
knows when it is named (``encoding="latin-1"``; the command line's ``--encoding``).
Files whose name does not end in a CSV-like suffix (``CSV_SUFFIXES``) are read, but no
message quotes their content (a config naming ``/etc/passwd`` learns nothing of it).
"""

from __future__ import annotations

import codecs
import csv
import gzip
import hashlib
import io
import itertools
import math
import zlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO

__all__ = ["CSV_SUFFIXES", "CsvFile", "ExpandedTooLarge", "PathLike", "as_list",
           "check_columns", "check_encoding", "existing_file", "file_sha256", "open_csv",
           "open_text", "parse_target", "quotable", "read_column"]

PathLike = str | Path

CSV_SUFFIXES = (".csv", ".tsv", ".tab", ".txt", ".smi")
"""Names (before an optional ``.gz``) whose content messages may quote."""

DELIMITERS = ",;\t"
"""The delimiters ``open_csv`` recognises."""

_SNIFF_LINES = 50  # lines the delimiter is sniffed from
_FLOAT32_MAX = 3.4028234663852886e38
_GZIP_MAGIC = b"\x1f\x8b"
_BOMS = ((codecs.BOM_UTF8, "utf-8-sig"), (codecs.BOM_UTF16_LE, "utf-16"),
         (codecs.BOM_UTF16_BE, "utf-16"))
_ENCODING_HINT = ("pass the file's encoding with --encoding (e.g. --encoding latin-1 or "
                  "--encoding cp1252), or save it as UTF-8")
_READ_ERRORS = (csv.Error, UnicodeError, EOFError, zlib.error, gzip.BadGzipFile)


def quotable(path: Path) -> bool:
    """Whether messages may quote the content of ``path``: a CSV-like name."""
    name = path.name.lower().removesuffix(".gz")
    return name.endswith(CSV_SUFFIXES)


def check_encoding(encoding: str | None, argument: str = "--encoding") -> str | None:
    """``encoding`` if Python knows it (None stays None).

    Raises:
        ValueError: naming ``argument`` for an unknown encoding.
    """
    if encoding is None:
        return None
    try:
        codecs.lookup(encoding)
    except LookupError:
        raise ValueError(f"argument {argument}: unknown encoding {encoding!r} (e.g. utf-8, "
                         f"latin-1, cp1252, utf-16)") from None
    return encoding


class ExpandedTooLarge(ValueError):
    """A compressed file that expands past the limit it is read with.

    Attributes:
        limit: the most bytes it may expand to.
    """

    def __init__(self, path: Path, limit: int) -> None:
        super().__init__(f"{path.name}: expands to more than {limit:,} bytes, the limit "
                         f"of what is read")
        self.limit = limit


class _Capped(io.RawIOBase):
    """A stream that raises ``ExpandedTooLarge`` once more than ``limit`` bytes came
    through it (counted as they are read, so the excess is never held)."""

    def __init__(self, stream: IO[bytes], limit: int, path: Path) -> None:
        super().__init__()
        self._stream, self._limit, self._path, self._count = stream, limit, path, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        count = self._stream.readinto(buffer)
        self._count += count
        if self._count > self._limit:
            raise ExpandedTooLarge(self._path, self._limit)
        return count

    def close(self) -> None:
        self._stream.close()
        super().close()


def _binary(path: Path, max_bytes: int | None = None) -> io.BufferedReader:
    """The file's bytes, decompressed when it starts like a gzip file (at most
    ``max_bytes`` of them once decompressed, else ``ExpandedTooLarge``)."""
    raw = open(path, "rb")
    if raw.peek(2)[:2] != _GZIP_MAGIC:
        return raw
    expanded = gzip.GzipFile(fileobj=raw, mode="rb")  # closes raw too
    if max_bytes is not None:
        return io.BufferedReader(_Capped(expanded, max_bytes, path))
    return io.BufferedReader(expanded)


def _text_encoding(head: bytes, encoding: str | None) -> str:
    """The codec to read with: the named one (UTF-8 then drops a BOM), else by BOM."""
    if encoding is not None:
        return "utf-8-sig" if codecs.lookup(encoding).name == "utf-8" else encoding
    for bom, name in _BOMS:
        if head.startswith(bom):
            return name
    return "utf-8-sig"


def open_text(path: Path, encoding: str | None = None,
              max_bytes: int | None = None) -> IO[str]:
    """Open a text file for reading: gzip decompressed (by content), BOM dropped.

    Args:
        path: the file.
        encoding: its encoding; None reads UTF-8, or UTF-16 when the file starts with
            a UTF-16 byte-order mark.
        max_bytes: the most bytes a compressed file may expand to (None: no limit);
            reading past them raises ``ExpandedTooLarge``.
    """
    binary = _binary(path, max_bytes)
    try:
        head = binary.peek(4)[:4]
    except _READ_ERRORS as err:
        binary.close()
        raise ValueError(f"{path.name}: unreadable ({_reason(err)})") from None
    return io.TextIOWrapper(binary, encoding=_text_encoding(head, encoding), newline="")


def _reason(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[0] if text else type(err).__name__


def _bad_line(path: Path, encoding: str | None) -> tuple[int, str]:
    """(line, detail) of the first line of ``path`` its codec cannot decode (slow path,
    only after a decoding error); (0, "") if no single line fails."""
    with _binary(path) as binary:
        head = binary.peek(4)[:4]
        codec = _text_encoding(head, encoding)
        if codecs.lookup(codec).name.startswith("utf-16"):
            return 0, ""  # lines are not byte lines there
        decoder = codecs.getincrementaldecoder(codec)()
        for number, line in enumerate(binary, 1):
            try:
                decoder.decode(line)
            except UnicodeDecodeError as err:
                byte = line[err.start:err.start + 1]
                return number, f"byte 0x{byte.hex()} at position {err.start + 1} of the line"
    return 0, ""


def _read_error(err: BaseException, path: Path, encoding: str | None, line: int) -> ValueError:
    """A one-line ``ValueError`` naming the file and the line for a failed read."""
    if isinstance(err, UnicodeDecodeError):
        number, detail = _bad_line(path, encoding)
        where = f"line {number}: " if number else ""
        name = encoding or "UTF-8"
        return ValueError(f"{path.name}: {where}not valid {name} text ({detail or _reason(err)}"
                          f"); {_ENCODING_HINT}")
    if isinstance(err, csv.Error):
        return ValueError(f"{path.name}: line {line}: unreadable CSV ({_reason(err)})")
    return ValueError(f"{path.name}: unreadable after line {line} (a truncated or damaged "
                      f"file? {_reason(err)})")


def _sniff(lines: Sequence[str]) -> str:
    """The delimiter of a CSV from its first lines: one the header holds (comma when it
    holds none: a single column), the sniffer deciding between several."""
    header = lines[0] if lines else ""
    candidates = [d for d in DELIMITERS if d in header]
    if len(candidates) <= 1:
        return candidates[0] if candidates else ","
    try:
        return csv.Sniffer().sniff("".join(lines), delimiters="".join(candidates)).delimiter
    except csv.Error:
        return max(candidates, key=lambda d: len(next(csv.reader([header], delimiter=d))))


@dataclass
class CsvFile:
    """An open CSV file: its header and an iterator over its data records.

    Attributes:
        path: the file.
        header: the column names of the first line ([] for an empty file).
        delimiter: the sniffed delimiter.
        records: the data records (lists of cells), in order; reading errors are
            raised as one-line ``ValueError`` naming the file and the line.
    """

    path: Path
    header: list[str]
    delimiter: str
    records: Iterator[list[str]]


def _records(reader, path: Path, encoding: str | None) -> Iterator[list[str]]:
    """The header, then the data records; a record with more non-empty cells than the
    header has columns (a delimiter inside an unquoted cell shifts every cell after
    it) is an error naming its line. Empty cells past the header's end are ignored."""
    width = None
    try:
        for record in reader:
            if width is None:
                width = len(record)
            elif len(record) > width and any(c.strip() for c in record[width:]):
                raise ValueError(f"{path.name}: line {reader.line_num}: {len(record)} cells, "
                                 f"but the header has {width} column{'s' * (width != 1)} "
                                 f"(a delimiter inside a cell that is not quoted?)")
            yield record
    except _READ_ERRORS as err:
        raise _read_error(err, path, encoding, reader.line_num) from None


@contextmanager
def open_csv(path: PathLike, encoding: str | None = None, argument: str = "--data",
             max_bytes: int | None = None) -> Iterator[CsvFile]:
    """Open a CSV file with a header line, whatever its everyday dialect.

    Accepts gzip (by content), a UTF-8 or UTF-16 byte-order mark, and comma, semicolon
    or tab delimiters (sniffed from the first ``_SNIFF_LINES`` lines).

    Args:
        path: the file.
        encoding: its text encoding (None: UTF-8, or UTF-16 with its BOM).
        argument: the argument that named it, for a missing file.
        max_bytes: the most bytes a compressed file may expand to (None: no limit).

    Yields:
        A ``CsvFile``.

    Raises:
        FileNotFoundError: if ``path`` is not a file (naming ``argument``).
        ValueError: naming the file and line if it cannot be decoded or parsed;
            ``ExpandedTooLarge`` past ``max_bytes``.
    """
    path = existing_file(path, argument)
    with open_text(path, encoding, max_bytes) as handle:
        try:
            head = list(itertools.islice(handle, _SNIFF_LINES))
        except _READ_ERRORS as err:
            raise _read_error(err, path, encoding, 1) from None
        delimiter = _sniff(head)
        reader = csv.reader(itertools.chain(head, handle), delimiter=delimiter)
        records = _records(reader, path, encoding)
        header = next(records, [])
        yield CsvFile(path, header, delimiter, records)


def existing_file(path: PathLike, argument: str = "path") -> Path:
    """Return ``path`` as a ``Path`` or raise a ``FileNotFoundError`` naming it
    (a directory, a device or a pipe is not a file either)."""
    path = Path(path)
    if path.is_dir():
        raise FileNotFoundError(f"argument {argument}: {str(path)!r} is a directory, not a file")
    if not path.is_file():
        what = "not a regular file" if path.exists() else "no such file"
        raise FileNotFoundError(f"argument {argument}: {what} {str(path)!r}")
    return path


def file_sha256(path: Path) -> str:
    """The SHA-256 of a file's bytes, hex."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def as_list(names: str | Sequence[str]) -> list[str]:
    """Accept one column name or several."""
    return [names] if isinstance(names, str) else list(names)


def check_columns(header: list[str], wanted: list[str], path: Path) -> list[int]:
    """The positions of the ``wanted`` columns in ``header``.

    Raises:
        ValueError: for an empty file, a missing column (listing those present when
            the file may be quoted) or a wanted column that appears more than once.
    """
    if not header:
        raise ValueError(f"{path.name}: empty file (no header line)")
    missing = [name for name in wanted if name not in header]
    if missing:
        present = (f"columns present: {header}" if quotable(path) else
                   f"{len(header)} column(s) present, not shown: the name does not end in "
                   f"{', '.join(CSV_SUFFIXES)} (is it a CSV file?)")
        raise ValueError(f"{path.name}: missing column(s) {missing}; {present}")
    for name in dict.fromkeys(wanted):
        places = [i + 1 for i, column in enumerate(header) if column == name]
        if len(places) > 1:
            raise ValueError(f"{path.name}: column {name!r} appears {len(places)} times in the "
                             f"header (columns {places}); rename or remove the extra one(s)")
    return [header.index(name) for name in wanted]


def parse_target(cell: str | None, path: Path, row: int, column: str) -> float:
    """A numeric label; an empty (or absent) cell, or ``nan``, is a missing label (NaN).

    Raises:
        ValueError: naming the row and column for text that is not a number, and for
            an infinite value or one beyond float32.
    """
    if cell is None or not cell.strip():
        return math.nan
    shown = repr(cell) if quotable(path) else "(not shown)"
    try:
        value = float(cell)
    except ValueError:
        raise ValueError(
            f"{path.name}: row {row}, column {column!r}: target {shown} is not a number"
        ) from None
    if math.isinf(value) or abs(value) > _FLOAT32_MAX:
        raise ValueError(f"{path.name}: row {row}, column {column!r}: target {shown} is not a "
                         f"finite number within float32 (leave the cell empty for a missing "
                         f"label)")
    return value


def read_column(path: PathLike, column: str, encoding: str | None = None) -> list[str]:
    """The cells of one column of a CSV (any dialect ``open_csv`` reads), one per data
    row ("" for an empty or absent cell).

    Raises:
        FileNotFoundError: naming ``path``.
        ValueError: if the column is missing (listing the columns present) or appears
            twice, or the file cannot be read (naming the line).
    """
    with open_csv(path, encoding) as table:
        (col,) = check_columns(table.header, [column], table.path)
        return [record[col] if col < len(record) else "" for record in table.records]
