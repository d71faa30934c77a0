"""Packaging: what each install gives.

- The core install (no extras) runs the engine and the layers without RDKit, matplotlib
  or networkx: checked in a subprocess where importing them fails.
- ``[molecules]`` (RDKit, matplotlib) runs ``setattn train / predict / explain`` without
  networkx.
- A wheel built from the repository and installed into a fresh virtual environment (no
  editable install in sight) runs the README's engine snippet and loads a bundled data set
  from the copy the wheel ships.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from molecule_runs import TINY, freesolv_slice

ROOT = Path(__file__).resolve().parents[2]


def readme_engine_code() -> str:
    """The README's "engine in ten lines" block, as ``tests/unit/test_readme.py`` runs it."""
    text = (ROOT / "README.md").read_text()
    section = text[text.index("### The engine in ten lines"):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def blocking(*modules: str) -> str:
    """Python lines that make ``import <module>`` fail, as if it were not installed."""
    return f"import sys\nsys.modules.update(dict.fromkeys({modules!r}))\n"


def python(code: str, *, executable: str = sys.executable, cwd: Path | None = None,
           env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter; by default with this checkout first on the path."""
    if env is None:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    return subprocess.run([executable, "-c", code], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=300)


def test_core_runs_without_rdkit_matplotlib_networkx():
    before_networkx = readme_engine_code().split("print(att.to_networkx()")[0]  # needs networkx
    code = blocking("rdkit", "matplotlib", "networkx") + before_networkx + """
import setattn
print(setattn.nn.GATv2Conv.__name__)
try:
    att.to_networkx()
except ModuleNotFoundError as err:
    print("to_networkx:", err.name)
from setattn.datasets import load_cora
from setattn.domains import Tokenizer
print(load_cora().num_nodes, Tokenizer.__name__)
for statement in ("from setattn.domains import mol_to_data",
                  "from setattn.datasets import load_molecule_csv",
                  "from setattn.viz import draw_atom_weights"):
    try:
        exec(statement)
    except ModuleNotFoundError as err:
        print(err.name, err)
"""
    result = python(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "torch.Size([2, 4]) torch.Size([4, 4])",
        "GATv2Conv",
        "to_networkx: networkx",  # the missing package itself, not a setattn module
        "2708 Tokenizer",  # loaders and builders that need no RDKit still import
        "rdkit setattn.domains.mol_to_data needs RDKit: pip install 'setattn[molecules]'",
        "rdkit setattn.datasets.load_molecule_csv needs RDKit: pip install 'setattn[molecules]'",
        "rdkit setattn.viz.draw_atom_weights needs RDKit: pip install 'setattn[molecules]'",
    ]


def test_plots_run_without_rdkit(tmp_path):
    picture = tmp_path / "alignment.png"
    code = blocking("rdkit") + readme_engine_code() + f"""
from setattn.viz import plot_alignment
plot_alignment(torch.rand(2, 3), ["x", "y"], ["a", "b", "c"], {str(picture)!r})
"""
    result = python(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[1] == "True"  # to_networkx worked without RDKit
    assert picture.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.slow  # trains, predicts and explains in a subprocess: about 10 s
def test_molecule_commands_run_without_networkx(tmp_path):
    data = freesolv_slice(tmp_path / "freesolv.csv", 30)
    run, preds, picture = tmp_path / "run", tmp_path / "preds.csv", tmp_path / "mol.png"
    commands = [
        ["train", "--data", data, "--smiles-column", "smiles", "--target-columns", "expt",
         "--epochs", "1", "--seed", "0", "--output-dir", run, *TINY],
        ["predict", "--model", run, "--data", data, "--output", preds, "--num-threads", "1"],
        ["explain", "--model", run, "--smiles", "CCO", "--output", picture,
         "--num-threads", "1"],
    ]
    code = blocking("networkx") + "from setattn.cli import main\n" + "".join(
        f"assert main({[str(a) for a in argv]!r}) == 0\n" for argv in commands)
    result = python(code)
    assert result.returncode == 0, result.stderr
    assert (run / "curve.png").read_bytes()[:4] == b"\x89PNG"  # matplotlib, no networkx
    assert len(preds.read_text().splitlines()) == 31  # header + one row per input row
    assert picture.read_bytes()[:4] == b"\x89PNG"


def _build_wheel(tmp_path: Path) -> Path:
    """A wheel built from a clean copy of the repository's packaging files."""
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "LICENSE"):
        shutil.copy2(ROOT / name, source / name)
    skip = shutil.ignore_patterns("__pycache__", "*.pyc", "_datasets")
    shutil.copytree(ROOT / "setattn", source / "setattn", ignore=skip)
    shutil.copytree(ROOT / "datasets", source / "datasets", ignore=skip)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "--no-index", "--quiet", "-w", str(tmp_path / "dist"), str(source)],
                   check=True, timeout=300)
    (wheel,) = (tmp_path / "dist").glob("setattn-*.whl")
    return wheel


def _fresh_venv(tmp_path: Path, wheel: Path) -> tuple[Path, Path]:
    """A new virtual environment with the wheel installed (no editable install); its
    dependencies come from this interpreter's site-packages through a ``.pth`` line."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python_exe = venv / "bin" / "python"
    site = Path(subprocess.run(
        [python_exe, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True).stdout.strip())
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--quiet",
                    "--target", str(site), str(wheel)], check=True, timeout=300)
    ours = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (site / "dependencies.pth").write_text("\n".join(sorted(ours)) + "\n")
    return python_exe, site


@pytest.mark.slow  # builds and installs a wheel: about 10 s
def test_wheel_in_a_fresh_venv_runs_the_readme_and_loads_freesolv(tmp_path):
    python_exe, site = _fresh_venv(tmp_path, _build_wheel(tmp_path))
    code = readme_engine_code() + """
from importlib.metadata import metadata
from pathlib import Path

import setattn
from setattn.datasets import DATASETS_DIR, load_freesolv

freesolv = load_freesolv()
print(setattn.__file__)
print(DATASETS_DIR)
print(len(freesolv.data), len(freesolv.failures), freesolv.target_columns)
print(metadata("setattn")["License-Expression"],
      (Path(setattn.__file__).parent / "py.typed").is_file())
from setattn.molprop.shipped import encoder_path
print(encoder_path("default"))  # the shipped encoder, its SHA-256 checked
"""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"OMP_NUM_THREADS": "1"}
    result = python(code, executable=str(python_exe), cwd=elsewhere, env=env)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[:2] == ["torch.Size([2, 4]) torch.Size([4, 4])", "True"]
    assert lines[2] == str(site / "setattn" / "__init__.py")  # the wheel, not this checkout
    assert lines[3] == str(site / "setattn" / "_datasets")  # the copy the wheel ships
    assert lines[4:6] == ["642 0 ['expt']", "MIT True"]
    assert lines[6:] == [str(site / "setattn" / "molprop" / "encoders" / "moses_pieces20.pt")]
