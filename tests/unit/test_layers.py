"""The package's import arrows point one way (ARCHITECTURE.md): engine <- nn <-
domains, chem <- datasets, viz, explain <- molprop <- serve <- cli. A module may import its own
layer or lower ones, never a higher one (function-level imports included)."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "setattn"

# the lowest layer first; a module belongs to the first prefix that matches it
LAYERS = [
    ("setattn.topology", "setattn.scores", "setattn.capture", "setattn.files",
     "setattn.matmul", "setattn.attention_graph", "setattn.wording"),
    ("setattn.engine",),
    ("setattn.nn",),
    ("setattn.domains", "setattn.chem"),  # chem: the molecule descriptors mol_to_data reads
    ("setattn.datasets", "setattn.viz", "setattn.explain"),
    ("setattn.molprop",),
    ("setattn.serve",),  # the web server: over molprop, started by the command line
    ("setattn.cli",),
    ("setattn",),  # the package root
]


def _layer(module: str) -> int:
    for level, prefixes in enumerate(LAYERS):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return level
    raise AssertionError(f"{module} is in no layer: add it to LAYERS")


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module == "setattn" and node.level == 0:
            names.update(f"setattn.{alias.name}" for alias in node.names)  # a submodule
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return {n for n in names if n == "setattn" or n.startswith("setattn.")}


def test_no_module_imports_a_higher_layer():
    upward = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = _module_name(path)
        for target in _imports(path):
            if _layer(target) > _layer(module):
                upward.append(f"{module} imports {target}")
    assert upward == []


def test_the_check_sees_an_upward_import(tmp_path):
    bad = tmp_path / "setattn_engine_bad.py"
    bad.write_text("def f():\n    from setattn.molprop import fit\n")
    assert _imports(bad) == {"setattn.molprop"}
    assert _layer("setattn.molprop") > _layer("setattn.engine.attend")
