"""bench/ is one harness: every file of it is in the registry, none reaches tests.* or edits
sys.path, and `python -m bench` answers a mistyped name with the command that lists them."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"


def bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bench", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


@lru_cache(maxsize=1)
def registry() -> dict[str, Any]:
    done = bench("list", "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def registered_files() -> set[str]:
    files = set(registry()["support"])
    for b in registry()["benchmarks"]:
        target = b["target"]
        files.add(target.removeprefix("bench/") if "/" in target else target[6:] + ".py")
    return files


def test_every_file_of_bench_is_registered() -> None:
    on_disk = {p.name for p in BENCH.iterdir() if p.suffix in (".py", ".sh")}
    assert on_disk - registered_files() == set(), "add each to bench/registry.py"
    assert registered_files() - on_disk == set(), "the registry names files that are gone"


def page_text(page: str) -> str:
    """A docs page with the files it includes (``{include}``), as the built page reads."""
    path = ROOT / page
    text = path.read_text()
    for line in text.splitlines():
        if line.startswith("```{include}"):
            text += (path.parent / line.split(None, 1)[1]).read_text()
    return text


def test_every_entry_says_what_it_measures_and_what_cites_it() -> None:
    names = [b["name"] for b in registry()["benchmarks"]]
    assert len(names) == len(set(names))
    for b in registry()["benchmarks"]:
        assert b["measures"] and b["peer"] and b["results"], b["name"]
        assert b["docs"], f"{b['name']}: a benchmark is kept while a page cites it"
        for page in b["docs"]:
            assert f"bench run {b['name']}" in page_text(page), f"{page} does not cite {b['name']}"


def test_every_benchmark_module_runs_as_main() -> None:
    for b in registry()["benchmarks"]:
        if b["target"].startswith("bench."):
            path = BENCH / (b["target"][6:] + ".py")
            assert 'if __name__ == "__main__":' in path.read_text(), path.name


def _imports(path: Path) -> list[str]:
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names.append("." * node.level + (node.module or ""))
    return names


def test_no_module_of_bench_reaches_tests_or_edits_sys_path() -> None:
    for path in sorted(BENCH.glob("*.py")):
        for name in _imports(path):
            assert not name.startswith(("tests", ".")), f"{path.name} imports {name}"
        text = path.read_text()
        for edit in ("sys.path.insert", "sys.path.append", "sys.path[:0]"):
            assert edit not in text, f"{path.name}: {edit}; import it as bench.<module>"


def test_a_mistyped_name_says_how_to_list_them() -> None:
    done = bench("run", "dispach")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "bench: no benchmark named 'dispach': `python -m bench list` names them"
    ]
    done = bench("run", "--all", "--only", "memroy")
    assert done.returncode == 2
    assert "no part memroy in --all: --only takes memory," in done.stderr


def test_run_without_a_name_names_the_choices() -> None:
    done = bench("run")
    assert done.returncode == 2
    assert "name a benchmark or --all" in done.stderr
    assert "python -m bench list" in done.stderr


def test_a_missing_peer_is_named_with_the_install_command() -> None:
    code = (
        "from bench.registry import INSTALL_PEERS, missing; "
        "print(missing(('json', 'no_such_peer_for_bench'))); print(INSTALL_PEERS)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.stdout.splitlines() == [
        "['no_such_peer_for_bench']",
        "pip install -e '.[bench]' (make bench does)",
    ]
    for b in registry()["benchmarks"]:
        if b["name"] in ("memory", "round_trip", "cold_start", "throughput"):
            assert "nbdistributed" in b["peers"], b["name"]


def test_no_page_cites_a_benchmark_by_its_old_script_path() -> None:
    pages = [ROOT / "README.md", ROOT / "notebooks" / "README.md", BENCH / "README.md"]
    pages += [p for p in (ROOT / "docs").rglob("*.md") if "_build" not in p.parts]
    pages += sorted((BENCH / "results").glob("*.md"))
    modules = [b["target"][6:] for b in registry()["benchmarks"] if b["target"][5] == "."]
    old = {f"bench/{m}.py" for m in modules}
    old |= {"python bench/", "bench/run_all.py"}
    for page in pages:
        text = page.read_text()
        for path in sorted(old):
            assert path not in text, f"{page.relative_to(ROOT)} cites {path}: use python -m bench"
