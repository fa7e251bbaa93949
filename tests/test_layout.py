"""The package's layout: subpackages by concept, imports that only run downward and never in a
circle (imports inside functions counted), and a wheel that carries every module."""

import ast
import subprocess
import sys
import zipfile
from pathlib import Path

import frost_nb

PACKAGE = Path(frost_nb.__file__).parent
# a module may import only from its own layer and the layers below it (docs/architecture.md)
LAYERS = {"paths": 0, "paper": 0, "data": 1, "analysis": 3, "repro": 4, "dfmamba": 4, "notebook": 5, "__main__": 6}
CORE = 2  # the method: the top-level modules not named above


def module_names(package: Path) -> list[str]:
    """Every module of ``package`` as a dotted name inside it ("training", "data.datasets")."""
    parts = (p.relative_to(package).with_suffix("").parts for p in package.rglob("*.py"))
    return sorted(".".join(q[:-1] if q[-1] == "__init__" else q) for q in parts)


def layer(module: str) -> int:
    return LAYERS.get(module.split(".")[0], CORE)


def _imported(node: ast.AST, here: list[str], package: str) -> list[str]:
    """The dotted names (inside the package) that one import statement reaches."""
    if isinstance(node, ast.Import):
        return [a.name.removeprefix(package + ".") for a in node.names if a.name.startswith(package + ".")]
    if not isinstance(node, ast.ImportFrom):
        return []
    if node.level:
        base = here[:len(here) - node.level + 1]
    elif node.module and node.module.split(".")[0] == package:
        base = []
    else:
        return []
    parts = base + (node.module.split(".") if node.module else [])
    if not node.level:
        parts = parts[1:]
    return [".".join(parts + [a.name]) for a in node.names] + [".".join(parts)]


def import_graph(package: Path) -> dict[str, set[str]]:
    """module -> the package's modules it imports, anywhere in the file (top level, inside
    functions, under ``if``); relative and absolute, ``from . import x`` included."""
    modules = set(module_names(package))
    graph = {}
    for name in modules:
        path = package.joinpath(*name.split(".")) if name else package
        path = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
        here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        here = [m for m in here if m]
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            found |= {m for m in _imported(node, here, package.name) if m in modules and m}
        graph[name] = found - {name}
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


def upward(graph: dict[str, set[str]]) -> list[str]:
    """Every import from a lower layer into a higher one ("importer -> imported")."""
    return [f"{a} -> {b}" for a in sorted(graph) for b in sorted(graph[a]) if layer(b) > layer(a)]


def _fabricated(tmp_path: Path) -> Path:
    package = tmp_path / "pkg"
    (package / "analysis").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "analysis" / "__init__.py").write_text("")
    (package / "low.py").write_text("def f():\n    from .high import g\n    return g\n")
    (package / "high.py").write_text("from .low import f\n\ng = 1\n")
    (package / "other.py").write_text("from pkg.low import f\n")
    (package / "analysis" / "curves.py").write_text("from ..low import f\n")
    (package / "training.py").write_text("def f():\n    from .analysis.curves import f\n")
    return package


def test_the_checks_find_a_cycle_and_an_upward_import_inside_a_function(tmp_path):
    graph = import_graph(_fabricated(tmp_path))
    assert graph["low"] == {"high"} and graph["other"] == {"low"} and graph["analysis.curves"] == {"low"}
    assert [sorted(set(c)) for c in cycles(graph)] == [["high", "low"]]
    assert upward(graph) == ["training -> analysis.curves"]


def test_every_subpackage_is_walked():
    names = module_names(PACKAGE)
    assert {"data", "analysis", "repro", "notebook", "dfmamba"} <= set(names)
    assert {n.split(".")[0] for n in names if "." in n} == {"data", "analysis", "repro", "notebook", "dfmamba"}
    assert len([n for n in names if "." in n]) >= 15  # the modules inside them were read


def test_the_package_import_graph_has_no_cycle_and_runs_only_downward():
    graph = import_graph(PACKAGE)
    assert graph["runs"] >= {"training", "checkpoint"}  # the graph was read (not an empty walk)
    assert graph["repro.fidelity"] >= {"repro.grids", "analysis.trajectories"}
    assert cycles(graph) == [], "import cycles (move the shared code below both modules): " + "; ".join(
        " -> ".join(c) for c in cycles(graph))
    assert upward(graph) == [], "imports that run upward (docs/architecture.md, layers): " + "; ".join(upward(graph))


def test_the_wheel_carries_and_imports_every_module(tmp_path):
    """Build the wheel as pip would (an isolated build: the pinned setuptools, not whatever the
    environment holds), install it into a folder of its own and import every module
    from there (not from this checkout)."""
    root = PACKAGE.parent
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q",
                            "-w", str(tmp_path / "dist"), str(root)], capture_output=True, text=True)
    assert built.returncode == 0, built.stderr[-2000:]
    wheel = next((tmp_path / "dist").glob("frost_nb-*.whl"))
    carried = {n for n in zipfile.ZipFile(wheel).namelist() if n.endswith(".py")}
    expected = {str(p.relative_to(root)) for p in PACKAGE.rglob("*.py")}
    assert expected <= carried, f"missing from the wheel: {sorted(expected - carried)}"
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(wheel)],
                   check=True, capture_output=True)
    names = ["frost_nb" + (f".{m}" if m else "") for m in module_names(PACKAGE)]
    code = ("import importlib, sys\n"
            f"for m in {names!r}:\n    importlib.import_module(m)\n"
            "import frost_nb; print(frost_nb.__file__)")
    ran = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path,
                         env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin", "MPLBACKEND": "Agg"})
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert ran.stdout.strip().startswith(str(site)), ran.stdout


LIBRARY_GOAL = 11_000  # the FROST library's size limit (wc -l), DF-Mamba's package counted apart; never raise it


def library_lines(package: Path) -> int:
    """Lines of every module of ``package`` outside ``dfmamba/`` (``find ... | xargs cat | wc -l``)."""
    return sum(len(p.read_text().splitlines()) for p in package.rglob("*.py") if "dfmamba" not in p.parts)


def test_library_lines_are_counted_as_wc_counts_them(tmp_path):
    (tmp_path / "dfmamba").mkdir()
    (tmp_path / "a.py").write_text("x = 1\n\n# two\n")
    (tmp_path / "dfmamba" / "model.py").write_text("y = 2\n" * 50)
    assert library_lines(tmp_path) == 3


def test_the_library_stays_within_its_line_goal():
    lines = library_lines(PACKAGE)
    assert lines <= LIBRARY_GOAL, (
        f"the library has {lines:,} lines, past its goal {LIBRARY_GOAL:,}: prune what a change supersedes")
