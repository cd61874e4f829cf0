"""Whether a JSON value has exactly the shape dist_notebook/contracts.py declares.

``mismatches(value, Shape)`` lists what differs: a key the TypedDict does not declare, a
required key missing, a literal out of its set, a value of another JSON kind; nested
TypedDicts, lists and maps are checked too. Types that name protocol.ts's own shapes (the
record, the summary: ``dict[str, Any]`` in Python) are checked as objects only; their keys
are protocol.py's to test.
"""

from __future__ import annotations

import types
from typing import (
    Annotated,
    Any,
    Literal,
    Union,
    get_args,
    get_origin,
    get_type_hints,
    is_typeddict,
)

_JSON_KINDS = {int: (int,), float: (int, float), str: (str,), bool: (bool,)}


def mismatches(value: Any, tp: Any, where: str = "$") -> list[str]:
    origin, args = get_origin(tp), get_args(tp)
    if origin is Annotated:
        return mismatches(value, args[0], where)
    if tp is Any:
        return []
    if tp is type(None):
        return [] if value is None else [f"{where}: {value!r} is not null"]
    if origin in (Union, types.UnionType):
        tries = [mismatches(value, a, where) for a in args]
        return [] if any(not t for t in tries) else min(tries, key=len)
    if origin is Literal:
        return [] if value in args else [f"{where}: {value!r} is not one of {args}"]
    if origin is list:
        if not isinstance(value, list):
            return [f"{where}: {type(value).__name__} is not a list"]
        return [m for i, v in enumerate(value) for m in mismatches(v, args[0], f"{where}[{i}]")]
    if origin is dict:
        if not isinstance(value, dict):
            return [f"{where}: {type(value).__name__} is not an object"]
        return [m for k, v in value.items() for m in mismatches(v, args[1], f"{where}.{k}")]
    if is_typeddict(tp):
        return _typeddict(value, tp, where)
    kinds = _JSON_KINDS[tp]
    if tp is not bool and isinstance(value, bool):
        return [f"{where}: {value!r} is a bool, not a {tp.__name__}"]
    return [] if isinstance(value, kinds) else [f"{where}: {value!r} is not a {tp.__name__}"]


def _typeddict(value: Any, tp: Any, where: str) -> list[str]:
    if not isinstance(value, dict):
        return [f"{where}: {type(value).__name__} is not a {tp.__name__} object"]
    hints = get_type_hints(tp, include_extras=True)
    out = [f"{where}: key {k!r} is not declared in {tp.__name__}" for k in value if k not in hints]
    out += [
        f"{where}: required key {k!r} of {tp.__name__} is missing"
        for k in tp.__required_keys__
        if k not in value
    ]
    for key, sub in hints.items():
        if key in value:
            out += mismatches(value[key], sub, f"{where}.{key}")
    return out


def assert_shape(value: Any, tp: Any) -> None:
    found = mismatches(value, tp)
    assert not found, f"the answer does not match contracts.{getattr(tp, '__name__', tp)}: " + (
        "; ".join(found)
    )
