"""What ``setattn serve`` does with a request's body before a model sees it: a size
limit (``BodyLimit``, 413 naming it), on the bytes received and, for a body sent with
``Content-Encoding: gzip`` or ``deflate``, on the bytes it expands to, counted while it
streams in (any other encoding is refused with 415); and the SMILES column of an
uploaded CSV (``csv_smiles``, read by the project's one CSV reader: a gzip file is
limited on its expanded size too, and rows are counted as they are read, stopping at
the limit).
"""

from __future__ import annotations

import json
import tempfile
import zlib
from pathlib import Path

from fastapi import HTTPException

from setattn.datasets.files import ExpandedTooLarge, check_columns, open_csv

__all__ = ["UPLOAD_NAME", "BodyLimit", "csv_smiles"]

_ENCODINGS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS,
              "deflate": zlib.MAX_WBITS}
"""The ``Content-Encoding`` values a body may have (besides ``identity``), by zlib's
window bits."""

UPLOAD_NAME = "upload.csv"
"""The name an uploaded CSV goes by in messages (its place on the server is never said)."""


_DRAIN_FACTOR = 16
"""A body declared over the limit is read and dropped before the 413 when it is at most
this many times the limit (so that an ordinary client, which sends the whole body before
it reads, sees the answer); a larger one gets the answer and a closed connection."""


async def _drain(receive) -> None:
    """Read and drop the rest of a request's body."""
    while True:
        message = await receive()
        if message["type"] != "http.request" or not message.get("more_body", False):
            return


class BodyTooLarge(HTTPException):
    """A body longer than the limit (a 413 that names it)."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, _too_large(limit))


def _too_large(limit: int, expanded: bool = False) -> str:
    what = "request body expands to" if expanded else "request body"
    return (f"{what} over the limit of {limit} bytes (setattn serve --max-body-bytes); "
            f"send fewer molecules per request")


class BodyExpandsTooMuch(HTTPException):
    """A compressed body that expands past the limit (413 naming it)."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, _too_large(limit, expanded=True))


class _Inflater:
    """A compressed body expanded as it streams in, never past ``limit`` bytes."""

    def __init__(self, wbits: int, limit: int) -> None:
        self._zlib = zlib.decompressobj(wbits)
        self._limit = limit
        self._count = 0

    def feed(self, data: bytes, last: bool) -> bytes:
        """The expanded bytes of the next piece of the body.

        Raises:
            BodyExpandsTooMuch: past the limit.
            HTTPException: 400 for a body that is not valid or complete in its encoding.
        """
        try:
            out = self._zlib.decompress(data, self._limit - self._count + 1)
        except zlib.error as err:
            raise HTTPException(400, f"the body is not valid in its Content-Encoding "
                                     f"({err})") from None
        self._count += len(out)
        if self._count > self._limit or self._zlib.unconsumed_tail:
            raise BodyExpandsTooMuch(self._limit)
        if last and not self._zlib.eof:
            raise HTTPException(400, "the body ends before its compressed stream does")
        return out


def _encoding(headers: dict) -> str:
    value = headers.get(b"content-encoding", b"identity").decode("latin-1")
    return value.strip().lower()


class BodyLimit:
    """ASGI middleware refusing a body over ``max_bytes`` with 413: at once when its
    Content-Length says so, else as soon as the bytes received pass the limit."""

    def __init__(self, app, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        declared = headers.get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            if int(declared) <= _DRAIN_FACTOR * self.max_bytes:
                await _drain(receive)  # a client still sending would miss the answer
            await self._refuse(send, 413, _too_large(self.max_bytes))
            return
        encoding = _encoding(headers)
        inflater = None
        if encoding in _ENCODINGS:
            inflater = _Inflater(_ENCODINGS[encoding], self.max_bytes)
            scope = {**scope, "headers": [(k, v) for k, v in scope["headers"]
                                          if k not in (b"content-encoding", b"content-length")]}
        elif encoding != "identity":
            await _drain(receive)
            await self._refuse(send, 415, f"Content-Encoding {encoding!r} is not accepted; "
                                          f"send the body as it is, or gzip or deflate it")
            return
        received = 0

        async def limited():
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise BodyTooLarge(self.max_bytes)
                if inflater is not None:
                    last = not message.get("more_body", False)
                    message = {**message, "body": inflater.feed(message.get("body", b""),
                                                                last)}
            return message

        await self.app(scope, limited, send)

    async def _refuse(self, send, status: int, detail: str) -> None:
        body = json.dumps({"detail": detail}).encode()
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(body)).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})


def _column_cells(path: Path, column: str, max_rows: int, max_bytes: int) -> list[str]:
    """The ``column`` cells of the CSV ``path``, counted as they are read.

    Raises:
        HTTPException: 422 past ``max_rows`` data rows, 413 past ``max_bytes`` expanded.
        ValueError, FileNotFoundError: as ``open_csv`` and ``check_columns``.
    """
    cells: list[str] = []
    try:
        with open_csv(path, max_bytes=max_bytes) as table:
            (col,) = check_columns(table.header, [column], table.path)
            for record in table.records:
                if len(cells) == max_rows:
                    raise HTTPException(422, f"more than {max_rows} SMILES in one "
                                             f"/predict/csv request; the limit is {max_rows} "
                                             f"per request (setattn serve --max-molecules)")
                cells.append(record[col] if col < len(record) else "")
    except ExpandedTooLarge as err:
        raise BodyExpandsTooMuch(err.limit) from None
    return cells


def csv_smiles(body: bytes, column: str, max_rows: int, max_bytes: int) -> list[str]:
    """The ``column`` cells of a CSV sent as bytes (any dialect ``setattn predict``
    reads: gzip, BOM, comma, semicolon or tab), one per data row.

    Args:
        max_rows: the most data rows (more: 422, found while reading).
        max_bytes: the most bytes a gzip file may expand to (more: 413).

    Raises:
        HTTPException: 422 naming the column (and the columns present) or the line that
            cannot be read, or the row limit; 413 naming the size limit.
    """
    if not body:
        raise HTTPException(422, "the request has no CSV: send the file's bytes as the body")
    with tempfile.TemporaryDirectory(prefix="setattn-serve-") as folder:
        path = Path(folder) / UPLOAD_NAME
        path.write_bytes(body)
        try:
            return _column_cells(path, column, max_rows, max_bytes)
        except (ValueError, FileNotFoundError) as err:
            message = str(err).replace(str(path), UPLOAD_NAME)
            raise HTTPException(422, message.replace(folder, "")) from None
