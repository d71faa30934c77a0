"""Sphinx directive ``.. benchmark-record:: NAME``: one benchmark record as a section.

A record is ``benchmarks/results/NAME.json``, written by the benchmark script itself::

    {"benchmark": "engine", "title": "...", "command": "...", "commit": "<sha>",
     "dirty": false, "date": "...", "machine": {"cpu": "...", "cores": 2, ...},
     "threads": 1, "summary": "...",
     "tables": [{"title": "...", "columns": [...], "rows": [[...], ...], "notes": "..."}],
     "raw": {}}

Every cell is a display string. The directive renders the title as a section, the
summary, the command as a code block, one line of provenance (commit, date, machine,
threads), a note where the record is of an earlier library (the code its benchmark
exercises changed since it ran, as ``benchmarks/helpers/record.py``'s ``currency`` computes from
git) and every table. A missing record, or one without a required key, stops the
build with an error naming the file, so a page cannot cite a record that does not exist.

Where the records are: the config value ``benchmark_records_dir`` (default
``benchmarks/results`` of this checkout), or the environment variable
``SETATTN_RECORDS_DIR``, which wins (to try the directive on records of your own).
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
from pathlib import Path
from typing import Any

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.errors import ExtensionError
from sphinx.util.docutils import SphinxDirective

REQUIRED = ("benchmark", "title", "command", "commit", "date", "machine", "threads",
            "summary", "tables")
ENV_DIR = "SETATTN_RECORDS_DIR"


def records_dir(configured: str) -> Path:
    """The folder of the records: ``$SETATTN_RECORDS_DIR`` if set, else ``configured``."""
    return Path(os.environ.get(ENV_DIR) or configured)


def load_record(path: Path) -> dict[str, Any]:
    """Read and check one record.

    Raises:
        ExtensionError: the file is missing, is not JSON, or lacks a required key or a
            table's ``title`` / ``columns`` / ``rows``; the message names the file.
    """
    if not path.is_file():
        raise ExtensionError(f"benchmark record {path} does not exist (run its benchmark)")
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise ExtensionError(f"benchmark record {path} is not JSON: {error}") from error
    missing = [key for key in REQUIRED if key not in record]
    if missing:
        raise ExtensionError(f"benchmark record {path} lacks {', '.join(missing)}")
    for k, table in enumerate(record["tables"]):
        lacking = [key for key in ("title", "columns", "rows") if key not in table]
        if lacking:
            raise ExtensionError(f"benchmark record {path}: table {k} lacks "
                                 f"{', '.join(lacking)}")
    return record


def provenance(record: dict[str, Any], path_label: str) -> str:
    """One line: record file, commit (dirty or not), date, machine, threads."""
    machine = record["machine"]
    parts = [f"{key} {machine[key]}" for key in ("python", "torch", "torch_geometric")
             if key in machine]
    where = ", ".join(
        [str(machine.get("cpu", "unknown CPU")), f"{machine.get('cores', '?')} cores"]
        + parts + ([f"load average {machine['load']}"] if "load" in machine else []))
    commit = str(record["commit"])[:10] + (" (with uncommitted changes)"
                                           if record.get("dirty") else "")
    threads = record["threads"]
    return (f"Record {path_label}: commit {commit}, {record['date']}; {where}; "
            f"{threads} thread{'s' if threads != 1 else ''} per process.")


@functools.cache
def _benchmark_record():
    """``benchmarks/helpers/record.py`` of this checkout, loaded from its file."""
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "helpers" / "record.py"
    spec = importlib.util.spec_from_file_location("_benchmark_record", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def currency(record: dict[str, Any]) -> str:
    """"current", "earlier" or "unknown": whether the library code the record's benchmark
    exercises is still what it ran (computed from git by ``benchmarks/helpers/record.py``)."""
    return _benchmark_record().currency(record)


def earlier_note(record: dict[str, Any]) -> str:
    """The note under an earlier record's provenance."""
    return (f"An earlier record: the library code this benchmark exercises has changed since "
            f"commit {str(record['commit'])[:10]}, so the figures may differ now; rerun the "
            f"command above for current ones.")


def table_node(table: dict[str, Any]) -> nodes.table:
    """A docutils table: a header row of ``columns`` and one row per entry of ``rows``."""
    columns = [str(c) for c in table["columns"]]
    node = nodes.table(classes=["benchmark-table"])
    node += nodes.title(text=str(table["title"]))
    group = nodes.tgroup(cols=len(columns))
    node += group
    group.extend(nodes.colspec(colwidth=1) for _ in columns)
    head, body = nodes.thead(), nodes.tbody()
    head += row_node(columns)
    for cells in table["rows"]:
        body += row_node([str(c) for c in cells])
    group += head
    group += body
    return node


def row_node(cells: list[str]) -> nodes.row:
    """One table row of plain-text cells."""
    row = nodes.row()
    for text in cells:
        entry = nodes.entry()
        entry += nodes.paragraph(text=text)
        row += entry
    return row


def record_section(record: dict[str, Any], path_label: str, status: str = "unknown"
                   ) -> nodes.section:
    """The whole record as a section: title, summary, command, provenance, a note if its
    ``status`` (:func:`currency`) is "earlier", tables."""
    # named by the file, not the benchmark: one benchmark may keep several records
    section = nodes.section(ids=[nodes.make_id(f"record-{path_label.rsplit('/', 1)[-1]}")])
    section += nodes.title(text=str(record["title"]))
    section += nodes.paragraph(text=str(record["summary"]))
    command = nodes.literal_block(text=str(record["command"]), language="bash")
    section += command
    section += nodes.paragraph(text=provenance(record, path_label), classes=["record-meta"])
    if status == "earlier":
        section += nodes.paragraph(text=earlier_note(record), classes=["record-earlier"])
    for table in record["tables"]:
        section += table_node(table)
        if table.get("notes"):
            section += nodes.paragraph(text=str(table["notes"]))
    return section


class BenchmarkRecord(SphinxDirective):
    """``.. benchmark-record:: NAME`` renders ``<records dir>/NAME.json``."""

    required_arguments = 1
    has_content = False

    def run(self) -> list[nodes.Node]:
        name = self.arguments[0]
        folder = records_dir(self.config.benchmark_records_dir)
        path = folder / f"{name}.json"
        record = load_record(path)
        self.env.note_dependency(str(path))
        section = record_section(record, f"benchmarks/results/{name}.json", currency(record))
        self.state.document.note_implicit_target(section, section)
        return [section]


def setup(app: Sphinx) -> dict[str, Any]:
    """Register the directive and its config value."""
    default = Path(app.confdir).parent / "benchmarks" / "results"
    app.add_config_value("benchmark_records_dir", str(default), "env")
    app.add_directive("benchmark-record", BenchmarkRecord)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
