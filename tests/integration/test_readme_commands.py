"""The README's main command, `make demo`, runs the job it describes and prints the line
the README shows (here with 2 epochs and one model, so that it takes seconds)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
RESULT = re.compile(r"FreeSolv test RMSE (\d+\.\d{3}) kcal/mol \(MAE (\d+\.\d{3}), "
                    r"R2 (-?\d+\.\d{3})\); files in (\S+)/")


def test_readme_names_the_two_commands_and_ci_runs_the_second():
    text = README.read_text()
    block = text[text.index("## Two commands"):]
    commands = re.search(r"```bash\n(.*?)```", block, re.S).group(1).splitlines()
    assert [line.split("#")[0].strip() for line in commands] == ["make demo", "make test"]
    assert "make test" in (ROOT / ".ci" / "run").read_text()
    assert RESULT.search(block), "the README shows the line make demo prints"


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("make") is None or not (ROOT / ".venv" / ".installed").exists(),
                    reason="needs make and the checkout's .venv (make test creates it)")
def test_make_demo_trains_predicts_explains_and_prints_the_result(tmp_path):
    out = tmp_path / "demo"
    # -o: never reinstall .venv from inside the test suite
    done = subprocess.run(
        ["make", "-s", "-o", ".venv/.installed", "demo", f"DEMO={out}",
         "DEMO_FLAGS=--epochs 2 --ensemble-size 1 --kernel-ridge off"],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    last = done.stdout.strip().splitlines()[-1]
    found = RESULT.fullmatch(last)
    assert found, last
    test = json.loads((out / "metrics.json").read_text())["test"]
    assert float(found.group(1)) == pytest.approx(test["rmse"], abs=5e-4)
    assert found.group(4) == str(out)
    rows = (out / "preds.csv").read_text().splitlines()
    assert len(rows) == 643 and rows[0].startswith("smiles,expt")
    assert (out / "explain.png").stat().st_size > 1000
