"""``setattn serve``: a trained run behind a web page and a JSON API (``setattn.serve``).

The run is loaded once; uvicorn serves the FastAPI application on ``--host`` (this
machine only unless told otherwise) and ``--port`` until Ctrl-C or SIGTERM. The port is
bound before anything is printed, so a port in use is a one-line error (exit status 2).
On Ctrl-C or SIGTERM, requests still running get ``SHUTDOWN_GRACE_SECONDS`` to finish;
then their work is stopped and the command ends. Without the serve extra (FastAPI,
uvicorn) the command says what to install.
"""

from __future__ import annotations

import argparse
import errno
import ipaddress
import socket
from pathlib import Path

from setattn.datasets.files import existing_file

__all__ = ["SHUTDOWN_GRACE_SECONDS", "bind", "cmd_serve"]

SHUTDOWN_GRACE_SECONDS = 2
"""How long ``serve`` waits for running requests after Ctrl-C or SIGTERM before it stops
their work and ends."""


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host``:``port``, as uvicorn would make it.

    Raises:
        ValueError: naming ``--port`` (in use) or ``--host`` (no such address here).
    """
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
    except socket.gaierror as err:
        raise ValueError(f"argument --host: {host} is not an address of this machine "
                         f"({err.strerror})") from None
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
        sock.listen(2048)
    except OSError as err:
        sock.close()
        if err.errno == errno.EADDRINUSE:
            raise ValueError(f"argument --port: {host}:{port} is in use by another program "
                             f"(another setattn serve?); choose another --port") from None
        raise ValueError(f"argument --host: cannot listen on {host}:{port} "
                         f"({err.strerror})") from None
    sock.set_inheritable(True)
    return sock


def _server_class():
    import uvicorn

    class Server(uvicorn.Server):
        """uvicorn's server, which on Ctrl-C or SIGTERM also stops the service's running
        work after the grace time (its requests are answered 503), so that the server
        ends within it whatever the work."""

        def __init__(self, config: uvicorn.Config, service) -> None:
            super().__init__(config)
            self.service = service

        def handle_exit(self, sig: int, frame) -> None:
            self.service.stop_after(SHUTDOWN_GRACE_SECONDS)
            super().handle_exit(sig, frame)

    return Server


def cmd_serve(args: argparse.Namespace) -> int:
    """Serve the run until interrupted. Returns the exit status.

    Args:
        args: the flags of ``setattn.cli.flags.ServeFlags``, in range.
    """
    model = Path(args.model)
    if not model.is_dir():
        existing_file(model, "--model")
    try:
        import uvicorn

        from setattn.serve import ModelService, ServeLimits, create_app
    except ModuleNotFoundError as err:
        raise ValueError(f"setattn serve needs {err.name}: pip install 'setattn[serve]'") \
            from None
    limits = ServeLimits(max_molecules=args.max_molecules, max_explain=args.max_explain,
                         max_body_bytes=args.max_body_bytes, workers=args.workers,
                         budget_seconds=args.budget_seconds, max_waiting=args.max_waiting,
                         max_heavy_atoms=args.max_heavy_atoms)
    sock = bind(args.host, args.port)
    try:
        service = ModelService(model, limits)
    except BaseException:
        sock.close()
        raise
    shown = f"[{args.host}]" if ":" in args.host else args.host
    print(f"serving {model} ({', '.join(service.targets)}; {len(service.ensemble)} model(s)) "
          f"on http://{shown}:{args.port}/ (API description at /docs); Ctrl-C stops it",
          flush=True)
    if not _loopback(args.host):
        print(f"note: --host {args.host} lets other machines reach this server; it has no "
              f"login of its own", flush=True)
    config = uvicorn.Config(create_app(service), log_level="warning",
                            timeout_graceful_shutdown=SHUTDOWN_GRACE_SECONDS + 2)
    try:
        _server_class()(config, service).run(sockets=[sock])
    finally:
        service.close()
        sock.close()
    return 0
