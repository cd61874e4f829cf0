"""Environment variable names live in one module (dist_notebook/envvars.py).

No other module of the package spells a ``DIST_NOTEBOOK_*`` name in its code (its
docstrings may, as prose), and every name there is used by some module.
"""

from __future__ import annotations

import ast
from pathlib import Path

from dist_notebook import envvars

PACKAGE = Path(envvars.__file__).resolve().parent
ENVVARS = Path(envvars.__file__).resolve()


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def _modules() -> list[tuple[str, ast.AST]]:
    return [
        (path.relative_to(PACKAGE.parent).as_posix(), ast.parse(path.read_text()))
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.resolve() != ENVVARS
    ]


def test_no_module_but_envvars_spells_a_variable_name() -> None:
    spelled = []
    for name, tree in _modules():
        docs = _docstrings(tree)
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and envvars.PREFIX in node.value
                and id(node) not in docs
            ):
                spelled.append(f"{name}:{node.lineno}: {node.value[:60]!r}")
    assert not spelled, "use dist_notebook.envvars instead:\n" + "\n".join(spelled)


def test_every_variable_is_used() -> None:
    used = set()
    for _, tree in _modules():
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "envvars"
            ):
                used.add(node.attr)
    names = {name for name in vars(envvars) if name.isupper() and name not in ("PREFIX", "ALL")}
    assert names - used == set()
    assert {getattr(envvars, n) for n in names} == envvars.ALL
    assert all(value.startswith(envvars.PREFIX) for value in envvars.ALL)


def test_names_are_distinct_and_documented() -> None:
    assert len(envvars.ALL) == len(
        [n for n in vars(envvars) if n.isupper() and n not in ("PREFIX", "ALL")]
    )
    doc = envvars.__doc__ or ""
    for name in vars(envvars):
        if name.isupper() and name not in ("PREFIX", "ALL"):
            assert f"``{name}``" in doc, f"envvars.{name} is not described in the docstring"
