"""Helpers for the ``setattn serve`` tests: a tiny run, a server on a free port in a
thread, and plain HTTP calls (the standard library's client, as any user's would be)."""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from molecule_runs import TINY, freesolv_slice

from setattn import cli


def tiny_run(folder: Path) -> Path:
    """A tiny run on 100 FreeSolv molecules (2 members, kernel ridge, 90 % intervals:
    its 10 validation molecules bound them) trained in ``folder``."""
    data = freesolv_slice(folder / "freesolv100.csv", 100)
    run = folder / "run"
    status = cli.main(["train", "--data", str(data), "--target-columns", "expt",
                       "--output-dir", str(run), *TINY, "--ensemble-size", "2",
                       "--epochs", "2", "--seed", "0"])
    assert status == 0
    return run


@contextlib.contextmanager
def serving(run: Path, **limits) -> Iterator[tuple[str, object]]:
    """``(base URL, ModelService)`` of a server of ``run`` on a free loopback port,
    stopped (and its pool closed) on leaving."""
    import uvicorn

    from setattn.serve import ModelService, ServeLimits, create_app

    service = ModelService(run, ServeLimits(**limits))
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(service), log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}", service
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()
        service.close()


def request(url: str, method: str, path: str, body: bytes | None = None,
            content_type: str = "application/json", timeout: float = 120,
            headers: dict[str, str] | None = None) -> tuple[int, str, str]:
    """(status, content type, body text) of one HTTP request to ``url`` + ``path``."""
    status, response_headers, text = exchange(url, method, path, body, content_type,
                                              timeout, headers)
    return status, response_headers.get("content-type", ""), text


def exchange(url: str, method: str, path: str, body: bytes | None = None,
             content_type: str = "application/json", timeout: float = 120,
             headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], str]:
    """(status, response headers by lower-case name, body text) of one HTTP request."""
    host, port = url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=timeout)
    try:
        sent = {"Content-Type": content_type} if body is not None else {}
        connection.request(method, path, body=body, headers={**sent, **(headers or {})})
        response = connection.getresponse()
        return (response.status, {k.lower(): v for k, v in response.getheaders()},
                response.read().decode("utf-8"))
    finally:
        connection.close()


def post_json(url: str, path: str, payload: object) -> tuple[int, object]:
    """(status, decoded JSON, or the text when not JSON) of a JSON POST."""
    status, kind, text = request(url, "POST", path, json.dumps(payload).encode())
    return status, json.loads(text) if "json" in kind else text
