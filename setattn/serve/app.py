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

A body over ``ServeLimits.max_body_bytes`` is refused with 413, more SMILES than the
limit with 422, each naming the limit; an invalid SMILES is an error in its own row,
never a failed request. No request names a file on the server.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response
from pydantic import BaseModel, Field

from setattn.molprop.explain import DEFAULT_METHOD
from setattn.serve.body import BodyLimit, csv_smiles
from setattn.serve.page import page_html
from setattn.serve.service import ModelService, csv_text, row_objects

__all__ = ["create_app"]


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


def _table(service: ModelService, columns: list[str], rows: list[list[str]],
           output: str) -> Response:
    """The prediction table as JSON (numbers, counts, interval level) or as CSV."""
    if output == "csv":
        return Response(csv_text(columns, rows), media_type="text/csv; charset=utf-8",
                        headers={"Content-Disposition": "attachment; filename=predictions.csv"})
    errors = sum(1 for r in rows if r[-1] and not r[-1].startswith("note: "))
    notes = sum(1 for r in rows if r[-1].startswith("note: "))
    calibration = service.meta.get("conformal")
    return JSONResponse({"columns": columns, "rows": row_objects(columns, rows),
                         "counts": {"rows": len(rows), "errors": errors, "notes": notes},
                         "interval_level": None if calibration is None else calibration.level,
                         "members": len(service.ensemble)})


_FORMAT = Query("json", pattern="^(json|csv)$", description="json, or csv as setattn predict")


def _routes(app: FastAPI, service: ModelService) -> None:
    limits = service.limits

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def page() -> HTMLResponse:
        return HTMLResponse(page_html(service.card, limits))

    @app.get("/model", summary="the model's card")
    async def model() -> dict[str, Any]:
        return service.card

    @app.post("/predict", summary="predict a list of SMILES, as setattn predict")
    async def predict(body: PredictRequest, format: str = _FORMAT) -> Response:
        _check_count(len(body.smiles), limits.max_molecules, "/predict", "--max-molecules")
        columns, rows = await service.run(service.predict, body.smiles)
        return _table(service, columns, rows, format)

    @app.post("/predict/csv", summary="predict the SMILES column of a CSV file sent as the body")
    async def predict_csv(request: Request, format: str = _FORMAT,
                          smiles_column: str | None = None) -> Response:
        column = smiles_column or service.smiles_column
        smiles = await service.run(csv_smiles, await request.body(), column)
        _check_count(len(smiles), limits.max_molecules, "/predict/csv", "--max-molecules")
        columns, rows = await service.run(service.predict, smiles)
        return _table(service, columns, rows, format)

    @app.post("/explain", summary="each atom's contribution, as setattn explain draws it")
    async def explain(body: ExplainRequest) -> dict[str, Any]:
        _check_count(len(body.smiles), limits.max_explain, "/explain", "--max-explain")
        try:
            service.check_target(body.target)
            explained = await service.run(service.explain, body.smiles, body.method,
                                          body.target)
        except ValueError as err:
            raise HTTPException(422, str(err)) from None
        return {"method": body.method, "explanations": explained}


def create_app(service: ModelService) -> FastAPI:
    """The application serving ``service``'s model (run it with uvicorn; the caller closes
    ``service`` after the server stops)."""
    app = FastAPI(title=f"setattn serve: {service.card['name']}",
                  description="Predictions, intervals and atom contributions of a setattn "
                              "molecule model; the same columns as `setattn predict`.")
    _routes(app, service)
    app.add_middleware(BodyLimit, max_bytes=service.limits.max_body_bytes)
    return app
