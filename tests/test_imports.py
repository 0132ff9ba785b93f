"""No import cycle among glamrl's modules, read from the source with `ast` (nothing is imported).

An edge A -> B is an `import B` or `from B import ...` (or `from P import B`, B a submodule of P) in A, at its top
level or inside a function, outside `if TYPE_CHECKING:` blocks (imports for annotations only, never run). Only
the modules named count: that `from glamrl.run.dir import RunDir` also runs glamrl/run/__init__.py is left out,
as a package's __init__ that imports its own submodules would otherwise close a cycle Python resolves.
"""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "glamrl"


def module_name(path: Path, package: Path) -> str:
    """The dotted name of the module at `path` inside `package` (a package's __init__.py: the package's name)."""
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking(test: ast.expr) -> bool:
    """Whether an `if` tests TYPE_CHECKING (or typing.TYPE_CHECKING)."""
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imported(tree: ast.AST, modules: set[str]) -> set[str]:
    """The modules among `modules` that `tree` imports anywhere, `if TYPE_CHECKING:` blocks aside."""
    found, stack = set(), [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _type_checking(node.test):
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            found.update(f"{node.module}.{alias.name}" if f"{node.module}.{alias.name}" in modules else node.module
                         for alias in node.names)
        stack.extend(ast.iter_child_nodes(node))
    return found & modules


def import_graph(package: Path) -> dict[str, set[str]]:
    """Every module of `package` (a directory) -> the modules of the package it imports."""
    paths = {module_name(path, package): path for path in sorted(package.rglob("*.py"))}
    return {name: imported(ast.parse(path.read_text(), str(path)), set(paths)) - {name}
            for name, path in paths.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of `graph` (module -> the modules it imports) as [a, b, ..., a], or None when there is none."""
    done, path = set(), []

    def visit(node: str) -> list[str] | None:
        path.append(node)
        for successor in sorted(graph.get(node, ())):
            if successor in path:
                return path[path.index(successor):] + [successor]
            if successor not in done:
                cycle = visit(successor)
                if cycle is not None:
                    return cycle
        path.pop()
        done.add(node)
        return None

    for start in sorted(graph):
        if start not in done:
            cycle = visit(start)
            if cycle is not None:
                return cycle
    return None


def test_no_import_cycle_among_glamrl_modules():
    graph = import_graph(PACKAGE)
    assert len(graph) > 50 and "glamrl.run.checkpoint" in graph["glamrl.trainers.common"]  # the graph was read
    cycle = find_cycle(graph)
    assert cycle is None, f"import cycle: {' -> '.join(cycle)}"


def test_the_check_sees_function_level_imports_and_not_type_checking_ones(tmp_path):
    """run/ as it was: checkpoint.py imported RunDir from dir.py, which imported checkpoint.py back in a method."""
    sources = {
        "__init__.py": "",
        "run/__init__.py": "",
        "run/dir.py": ("from typing import TYPE_CHECKING\n"
                       "if TYPE_CHECKING:\n    from pkg.run.log import RunLogger\n"
                       "class RunDir:\n    def save(self):\n        from pkg.run import checkpoint\n"),
        "run/checkpoint.py": "import os\nfrom pkg.run.dir import RunDir\n",
        "run/log.py": "from pkg.run.dir import RunDir\n",
    }
    for name, text in sources.items():
        (tmp_path / "pkg" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "pkg" / name).write_text(text)
    graph = import_graph(tmp_path / "pkg")
    assert graph["pkg.run.dir"] == {"pkg.run.checkpoint"}  # the annotation-only import of log is no edge
    assert find_cycle(graph) == ["pkg.run.checkpoint", "pkg.run.dir", "pkg.run.checkpoint"]

    (tmp_path / "pkg" / "run" / "checkpoint.py").write_text("import os\n")  # checkpoint takes paths
    assert find_cycle(import_graph(tmp_path / "pkg")) is None
