"""Helpers for the tests of examples/: quick runs in a fresh interpreter, in-process loading."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def quick_run(script: str, out: Path, seed: int, *extra: str) -> tuple[str, str, dict]:
    """Run ``examples/<script> --quick --seed <seed> --out <out> <extra>`` in a new interpreter.

    Checks that it exits with 0 and that ``metrics.json`` records ``--quick`` and the seed.

    Args:
        script: file name in examples/, e.g. ``"sets.py"``.
        out: output directory.
        seed: value of ``--seed``.
        *extra: further command-line arguments.

    Returns:
        The last line of stdout (the result line), all of stderr, and ``metrics.json``.
    """
    run = subprocess.run([sys.executable, str(EXAMPLES / script), "--quick", "--seed", str(seed),
                          "--out", str(out), *extra], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["config"]["quick"] is True and metrics["config"]["seed"] == seed
    return run.stdout.strip().splitlines()[-1], run.stderr, metrics


def load_example(script: str) -> ModuleType:
    """Import ``examples/<script>`` in this process (once; later calls reuse the module).

    The module is registered in ``sys.modules`` before it runs (a dataclass looks its module
    up there) and examples/ is put on ``sys.path`` (the scripts import ``common``).

    Args:
        script: file name in examples/, e.g. ``"sets.py"``.
    """
    name = f"{Path(script).stem}_example"
    if name not in sys.modules:
        if str(EXAMPLES) not in sys.path:
            sys.path.append(str(EXAMPLES))
        spec = importlib.util.spec_from_file_location(name, EXAMPLES / script)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def check_help(capsys: pytest.CaptureFixture, parse: Callable, options: Sequence[str]) -> None:
    """``parse(["--help"])`` exits with 0 and its text names every one of ``options``."""
    with pytest.raises(SystemExit) as exit_info:
        parse(["--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    for option in options:
        assert option in text


def check_pictures(out: Path, names: Sequence[str]) -> None:
    """Every picture is a PNG file of ``out`` with real content (over 10 kB)."""
    for name in names:
        assert name.endswith(".png") and (out / name).stat().st_size > 10_000
