"""The README's quick starts run as printed, and its results come from the records it names."""

import contextlib
import io
import json
import re
import subprocess
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_engine_example_runs():
    text = README.read_text()
    section = text[text.index("### The engine in ten lines"):]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README.md", "exec"), {})
    assert out.getvalue().splitlines() == ["torch.Size([2, 4]) torch.Size([4, 4])", "True"]


def test_readme_pyg_example_runs():
    text = README.read_text()
    section = text[text.index("### setattn layers in a PyG model"):]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README.md", "exec"), {})
    assert out.getvalue().splitlines() == ["True (8, 2)"]


def _results_parts() -> list[str]:
    """The README's results paragraphs, each with its table."""
    text = README.read_text()
    section = text[text.index("## Results"):text.index("## Learn more")]
    return section.split("\n\n**")[1:]


def _results_blocks() -> list[tuple[list[str], str]]:
    """The README's results tables, each with the records its paragraph names."""
    blocks = []
    for part in _results_parts():
        records = re.findall(r"benchmarks/results/(\w+)\.json", part)
        table = "\n".join(line for line in part.splitlines() if line.startswith("|"))
        blocks.append((records, table))
    return blocks


def test_readme_results_come_from_the_records_they_name():
    blocks = _results_blocks()
    assert len(blocks) == 4 and all(records and table for records, table in blocks)
    root = README.parent / "benchmarks" / "results"
    for records, table in blocks:
        cells = set()
        for name in records:
            record = json.loads((root / f"{name}.json").read_text())
            cells |= {str(cell) for t in record["tables"] for row in t["rows"] for cell in row}
        numbers = re.findall(r"-?\d+\.\d+x?(?: \+- \d+\.\d+)?", table)
        assert numbers, table
        missing = [n for n in numbers if not any(n in cell for cell in cells)]
        assert missing == [], f"README numbers not in {records}: {missing}"


MARKS = {"current": "current)", "earlier": "made with an earlier library)"}


def test_readme_marks_each_record_current_or_earlier_as_git_says(monkeypatch):
    """Each results paragraph says whether its records were made with today's library
    (the code their benchmark exercises unchanged since they ran, ``record.currency``
    from the git tree hashes) or an earlier one, and says it right."""
    root = README.parent
    if subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"],
                      capture_output=True).returncode != 0:
        pytest.skip("not a git checkout: the records' currency cannot be computed")
    monkeypatch.syspath_prepend(str(root / "benchmarks"))
    from helpers import record
    for part in _results_parts():
        head = part.split("\n|", 1)[0]
        names = re.findall(r"benchmarks/results/(\w+)\.json", head)
        statuses = {record.currency(json.loads(
            (root / "benchmarks" / "results" / f"{n}.json").read_text())) for n in names}
        assert "unknown" not in statuses, (names, statuses)
        want = MARKS["earlier"] if "earlier" in statuses else MARKS["current"]
        other = MARKS["current"] if want == MARKS["earlier"] else MARKS["earlier"]
        assert want in head and other not in head, f"{names} are {statuses}: mark {want!r}"
