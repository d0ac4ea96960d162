"""The import graph of ``cpplan/`` (static: every ``import`` anywhere in a file, ``TYPE_CHECKING`` blocks
and function-level imports included): no cycle between files, none between packages, and no two
modules with one file name. ``python tests/test_architecture.py`` prints what it finds."""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parents[1]


def module_files(root: Path, package: str = "cpplan") -> dict[str, Path]:
    """Every module under ``root/package`` by dotted name (a package by its own name)."""
    found = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def imported_names(module: str, path: Path) -> set[str]:
    """Dotted names ``path`` imports (``from a import b`` gives ``a`` and ``a.b``; relative imports
    resolved against ``module``)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            names.add(source)
            names.update(f"{source}.{alias.name}" for alias in node.names)
    return names


def import_graph(root: Path) -> tuple[nx.DiGraph, dict[str, Path]]:
    """Modules of ``root/cpplan`` and an edge ``a -> b`` for each module ``b`` that ``a`` imports."""
    modules = module_files(root)
    graph = nx.DiGraph()
    graph.add_nodes_from(modules)
    for module, path in modules.items():
        graph.add_edges_from(
            (module, t) for t in imported_names(module, path) if t in modules and t != module
        )
    return graph, modules


def file_cycles(graph: nx.DiGraph, modules: dict[str, Path]) -> list[list[str]]:
    """Cycles between files, leaving out imports of a package's ``__init__`` (its re-exports: a facade
    over the package's modules, not one of them)."""
    files = nx.DiGraph((a, b) for a, b in graph.edges if modules[b].name != "__init__.py")
    return list(nx.simple_cycles(files))


def package_of(module: str) -> str:
    """A module's package under ``cpplan`` (``cpplan.plans.plan`` -> ``cpplan.plans``); top-level modules
    (``cpplan.api``, ``cpplan.errors``, ...) belong to ``cpplan`` itself."""
    return ".".join(module.split(".")[:2])


def package_cycles(graph: nx.DiGraph) -> list[list[str]]:
    """Cycles of any length between the packages under ``cpplan`` (the top-level modules, which every
    package may use and the facade that uses every package, are left out)."""
    packages = nx.DiGraph()
    for a, b in graph.edges:
        pa, pb = package_of(a), package_of(b)
        if pa != pb and "cpplan" not in (pa, pb):
            packages.add_edge(pa, pb)
    return list(nx.simple_cycles(packages))


def shared_file_names(modules: dict[str, Path]) -> dict[str, list[str]]:
    """File names (other than ``__init__.py``) that more than one module has."""
    by_name = defaultdict(list)
    for module, path in modules.items():
        if path.name != "__init__.py":
            by_name[path.name].append(module)
    return {name: found for name, found in by_name.items() if len(found) > 1}


def test_no_import_cycle_between_files():
    """No file of cpplan/ imports, directly or through others, a file that imports it back."""
    graph, modules = import_graph(ROOT)
    assert len(modules) > 100, "the walk found cpplan's modules"
    assert file_cycles(graph, modules) == []


def test_no_import_cycle_between_packages():
    """The packages of cpplan/ form layers: no package reaches itself through the others' imports."""
    graph, _ = import_graph(ROOT)
    assert package_cycles(graph) == []


def test_no_two_modules_share_a_file_name():
    """Every module file name under cpplan/ is unique (so a name alone says which module it is)."""
    _, modules = import_graph(ROOT)
    assert shared_file_names(modules) == {}


def test_the_checks_find_cycles_and_shared_names(tmp_path):
    """On a made-up package with a file cycle (through a function-level and a TYPE_CHECKING import), a
    three-package cycle and two ``util.py`` files, each check reports exactly those."""
    files = {
        "cpplan/__init__.py": "",
        "cpplan/a/__init__.py": "from cpplan.a.one import x\n",
        "cpplan/a/one.py": "def f():\n    from cpplan.a.two import y\n",
        "cpplan/a/two.py": "import typing\nif typing.TYPE_CHECKING:\n    from cpplan.a import one\n",
        "cpplan/a/util.py": "from cpplan.b.util import z\n",
        "cpplan/b/__init__.py": "",
        "cpplan/b/util.py": "from ..c import mod\n",
        "cpplan/c/__init__.py": "",
        "cpplan/c/mod.py": "import cpplan.a.util\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    graph, modules = import_graph(tmp_path)
    assert sorted(map(sorted, file_cycles(graph, modules))) == [
        ["cpplan.a.one", "cpplan.a.two"],
        ["cpplan.a.util", "cpplan.b.util", "cpplan.c.mod"],
    ]
    assert sorted(map(sorted, package_cycles(graph))) == [["cpplan.a", "cpplan.b", "cpplan.c"]]
    assert shared_file_names(modules) == {"util.py": ["cpplan.a.util", "cpplan.b.util"]}


if __name__ == "__main__":
    root = Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else ROOT
    graph, modules = import_graph(root)
    print("file cycles:", *(" -> ".join(c) for c in file_cycles(graph, modules)), sep="\n  ")
    print("package cycles:", *(" -> ".join(c) for c in package_cycles(graph)), sep="\n  ")
    print("shared file names:", shared_file_names(modules))
