"""The text %dist_export writes (batch/script.py, batch/export.py's checks), without a
cluster: names reach the script only as data, a cell's ``from __future__`` import goes to
the script's top, a script that would not compile is never written, and a pushed int past
Python's 4,300-digit limit is pickled instead of raising."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

from dist_notebook.batch import export as export_mod
from dist_notebook.batch.script import (
    ExportError,
    Part,
    Plan,
    Script,
    check_python,
    compose,
    literal,
    split_future,
)

INJECTED = "x\nimport os; os.system('touch PWNED')\n#"


def _script(name: str = "digits", file_name: str = "train.py", origin: str = "a run") -> Script:
    return Script(
        name=name,
        file_name=file_name,
        backend="gloo",
        timeout_s=30.0,
        gpus=False,
        threads=None,
        run_options={"steps": 3, "checkpoint_dir": None},
        literals={"lr": "0.1"},
        pickled=(),
        values_file=None,
        origin=origin,
        when="2026-12-04 00:00",
        nproc=2,
    )


def _plan(train: str = "report(step=0, loss=1.0)\n", before: list[Part] | None = None) -> Plan:
    return Plan(before or [], Part("train", train, 3), [Part("dist", "print(rank)\n", 4)])


def _calls(text: str) -> list[str]:
    """What every call in the script calls, as source (what it would run)."""
    tree = ast.parse(text)
    return [ast.unparse(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)]


def test_a_run_name_with_a_newline_is_data_not_code() -> None:
    text = compose(_plan(), _script(name=INJECTED, file_name="t\nimport sys.py", origin=INJECTED))
    compile(text, "train.py", "exec", dont_inherit=True)
    assert "os.system" not in _calls(text), _calls(text)
    assert "\nimport os; os.system" not in text
    assert not any(line.startswith("import os") for line in text.splitlines())
    # The name still reaches the run, whole, as a literal.
    runs = [
        n
        for n in ast.walk(ast.parse(text))
        if isinstance(n, ast.Call) and ast.unparse(n.func) == "job.run"
    ]
    assert [ast.literal_eval(k.value) for k in runs[0].keywords if k.arg == "name"] == [INJECTED]


@pytest.mark.parametrize("bad", ['"""; import os #', "a\\", "\x00", "\x1b[2J", "\r"])
def test_a_name_cannot_end_the_docstring_or_break_the_file(bad: str) -> None:
    text = compose(_plan(), _script(name=bad, file_name=bad + ".py", origin=bad))
    compile(text, "train.py", "exec", dont_inherit=True)
    tree = ast.parse(text)
    assert "\x00" not in text and "\x1b" not in text and "\r" not in text
    assert "a torchrun script exported by %dist_export" in (ast.get_docstring(tree) or "")
    assert isinstance(tree.body[1], ast.ImportFrom)  # the docstring ended where ours does


def test_a_future_import_goes_to_the_top_and_the_script_compiles() -> None:
    setup = Part("dist", "from __future__ import annotations\ndef f(x: Later) -> None: ...\n", 1)
    train = "from __future__ import annotations, division\nreport(step=0, loss=1.0)\n"
    text = compose(_plan(train, [setup]), _script())
    compile(text, "train.py", "exec", dont_inherit=True)  # failed before: not at the top
    tree = ast.parse(text)
    futures = [n for n in tree.body if isinstance(n, ast.ImportFrom) and n.module == "__future__"]
    assert [a.name for n in futures for a in n.names] == ["annotations", "annotations", "division"]
    assert tree.body.index(futures[-1]) == len(futures)  # right after the docstring
    assert "# from __future__ import annotations: at the script's top" in text


def test_split_future_keeps_what_shares_its_line() -> None:
    statements, code = split_future("from __future__ import annotations; x = 1\nprint(x)\n")
    assert statements == ["from __future__ import annotations"]
    assert code == "pass; x = 1\nprint(x)\n"
    ns: dict[str, Any] = {}
    exec(compile(code, "c", "exec", dont_inherit=True), ns)
    assert ns["x"] == 1
    assert split_future("x = 1\n") == ([], "x = 1\n")


def test_top_level_await_is_refused_with_the_fix() -> None:
    with pytest.raises(ExportError) as info:
        check_python(Part("dist", "import asyncio\nawait asyncio.sleep(0)\n", 5))
    message = str(info.value)
    assert "%%dist (In [5]) does not compile as a script" in message, message
    assert "asyncio.run(main())" in message and "\n" not in message


def test_a_script_that_would_not_compile_is_not_written(tmp_path: Path) -> None:
    target = tmp_path / "train.py"
    with pytest.raises(ExportError) as info:
        export_mod._check_compiles("x = 1\nfrom __future__ import annotations\n", target)
    message = str(info.value)
    assert "the script would not compile (line 2:" in message, message
    assert "train.py was not written" in message and "\n" not in message
    assert not target.exists()


def test_an_int_past_the_digit_limit_is_pickled_not_raised() -> None:
    huge = 10**5000
    assert literal(huge) is None  # raised ValueError (str() of a 5,001-digit int) before
    assert literal([1, huge]) is None
    assert literal(10**100) == repr(10**100)
    literals, pickled = export_mod._values({"big": huge, "small": 7})
    assert literals == {"small": "7"} and pickled == {"big": huge}
