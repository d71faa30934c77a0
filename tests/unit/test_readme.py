"""The README's quick starts run as printed, and its results come from the records it names."""

import contextlib
import io
import json
import re
from pathlib import Path

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


def _results_blocks() -> list[tuple[list[str], str]]:
    """The README's results tables, each with the records its paragraph names."""
    text = README.read_text()
    section = text[text.index("## Results"):text.index("## Learn more")]
    blocks = []
    for part in section.split("\n\n**")[1:]:
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
