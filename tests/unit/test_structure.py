"""The shape of the package (ARCHITECTURE.md): no import cycle among setattn's modules,
training that reaches nothing of prediction, and no process-global setting (``mallopt``,
``set_num_threads``, ``warnings.filterwarnings``, ``gc.freeze``) outside the command line.
A module is as long as its one idea needs: there is no line quota.

Imports are read from the source, function-level ones included, so a cycle hidden
inside a function still counts. A package's ``__init__`` importing its own children
(to re-export them) is how a package is made, not a cycle. The checks are plain
functions of a folder, tested on a small synthetic package at the end.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "setattn"
PROCESS_GLOBAL = ("mallopt", "set_num_threads", "filterwarnings", "freeze")
"""Calls that change the whole process: only the command line (``<package>/cli``) makes them."""


def module_files(package: Path) -> dict[str, Path]:
    """Every module of ``package`` by its dotted name (a package by its own name)."""
    modules = {}
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package.parent).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def _base(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    """The module a ``from ... import`` reads from, relative imports resolved."""
    if not node.level:
        return node.module or ""
    parts = module.split(".") if is_package else module.split(".")[:-1]
    parts = parts[:len(parts) - node.level + 1]
    return ".".join(parts + ([node.module] if node.module else []))


def imports(path: Path, module: str, known: set[str]) -> set[str]:
    """The modules of ``known`` that the module ``module`` (in ``path``) imports anywhere
    in its source: ``from a import b`` imports ``a.b`` when that is a module, else ``a``."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _base(node, module, path.name == "__init__.py")
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base)
    return {name for name in found if name in known and name != module}


def import_graph(package: Path) -> dict[str, set[str]]:
    """module -> the modules it imports, without a package's edges to its own children."""
    modules = module_files(package)
    known = set(modules)
    return {m: {t for t in imports(path, m, known) if not t.startswith(m + ".")}
            for m, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Import cycles of ``graph``, each as the modules along it (first == last); one per
    edge that closes a cycle in a depth-first walk, so none means there is none."""
    found: list[list[str]] = []
    done: set[str] = set()
    path: list[str] = []

    def visit(module: str) -> None:
        path.append(module)
        for target in sorted(graph.get(module, ())):
            if target in path:
                found.append(path[path.index(target):] + [target])
            elif target not in done:
                visit(target)
        path.pop()
        done.add(module)

    for module in sorted(graph):
        if module not in done:
            visit(module)
    return found


def process_global_calls(package: Path) -> list[str]:
    """``path:line name`` of each use of a ``PROCESS_GLOBAL`` name (an attribute, or a
    name imported) outside ``package/cli``."""
    found = []
    for path in module_files(package).values():
        if path.relative_to(package).parts[0] == "cli":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([node.attr] if isinstance(node, ast.Attribute)
                     else [a.name for a in node.names] if isinstance(node, ast.ImportFrom)
                     else [])
            for name in names:
                if name in PROCESS_GLOBAL:
                    found.append(f"{path.relative_to(package.parent)}:{node.lineno} {name}")
    return found


# ----------------------------------------------------------------------------
# setattn itself
# ----------------------------------------------------------------------------


def test_no_import_cycle():
    graph = import_graph(PACKAGE)
    assert len(graph) > 50 and "setattn.molprop.ensemble" in graph  # the package was read
    assert [" -> ".join(c) for c in cycles(graph)] == []


def test_process_global_settings_only_in_the_command_line():
    assert process_global_calls(PACKAGE) == []


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    """The modules ``start`` imports, directly or through others."""
    seen, todo = set(), [start]
    while todo:
        for target in graph[todo.pop()] - seen:
            seen.add(target)
            todo.append(target)
    return seen


def test_training_imports_nothing_of_prediction():
    graph = import_graph(PACKAGE)
    below = _reachable(graph, "setattn.molprop.loop")
    assert "setattn.molprop.ensemble" in graph["setattn.molprop.loop"]
    assert below.isdisjoint({f"setattn.molprop.{m}" for m in ("predict", "reports", "explain",
                                                              "api", "run")})


# ----------------------------------------------------------------------------
# The checks on a synthetic package
# ----------------------------------------------------------------------------


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / "pkg" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root / "pkg"


def test_a_cycle_through_a_function_level_import_is_found(tmp_path):
    package = _tree(tmp_path, {
        "__init__.py": "from pkg.a import f\n",  # re-exports a child: no cycle
        "a.py": "from pkg import b\n\ndef f():\n    return b.g()\n",
        "b.py": "def g():\n    from pkg.sub.c import h\n    return h()\n",
        "sub/__init__.py": "",
        "sub/c.py": "from .. import a\n\ndef h():\n    return 1\n",  # relative: pkg.a
    })
    graph = import_graph(package)
    assert graph["pkg"] == set() and graph["pkg.a"] == {"pkg.b"}
    assert graph["pkg.b"] == {"pkg.sub.c"} and graph["pkg.sub.c"] == {"pkg.a"}
    assert cycles(graph) == [["pkg.a", "pkg.b", "pkg.sub.c", "pkg.a"]]
    (package / "sub" / "c.py").write_text("def h():\n    return 1\n")
    assert cycles(import_graph(package)) == []


def test_an_init_importing_outside_its_package_is_an_ordinary_edge(tmp_path):
    package = _tree(tmp_path, {"__init__.py": "", "a.py": "import pkg.sub\n",
                               "sub/__init__.py": "from pkg.sub.c import z\n",
                               "sub/c.py": "z = 3\n"})
    assert cycles(import_graph(package)) == []  # sub -> sub.c: a re-export
    (package / "sub" / "__init__.py").write_text("from pkg.sub.c import z\nfrom pkg import a\n")
    assert cycles(import_graph(package)) == [["pkg.a", "pkg.sub", "pkg.a"]]


def test_process_global_settings_are_found_outside_cli(tmp_path):
    package = _tree(tmp_path, {
        "__init__.py": "",
        "lib.py": "import torch\n\ndef f():\n    torch.set_num_threads(1)\n",
        "quiet.py": "from warnings import filterwarnings\n",
        "cli/__init__.py": "import ctypes\nctypes.CDLL(None).mallopt(-1, 0)\n",
        "clinic.py": "import warnings\nwarnings.filterwarnings('ignore')\n",  # not cli/
    })
    assert sorted(process_global_calls(package)) == [
        "pkg/clinic.py:2 filterwarnings", "pkg/lib.py:4 set_num_threads",
        "pkg/quiet.py:1 filterwarnings"]
