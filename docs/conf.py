"""Sphinx configuration: the user guide and the API reference, built by ``make docs``."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # document this checkout, whatever else is installed
sys.path.insert(0, str(Path(__file__).resolve().parent / "_ext"))  # records.py

import setattn  # noqa: E402

project = "setattn"
author = "The setattn contributors"
copyright = "2026, The setattn contributors"
release = version = setattn.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",  # Google-style Args / Returns / Raises sections
    "sphinx.ext.viewcode",  # a [source] link beside every object
    "sphinxarg.ext",  # the command line, read from setattn.cli.parser.build_parser
    "records",  # .. benchmark-record:: NAME, from benchmarks/results/NAME.json
]
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_ivar = True  # "Attributes:" as fields: no duplicate of dataclass attributes
napoleon_use_rtype = False  # prose "Returns:" lines stay one line, not a "Return type"
autodoc_member_order = "bysource"
autodoc_default_options = {"show-inheritance": True}  # members: per directive
autodoc_typehints = "signature"
default_role = "code"  # `x` in a docstring is code, as in Markdown
smartquotes = False  # keep "--flag" and quotes as written (no en dashes in flags)

exclude_patterns = ["_build", "_ext"]
html_theme = "furo"
html_title = f"setattn {release}"
html_static_path: list[str] = []
