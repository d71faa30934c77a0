"""The README's engine example runs as printed and says what it claims."""

import contextlib
import io
import re
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_engine_example_runs():
    text = README.read_text()
    section = text[text.index("## The engine in a few lines"):]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README.md", "exec"), {})
    lines = out.getvalue().splitlines()
    assert lines[0] == "torch.Size([2, 4]) torch.Size([4, 4])"
    assert lines[1] == "['layers.0', 'layers.1']"
    weights = eval(lines[2])  # a dict of floats printed by the example
    assert set(weights) == {"weight", "head0", "head1"}
    assert abs(weights["weight"] - (weights["head0"] + weights["head1"]) / 2) < 1e-6


def test_readme_pyg_example_runs():
    text = README.read_text()
    section = text[text.index("## Using setattn layers in PyG models"):]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README.md", "exec"), {})
    assert out.getvalue().splitlines() == ["True (8, 2)"]
