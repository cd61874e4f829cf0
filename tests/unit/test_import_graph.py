"""No import circle among dist_notebook's modules, function-local imports counted.

Every module of the package is parsed (``ast``, nothing imported) and each import of
a dist_notebook module is an edge: at the top level, inside a function or a class,
under ``try``. Imports under ``if TYPE_CHECKING:`` are left out: they never run, they
only name types for mypy. A function-local import hides a circle from Python's import
machinery but not from a reader: the modules still cannot be understood, tested or
moved apart. Function-local imports stay only for heavy or optional third-party
packages (torch, zmq, ray, ...), each with a comment saying so.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import dist_notebook

PACKAGE = Path(dist_notebook.__file__).parent
NAME = "dist_notebook"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(node: ast.AST, local: bool = False) -> Iterator[tuple[ast.stmt, bool]]:
    """(import statement, inside a function) of *node*, TYPE_CHECKING blocks skipped."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child.test):
            for other in child.orelse:
                yield from _imports(other, local)
            continue
        if isinstance(child, ast.Import | ast.ImportFrom):
            yield child, local
        inner = local or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
        yield from _imports(child, inner)


def _targets(name: str, path: Path, stmt: ast.stmt, known: set[str]) -> set[str]:
    """The dist_notebook modules *stmt* (in module *name*) imports."""
    is_package = path.name == "__init__.py"
    if isinstance(stmt, ast.Import):
        found = {alias.name for alias in stmt.names}
    else:
        assert isinstance(stmt, ast.ImportFrom)
        if stmt.level:
            base = name.split(".") if is_package else name.split(".")[:-1]
            base = base[: len(base) - (stmt.level - 1)]
            where = ".".join(base + ([stmt.module] if stmt.module else []))
        else:
            where = stmt.module or ""
        found = set()
        for alias in stmt.names:
            sub = f"{where}.{alias.name}"
            found.add(sub if sub in known else where)
    out = set()
    for target in found:
        # "import a.b.c" names a.b.c; a name that is no module is its nearest module.
        while target and target not in known:
            target = target.rpartition(".")[0]
        if target.startswith(NAME) and target != name:
            out.add(target)
    return out


def graph() -> tuple[dict[str, set[str]], dict[tuple[str, str], bool]]:
    """{module: modules it imports}, and for each edge whether only function-local."""
    known = modules()
    edges: dict[str, set[str]] = {name: set() for name in known}
    only_local: dict[tuple[str, str], bool] = {}
    for name, path in known.items():
        tree = ast.parse(path.read_text(), str(path))
        for stmt, local in _imports(tree):
            for target in _targets(name, path, stmt, set(known)):
                edges[name].add(target)
                only_local[(name, target)] = only_local.get((name, target), True) and local
    return edges, only_local


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def describe(component: list[str], edges: dict[str, set[str]], only_local: dict) -> str:
    inside = set(component)
    lines = [f"{len(component)} modules:"]
    for v in component:
        for w in sorted(edges[v] & inside):
            lines.append(f"  {v} -> {w}{' (in a function)' if only_local[(v, w)] else ''}")
    return "\n".join(lines)


def test_the_graph_sees_the_package() -> None:
    edges, _ = graph()
    assert "dist_notebook.cluster.cluster" in edges
    assert "dist_notebook.protocol" in edges["dist_notebook.cluster.facts"]


def test_a_circle_is_found_function_local_imports_counted() -> None:
    """The checker itself: a circle through a function-local import is one."""
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(edges) == [["a", "b", "c"]]
    tree = ast.parse("def f():\n    from .b import x\n")
    found = list(_imports(tree))
    assert len(found) == 1 and found[0][1] is True


def test_type_checking_imports_are_left_out() -> None:
    tree = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import b\n")
    assert [type(s) for s, _ in _imports(tree)] == [ast.ImportFrom]


def test_no_import_circle_among_the_package_modules() -> None:
    edges, only_local = graph()
    found = cycles(edges)
    assert not found, "import circles:\n" + "\n".join(describe(c, edges, only_local) for c in found)
