"""The package's layout: its import graph has no cycle, imports inside functions counted."""

import ast
from pathlib import Path

import frost_nb

PACKAGE = Path(frost_nb.__file__).parent


def import_graph(package: Path) -> dict[str, set[str]]:
    """module -> the package's modules it imports, anywhere in the file (top level, inside
    functions, under ``if``); ``from . import x`` and ``from frost_nb.x import y`` included."""
    modules = {p.stem for p in package.glob("*.py")}
    graph = {}
    for path in package.glob("*.py"):
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                if node.level == 1:
                    found |= {node.module.split(".")[0]} if node.module else {a.name for a in node.names}
                elif node.module and node.module.split(".")[0] == package.name:
                    parts = node.module.split(".")
                    found |= {parts[1]} if len(parts) > 1 else {a.name for a in node.names}
            elif isinstance(node, ast.Import):
                found |= {a.name.split(".")[1] for a in node.names
                          if a.name.startswith(package.name + ".") and "." in a.name}
        graph[path.stem] = (found & modules) - {path.stem}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every import cycle, as one path that comes back to its start (depth-first search)."""
    found, state, path = [], {}, []

    def visit(module):
        state[module], path[len(path):] = "open", [module]
        for dep in sorted(graph[module]):
            if state.get(dep) == "open":
                found.append(path[path.index(dep):] + [dep])
            elif dep not in state:
                visit(dep)
        state[module] = "done"
        path.pop()

    for module in sorted(graph):
        if module not in state:
            visit(module)
    return found


def test_the_check_finds_a_cycle_made_by_an_import_inside_a_function(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "low.py").write_text("def f():\n    from .high import g\n    return g\n")
    (package / "high.py").write_text("from .low import f\n\ng = 1\n")
    (package / "other.py").write_text("from pkg.low import f\n")
    graph = import_graph(package)
    assert graph["low"] == {"high"} and graph["other"] == {"low"}
    assert cycles(graph) == [["high", "low", "high"]]


def test_the_package_import_graph_has_no_cycle():
    graph = import_graph(PACKAGE)
    assert graph["runs"] >= {"training", "checkpoint"}  # the graph was read (not an empty walk)
    assert cycles(graph) == [], "import cycles (move the shared code below both modules): " + "; ".join(
        " -> ".join(c) for c in cycles(graph))
