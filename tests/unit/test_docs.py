"""The user guide: every page exists and sits in a toctree; getting_started's Python runs.

The toctrees are read from the .rst sources (no Sphinx build here: ``make docs`` builds
with warnings as errors and is run by CI). The benchmark-record directive is checked on a
record written to a temporary folder.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest

DOCS = Path(__file__).resolve().parents[2] / "docs"
GUIDE = ["getting_started", "molecules", "pretraining", "explanations", "attention_graph",
         "pyg", "examples", "scale", "benchmarks", "defaults"]
REFERENCE = ["engine", "topology", "scores", "nn", "domains", "datasets", "viz", "explain",
             "molprop", "cli"]


def toctree_entries(page: Path) -> list[str]:
    """The documents named by the ``.. toctree::`` directives of one .rst file."""
    entries, inside = [], False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith(".. toctree::"):
            inside = True
        elif inside and line and not line[0].isspace():
            inside = False
        elif inside and line.strip() and not line.strip().startswith(":"):
            entries.append(line.strip())
    return entries


def code_blocks(page: Path, language: str) -> list[str]:
    """The bodies of the ``.. code-block:: language`` directives of one .rst file."""
    blocks, lines = [], page.read_text(encoding="utf-8").splitlines()
    for i, line in enumerate(lines):
        if line.strip() != f".. code-block:: {language}":
            continue
        body = []
        for following in lines[i + 1:]:
            if following and not following[0].isspace():
                break
            body.append(following)
        indent = min(len(b) - len(b.lstrip()) for b in body if b.strip())
        blocks.append("\n".join(b[indent:] for b in body).strip() + "\n")
    return blocks


def test_every_guide_page_exists_and_is_in_the_index_toctree():
    entries = toctree_entries(DOCS / "index.rst")
    for name in GUIDE:
        assert (DOCS / "guide" / f"{name}.rst").is_file(), name
        assert f"guide/{name}" in entries, name
    assert "reference/index" in entries


def test_every_reference_page_exists_and_is_in_the_reference_toctree():
    entries = toctree_entries(DOCS / "reference" / "index.rst")
    for name in REFERENCE:
        assert (DOCS / "reference" / f"{name}.rst").is_file(), name
        assert name in entries, name


def test_cli_reference_is_generated_from_the_parser():
    text = (DOCS / "reference" / "cli.rst").read_text(encoding="utf-8")
    assert ".. argparse::" in text and "setattn.cli.parser" in text


def test_pictures_the_guide_shows_exist_and_are_small():
    for page in (DOCS / "guide").glob("*.rst"):
        text = page.read_text(encoding="utf-8")
        for target in re.findall(r"^\.\. (?:figure|image):: (\S+)", text, flags=re.M):
            picture = page.parent / target
            assert picture.is_file(), f"{page.name}: {target}"
            assert picture.stat().st_size < 200_000, f"{page.name}: {target}"


def test_getting_started_python_blocks_run(tmp_path, monkeypatch):
    blocks = code_blocks(DOCS / "guide" / "getting_started.rst", "python")
    assert len(blocks) >= 3
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    for block in blocks:  # one namespace: later blocks use earlier names, as a reader does
        exec(compile(block, "getting_started.rst", "exec"), namespace)
    assert namespace["out"].shape == (23, 4, 16)
    assert namespace["pred"].shape == (3, 1)
    assert np.isnan(namespace["pred"][:, 0]).tolist() == [False, False, True]  # 'C1CC'


@pytest.fixture
def records_module(monkeypatch):
    monkeypatch.syspath_prepend(str(DOCS / "_ext"))
    import records

    yield records
    sys.modules.pop("records", None)


def test_record_renders_its_title_command_provenance_and_tables(tmp_path, records_module):
    record = {"benchmark": "demo", "title": "A title", "command": "python bench.py",
              "commit": "0123456789abcdef", "dirty": True, "date": "2026-01-01T00:00:00Z",
              "machine": {"cpu": "CPU X", "cores": 2, "torch": "2.13.0", "load": 1.5},
              "threads": 1, "summary": "It is fast.",
              "tables": [{"title": "T", "columns": ["a", "b"], "rows": [["1", "*2*"]]}],
              "raw": {}}
    path = tmp_path / "demo.json"
    path.write_text(json.dumps(record), encoding="utf-8")
    section = records_module.record_section(records_module.load_record(path), "demo.json")
    text = section.astext()
    for expected in ("A title", "It is fast.", "python bench.py", "commit 0123456789",
                     "uncommitted", "CPU X", "2 cores", "torch 2.13.0", "load average 1.5",
                     "1 thread per process", "*2*"):
        assert expected in text, expected
    assert len(list(section.findall(records_module.nodes.row))) == 2  # header + 1 row


def test_an_earlier_record_is_marked_and_a_current_one_is_not(records_module):
    record = {"benchmark": "engine", "title": "T", "command": "c", "commit": "abcdef0123456",
              "date": "d", "machine": {}, "threads": 1, "summary": "s", "tables": []}
    earlier = records_module.record_section(record, "engine.json", "earlier").astext()
    assert "earlier record" in earlier and "since commit abcdef0123" in earlier
    for status in ("current", "unknown"):
        assert "earlier record" not in records_module.record_section(
            record, "engine.json", status).astext()
    assert records_module.currency({**record, "commit": "0" * 40}) == "unknown"


def test_missing_or_incomplete_record_is_an_error_naming_the_file(tmp_path, records_module):
    from sphinx.errors import ExtensionError

    with pytest.raises(ExtensionError, match="nothere.json"):
        records_module.load_record(tmp_path / "nothere.json")
    path = tmp_path / "partial.json"
    path.write_text(json.dumps({"benchmark": "partial", "title": "x"}), encoding="utf-8")
    with pytest.raises(ExtensionError, match=r"partial\.json lacks command"):
        records_module.load_record(path)
