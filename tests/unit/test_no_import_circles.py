"""No import circle anywhere in the package, package `__init__` modules included.

Why beside import-linter's contracts: its `acyclic_siblings` contract compares siblings only, so a package's
`__init__` that imports its own module which imports the package back (`workbench.report` <-> one of its
modules) is a circle it does not count. This check takes every module-level import between any two modules of
`workbench` (grimp's graph, the one import-linter builds; imports under TYPE_CHECKING left out: they never run)
and looks for a cycle of any length.
"""

from __future__ import annotations

import sys

import grimp


def circles(package: str) -> list[list[str]]:
    """The import cycles among `package`'s modules: each one as a closed path of module names (Tarjan's
    strongly connected components, each of more than one module or importing itself)."""
    graph = grimp.build_graph(package, exclude_type_checking_imports=True)
    edges = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(module: str) -> None:  # recursive Tarjan: the package is a few hundred modules deep at most
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for target in edges.get(module, []):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in on_stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == module:
                    break
            if len(component) > 1 or module in edges.get(module, []):
                found.append(sorted(component))

    for module in sorted(edges):
        if module not in index:
            visit(module)
    return found


def test_the_workbench_has_no_import_circle_package_inits_included():
    assert circles("workbench") == []


def test_a_package_init_circle_is_found(tmp_path, monkeypatch):
    """What import-linter's sibling contract misses: pkg/__init__ imports pkg.plots, which imports pkg."""
    package = tmp_path / "circled"
    package.mkdir()
    (package / "__init__.py").write_text("from circled.plots import draw\n")
    (package / "plots.py").write_text("import circled\n\n\ndef draw():\n    return circled\n")
    (package / "apart.py").write_text("import json\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        assert circles("circled") == [["circled", "circled.plots"]]
    finally:
        for name in [m for m in sys.modules if m == "circled" or m.startswith("circled.")]:
            del sys.modules[name]
