"""``setattn serve``: a web page and a JSON API over one trained molecule run.

    from setattn.serve import ModelService, ServeLimits, create_app
    app = create_app(ModelService("runs/freesolv", ServeLimits(max_molecules=500)))
    # uvicorn.run(app, host="127.0.0.1", port=8000)

- ``service``: ``ModelService`` (the run loaded once, a bounded pool of threads, the
  same prediction and explanation functions as ``setattn predict`` / ``explain``) and
  ``ServeLimits``.
- ``app``: the FastAPI application: ``/`` (the page), ``/model``, ``/predict``,
  ``/predict/csv``, ``/explain``, ``/docs``.
- ``page``, ``card``, ``body``: the page, the model's card, the body's size limit and
  the upload's reader.

Needs the ``serve`` extra (``pip install 'setattn[serve]'``: FastAPI and uvicorn).
"""

from setattn.serve.app import create_app
from setattn.serve.service import ModelService, ServeLimits

__all__ = ["ModelService", "ServeLimits", "create_app"]
