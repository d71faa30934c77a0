"""What ``setattn serve`` does with a request's body before a model sees it: a size
limit (``BodyLimit``, 413 naming it) and the SMILES column of an uploaded CSV
(``csv_smiles``, read by the project's one CSV reader).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from fastapi import HTTPException

from setattn.datasets.files import read_column

__all__ = ["UPLOAD_NAME", "BodyLimit", "csv_smiles"]

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


def _too_large(limit: int) -> str:
    return (f"request body over the limit of {limit} bytes (setattn serve --max-body-bytes); "
            f"send fewer molecules per request")


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
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            if int(declared) <= _DRAIN_FACTOR * self.max_bytes:
                await _drain(receive)  # a client still sending would miss the answer
            await self._refuse(send)
            return
        received = 0

        async def limited():
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise BodyTooLarge(self.max_bytes)
            return message

        await self.app(scope, limited, send)

    async def _refuse(self, send) -> None:
        body = json.dumps({"detail": _too_large(self.max_bytes)}).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(body)).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})


def csv_smiles(body: bytes, column: str) -> list[str]:
    """The ``column`` cells of a CSV sent as bytes (any dialect ``setattn predict``
    reads: gzip, BOM, comma, semicolon or tab), one per data row.

    Raises:
        HTTPException: 422 naming the column (and the columns present) or the line that
            cannot be read.
    """
    if not body:
        raise HTTPException(422, "the request has no CSV: send the file's bytes as the body")
    with tempfile.TemporaryDirectory(prefix="setattn-serve-") as folder:
        path = Path(folder) / UPLOAD_NAME
        path.write_bytes(body)
        try:
            return read_column(path, column)
        except (ValueError, FileNotFoundError) as err:
            message = str(err).replace(str(path), UPLOAD_NAME)
            raise HTTPException(422, message.replace(folder, "")) from None
