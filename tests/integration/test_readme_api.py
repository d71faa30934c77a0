"""The README's Python API block and examples/molecules_api.py run as printed (with fewer
epochs) and say what they claim."""

from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from example_runs import load_example

from setattn.molprop import MoleculePredictor

README = Path(__file__).resolve().parents[2] / "README.md"


@pytest.fixture(autouse=True)
def _keep_threads():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def _readme_block() -> str:
    text = README.read_text()
    section = text[text.index("### Molecules from Python"):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_readme_python_api_block(tmp_path):
    code = _readme_block()
    assert "epochs=60" in code and '"runs/freesolv-api"' in code
    code = code.replace("epochs=60", "epochs=2").replace('"runs/freesolv-api"',
                                                          repr(str(tmp_path / "saved")))
    out = io.StringIO()
    scope: dict = {}
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README.md", "exec"), scope)
    lines = out.getvalue().splitlines()
    metrics = json.loads((tmp_path / "saved" / "metrics.json").read_text())
    assert lines[0] == f"FreeSolv test RMSE {metrics['test']['rmse']:.3f}"
    assert metrics["molecules"] == 642 and metrics["split"]["test"] == 64
    assert lines[1] == "(2, 1) [(1, 'C1CC', 'SMILES syntax error')]"
    loaded = MoleculePredictor.load(tmp_path / "saved")
    queries = scope["smiles"][:5]
    assert np.array_equal(loaded.predict(queries), scope["model"].predict(queries))


def test_example_prints_the_runs_test_rmse(tmp_path, capsys):
    example = load_example("molecules_api.py")
    model = example.main(["--epochs", "1", "--quiet", "--out", str(tmp_path / "run")])
    lines = capsys.readouterr().out.splitlines()
    test = json.loads((tmp_path / "run" / "metrics.json").read_text())["test"]
    assert lines[-1] == (f"FreeSolv test RMSE {test['rmse']:.3f} kcal/mol (MAE "
                         f"{test['mae']:.3f}, 1 epochs, seed 0)")
    assert lines[2] == "not a molecule: predicted nan kcal/mol"
    assert lines[3] == "query 2 ('not a molecule') was not predicted: SMILES syntax error"
    value = float(lines[0].split("predicted ")[1].split()[0])
    assert value == pytest.approx(float(model.predict(["CCO"])[0, 0]), abs=0.005)
    shown = json.loads(lines[4].split("contributions ")[1].split(" kcal")[0])
    expected = model.explain("c1ccccc1O")  # (7,) phenol's heavy atoms
    assert len(shown) == 7 and shown == pytest.approx(expected.tolist(), abs=5e-4)
