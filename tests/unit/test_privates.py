"""The fence of other libraries' private names (dist_notebook/privates.py).

Each private name we use still exists in the installed ipyparallel, ipykernel, IPython
and torch (a failure names the library, its installed version and the version the
fence was checked with), and no module but the fence touches one of them.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import inspect
import io
import json
import tokenize
from pathlib import Path

import pytest

from dist_notebook import privates
from dist_notebook.privates import PRIVATES, Private

PACKAGE = Path(privates.__file__).resolve().parent
DISTRIBUTIONS = {"ipyparallel": "ipyparallel", "ipykernel": "ipykernel", "IPython": "ipython"}


def _installed(library: str) -> str:
    return importlib.metadata.version(DISTRIBUTIONS.get(library, library))


def _owner(private: Private) -> object:
    module_name, _, class_name = private.owner.partition(":")
    owner: object = importlib.import_module(module_name)
    if class_name:
        owner = getattr(owner, class_name)
    return owner


def _exists(private: Private) -> bool:
    owner = _owner(private)
    if inspect.ismodule(owner):
        try:  # a private submodule (torch._dynamo) is an attribute once imported
            importlib.import_module(f"{owner.__name__}.{private.name}")
        except ImportError:
            pass
    if hasattr(owner, private.name):
        return True
    if not (private.instance and inspect.isclass(owner)):
        return False
    # An attribute set on instances: some class of the owner's own library assigns it.
    library = private.owner.split(".")[0]
    for cls in owner.__mro__:
        if not cls.__module__.startswith(library):
            continue
        try:
            source = inspect.getsource(cls)
        except (OSError, TypeError):
            continue
        if f"self.{private.name} =" in source or f"self.{private.name}: " in source:
            return True
    return False


@pytest.mark.parametrize(
    "private", PRIVATES, ids=[f"{p.library}:{p.owner}.{p.name}" for p in PRIVATES]
)
def test_each_private_name_exists_in_the_installed_version(private: Private) -> None:
    if private.library == "ray":
        pytest.importorskip("ray", reason="the [ray] extra is not installed")
    installed = _installed(private.library)
    checked = privates.CHECKED[private.library]
    assert _exists(private), (
        f"{private.library} {installed} (fence checked with {checked}) has no "
        f"{private.owner}.{private.name}, which dist-notebook uses for: {private.why}"
    )


def test_the_flight_recorder_dump_is_json_text() -> None:
    dumped = privates.flight_recorder_json()
    assert dumped is not None, f"torch {_installed('torch')} has no flight recorder"
    assert isinstance(dumped, str)
    assert isinstance(json.loads(dumped), dict)


def test_the_checked_versions_are_named_for_every_library() -> None:
    assert {p.library for p in PRIVATES} == set(privates.CHECKED)
    for library, version in privates.CHECKED.items():
        assert version.count(".") == 2, (library, version)


def _attribute_names(source: str) -> list[tuple[int, str]]:
    """(line, name) of every ``.name`` in code (comments and strings left out), but for
    names the module defines itself (``def _wait``: its own method of that name)."""
    found = []
    defined = set()
    previous = None
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.NAME and previous is not None and previous.string == ".":
            found.append((token.start[0], token.string))
        if token.type == tokenize.NAME and previous is not None and previous.string == "def":
            defined.add(token.string)
        if token.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT):
            previous = token
    return [(line, name) for line, name in found if name not in defined]


def test_no_module_but_the_fence_uses_a_private_name() -> None:
    names: dict[str, set[str]] = {}
    for p in PRIVATES:
        names.setdefault(p.name, set()).add(p.overridden_in)
    uses = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE.parent).as_posix()
        if path == Path(privates.__file__).resolve():
            continue
        for line, name in _attribute_names(path.read_text()):
            if name in names and relative not in names[name]:
                uses.append(f"{relative}:{line}: .{name}")
    assert not uses, "use dist_notebook.privates instead:\n" + "\n".join(uses)
