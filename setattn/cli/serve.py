"""``setattn serve``: a trained run behind a web page and a JSON API (``setattn.serve``).

The run is loaded once; uvicorn serves the FastAPI application on ``--host`` (this
machine only unless told otherwise) and ``--port`` until Ctrl-C. Without the serve extra
(FastAPI, uvicorn) the command says what to install.
"""

from __future__ import annotations

import argparse
import ipaddress
from pathlib import Path

from setattn.datasets.files import existing_file

__all__ = ["cmd_serve"]


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


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
                         max_body_bytes=args.max_body_bytes, workers=args.workers)
    service = ModelService(model, limits)
    shown = f"[{args.host}]" if ":" in args.host else args.host
    print(f"serving {model} ({', '.join(service.targets)}; {len(service.ensemble)} model(s)) "
          f"on http://{shown}:{args.port}/ (API description at /docs); Ctrl-C stops it")
    if not _loopback(args.host):
        print(f"note: --host {args.host} lets other machines reach this server; it has no "
              f"login of its own")
    try:
        uvicorn.run(create_app(service), host=args.host, port=args.port, log_level="warning")
    finally:
        service.close()
    return 0
