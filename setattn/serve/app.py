"""The web application of ``setattn serve`` (FastAPI): a page and a JSON API over one
``ModelService``.

- ``GET /``: the page (``setattn.serve.page``).
- ``GET /model``: the model's card.
- ``POST /predict``: ``{"smiles": [...]}`` -> the columns and rows of ``setattn predict``
  for those SMILES (``?format=csv``: the CSV file ``setattn predict`` writes).
- ``POST /predict/csv``: a CSV file as the body (the page's upload) -> the same, for its
  SMILES column (the run's, or ``?smiles_column=``).
- ``POST /explain``: ``{"smiles": [...], "method": ..., "target": ...}`` -> a picture
  (SVG) and each atom's contribution per SMILES.
- ``GET /docs``, ``GET /openapi.json``: the API's description.

A body over ``ServeLimits.max_body_bytes`` (or a compressed one expanding past it) is
refused with 413, more SMILES than the limit with 422, a SMILES too long for the
heavy-atom limit with 422 (unread), each naming the limit; an invalid SMILES (a
character RDKit would drop, a lone surrogate) is an error in its own row, never a
failed request. JSON that is not valid (NaN, Infinity) is a 422 that echoes no input.
A request that outlives its time budget is stopped (422 naming it), one that waits
for a worker past it or finds the queue full gets 503 with ``Retry-After``; a client
that leaves has its work stopped. No request names a file on the server.
"""

from __future__ import annotations

import asyncio
import json
import math
from typing import Any

from fastapi import FastAPI, HTTPException, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response
from pydantic import BaseModel, Field

from setattn.domains.errors import short_smiles
from setattn.domains.smiles_text import CHARS_PER_HEAVY_ATOM
from setattn.files import json_safe
from setattn.molprop.explain import DEFAULT_METHOD
from setattn.serve.body import BodyLimit, csv_smiles
from setattn.serve.page import page_html
from setattn.serve.service import ModelService, csv_text, row_objects
from setattn.serve.workers import BudgetSpent, ClientGone, PoolBusy, Stopping, WorkerDied

__all__ = ["RETRY_AFTER_SECONDS", "create_app"]

RETRY_AFTER_SECONDS = 2
"""The ``Retry-After`` of a 503 (every worker busy and the queue full)."""


class AsciiJSONResponse(JSONResponse):
    """JSON as ASCII (``\\u`` escapes), so that any string a client sent, a lone
    surrogate included, can be echoed; NaN and infinities as null (``json_safe``: a
    card's undefined metric), never invalid JSON."""

    def render(self, content: Any) -> bytes:
        return json.dumps(json_safe(content), ensure_ascii=True, allow_nan=False,
                          separators=(",", ":")).encode("ascii")


def _shown(value: Any) -> Any:
    """An input value as a validation error may echo it: short, and valid JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # "nan", "inf": not JSON numbers
    if isinstance(value, bool | int | float) or value is None:
        return value
    if isinstance(value, str):
        return short_smiles(value, 40)
    return type(value).__name__


def _validation_detail(err: RequestValidationError) -> list[dict]:
    """FastAPI's error list with each input shown short and JSON-safe, and no context
    (it may hold an exception)."""
    detail = []
    for e in err.errors():
        item = {"type": e.get("type"), "loc": list(e.get("loc", ())), "msg": e.get("msg")}
        if "input" in e and e.get("type") != "json_invalid":
            item["input"] = _shown(e["input"])
        detail.append(item)
    return detail


async def _invalid_request(request: Request, err: RequestValidationError) -> JSONResponse:
    return AsciiJSONResponse({"detail": _validation_detail(err)}, status_code=422)


class PredictRequest(BaseModel):
    """SMILES to predict, one molecule each."""

    smiles: list[str] = Field(description="SMILES strings, one per molecule")


class ExplainRequest(BaseModel):
    """SMILES to explain, and how."""

    smiles: list[str] = Field(description="SMILES strings, one per molecule")
    method: str = Field(DEFAULT_METHOD, description="how contributions are measured")
    target: str | None = Field(None, description="the target explained (default: the first)")


def _check_count(count: int, limit: int, what: str, flag: str) -> None:
    """422 naming the limit when a request holds more than ``limit`` molecules."""
    if count > limit:
        raise HTTPException(422, f"{count} SMILES in one {what} request; the limit is {limit} "
                                 f"per request (setattn serve {flag})")


def _check_lengths(smiles: list[str], max_heavy_atoms: int) -> None:
    """422 naming the first SMILES too long for the heavy-atom limit (unread, unechoed)."""
    limit = CHARS_PER_HEAVY_ATOM * max_heavy_atoms
    for k, text in enumerate(smiles):
        if len(text) > limit:
            raise HTTPException(422, f"SMILES {k} has {len(text):,} characters; a molecule "
                                     f"within the limit of {max_heavy_atoms} heavy atoms "
                                     f"(setattn serve --max-heavy-atoms) has at most {limit:,}")


def _busy(detail: str) -> HTTPException:
    return HTTPException(503, detail, headers={"Retry-After": str(RETRY_AFTER_SECONDS)})


async def _work(service: ModelService, request: Request, name: str, args: list) -> Any:
    """``service.call`` with its refusals as HTTP errors."""
    budget = service.limits.budget_seconds
    try:
        return await service.call(name, args, request.is_disconnected)
    except PoolBusy:
        raise _busy(f"every worker is busy and {service.limits.max_waiting} requests wait "
                    f"already (setattn serve --workers, --max-waiting); try again") from None
    except BudgetSpent as err:
        if err.waiting:
            raise _busy(f"no worker was free within the time budget of {budget:g} s "
                        f"(setattn serve --budget-seconds); try again") from None
        raise HTTPException(422, f"the request's work took over its time budget of "
                                 f"{budget:g} s and was stopped (setattn serve "
                                 f"--budget-seconds); send fewer or smaller molecules") \
            from None
    except ClientGone:
        raise HTTPException(499, "the client closed the connection; its work was stopped") \
            from None
    except Stopping:
        raise _busy("the server is stopping; its work was stopped") from None
    except WorkerDied:
        raise _busy("the worker process ended (killed, or out of memory); try again") \
            from None
    except ValueError as err:
        raise HTTPException(422, str(err)) from None


def _table(service: ModelService, columns: list[str], rows: list[list[str]],
           output: str) -> Response:
    """The prediction table as JSON (numbers, counts, interval level) or as CSV."""
    if output == "csv":  # a lone surrogate a client sent is echoed as its escape
        text = csv_text(columns, rows).encode("utf-8", "backslashreplace")
        return Response(text, media_type="text/csv; charset=utf-8",
                        headers={"Content-Disposition": "attachment; filename=predictions.csv"})
    errors = sum(1 for r in rows if r[-1] and not r[-1].startswith("note: "))
    notes = sum(1 for r in rows if r[-1].startswith("note: "))
    calibration = service.meta.get("conformal")
    return AsciiJSONResponse({"columns": columns, "rows": row_objects(columns, rows),
                         "counts": {"rows": len(rows), "errors": errors, "notes": notes},
                         "interval_level": None if calibration is None else calibration.level,
                         "members": len(service.ensemble)})


_FORMAT = Query("json", pattern="^(json|csv)$", description="json, or csv as setattn predict")


def _routes(app: FastAPI, service: ModelService) -> None:
    limits = service.limits

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def page() -> HTMLResponse:
        return HTMLResponse(page_html(service.card, limits, service.methods))

    @app.get("/model", summary="the model's card")
    async def model() -> dict[str, Any]:
        return service.card

    @app.post("/predict", summary="predict a list of SMILES, as setattn predict")
    async def predict(request: Request, body: PredictRequest,
                      format: str = _FORMAT) -> Response:
        _check_count(len(body.smiles), limits.max_molecules, "/predict", "--max-molecules")
        _check_lengths(body.smiles, service.max_heavy_atoms)
        columns, rows = await _work(service, request, "predict", [body.smiles])
        return _table(service, columns, rows, format)

    @app.post("/predict/csv", summary="predict the SMILES column of a CSV file sent as the body")
    async def predict_csv(request: Request, format: str = _FORMAT,
                          smiles_column: str | None = None) -> Response:
        column = smiles_column or service.smiles_column
        smiles = await asyncio.to_thread(csv_smiles, await request.body(), column,
                                         limits.max_molecules, limits.max_body_bytes)
        _check_lengths(smiles, service.max_heavy_atoms)
        columns, rows = await _work(service, request, "predict", [smiles])
        return _table(service, columns, rows, format)

    @app.post("/explain", summary="each atom's contribution, as setattn explain draws it")
    async def explain(request: Request, body: ExplainRequest) -> Response:
        _check_count(len(body.smiles), limits.max_explain, "/explain", "--max-explain")
        _check_lengths(body.smiles, service.max_heavy_atoms)
        try:
            service.check_method(body.method)
            service.check_target(body.target)
        except ValueError as err:
            raise HTTPException(422, str(err)) from None
        explained = await _work(service, request, "explain",
                                [body.smiles, body.method, body.target])
        return AsciiJSONResponse({"method": body.method, "explanations": explained})


def create_app(service: ModelService) -> FastAPI:
    """The application serving ``service``'s model (run it with uvicorn; the caller closes
    ``service`` after the server stops)."""
    app = FastAPI(title=f"setattn serve: {service.card['name']}",
                  description="Predictions, intervals and atom contributions of a setattn "
                              "molecule model; the same columns as `setattn predict`.",
                  default_response_class=AsciiJSONResponse)
    app.add_exception_handler(RequestValidationError, _invalid_request)
    _routes(app, service)
    app.add_middleware(BodyLimit, max_bytes=service.limits.max_body_bytes)
    return app
