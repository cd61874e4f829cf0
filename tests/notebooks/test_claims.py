"""Statements in the notebooks' prose that were once wrong, checked against the notebooks'
own text and code (no kernel): a repeated paragraph or heading, a step count the code does
not run, a TensorFlow column that describes another strategy.

What a number claims is checked where it is printed, in the notebook's own check cells;
these are the claims about the text itself.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

NOTEBOOKS_DIR = Path(__file__).resolve().parents[2] / "notebooks"
NOTEBOOKS = sorted(NOTEBOOKS_DIR.glob("*.ipynb"))
NUMBERS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "ten": 10}

pytestmark = pytest.mark.notebooks


def _cells(path: Path, kind: str) -> list[str]:
    nb = json.loads(path.read_text(encoding="utf-8"))
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == kind]


def _sentences(markdown: str) -> list[str]:
    prose = re.sub(r"```.*?```", " ", markdown, flags=re.S)  # code blocks may repeat
    prose = " ".join(line for line in prose.splitlines() if not line.lstrip().startswith("|"))
    return [s.strip() for s in re.split(r"(?<=[.!?])\s+", " ".join(prose.split()))]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_no_heading_or_sentence_said_twice(path: Path) -> None:
    """A paragraph pasted twice (notebook 4) or an exercise announced twice (notebook 5)."""
    seen: dict[str, int] = {}
    for index, markdown in enumerate(_cells(path, "markdown")):
        headings = [line.strip() for line in markdown.splitlines() if line.startswith("#")]
        long_sentences = [s for s in _sentences(markdown) if len(s) >= 80]
        for text in headings + long_sentences:
            assert text not in seen, (
                f"{path.name}: markdown cell {index} repeats {text[:90]!r} "
                f"(first in markdown cell {seen[text]})"
            )
            seen[text] = index


def test_07_says_the_steps_it_runs() -> None:
    path = NOTEBOOKS_DIR / "07_sharded_data_parallel.ipynb"
    code = "\n".join(_cells(path, "code"))
    runs = re.search(r"^STEPS = (\d+)$", code, flags=re.M) or re.search(
        r"def train\(model, steps=(\d+)\)", code
    )
    assert runs, "07: no STEPS constant or train(..., steps=N) default found"
    said = re.findall(
        r"after (?:the same )?(?:`STEPS` )?\(?(\w+)\)? (?:training |Adam )?steps?\b",
        " ".join(" ".join(_cells(path, "markdown")).split()),
    )
    assert said, "07: the text no longer says after how many steps it counts"
    for word in said:
        number = int(word) if word.isdigit() else NUMBERS.get(word)
        assert number == int(runs.group(1)), (
            f"07 says 'after {word} ... step(s)', the code runs {runs.group(1)}"
        )


def test_11_mirrored_strategy_column_is_one_process() -> None:
    """MirroredStrategy is one process on one machine: task ids, TF_CONFIG and chiefs belong
    to MultiWorkerMirroredStrategy, which a cell of that column must then name."""
    path = NOTEBOOKS_DIR / "11_from_tensorflow_and_horovod.ipynb"
    checked = 0
    for markdown in _cells(path, "markdown"):
        rows = [line for line in markdown.splitlines() if line.startswith("|")]
        if not rows:
            continue
        header = [c.strip() for c in rows[0].strip("|").split("|")]
        columns = [i for i, c in enumerate(header) if "`MirroredStrategy`" in c]
        for row in rows[2:]:
            cells = [c.strip() for c in row.strip("|").split("|")]
            for i in columns:
                checked += 1
                if re.search(r"task_id|task_type|TF_CONFIG|chief", cells[i]):
                    assert "MultiWorkerMirroredStrategy" in cells[i], (
                        f"11: the MirroredStrategy column says {cells[i]!r}: that is "
                        "MultiWorkerMirroredStrategy; say so, or describe the one-process strategy"
                    )
    assert checked, "11: no table with a MirroredStrategy column found"


CLAMPED_DIFFERENCE = re.compile(r"max\([^()]*-[^()]*,\s*0(?:\.0)?\)")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_no_measured_difference_clamped_at_zero(path: Path) -> None:
    """``max(ddp_ms - compute_ms, 0)`` printed 0.0 ms where DDP had been faster than compute
    alone (notebook 4): a measured difference is printed as it comes, negative included."""
    for index, code in enumerate(_cells(path, "code")):
        clamped = CLAMPED_DIFFERENCE.search(code)
        assert not clamped, f"{path.name}: code cell {index} clamps {clamped.group(0)!r}"


def test_readme_lists_every_notebook() -> None:
    """The README's table names every notebook, in order, and only notebooks that exist: a
    notebook added without its row (what it teaches, its exercises, its run time) fails."""
    readme = (NOTEBOOKS_DIR / "README.md").read_text(encoding="utf-8")
    listed = re.findall(r"^\| \d+ \| `(\d\d_[a-z0-9_]+\.ipynb)` \|", readme, flags=re.M)
    assert listed == [p.name for p in NOTEBOOKS], (
        f"notebooks/README.md lists {listed}, the folder holds {[p.name for p in NOTEBOOKS]}"
    )


def test_docs_page_lists_every_notebook() -> None:
    """The docs site's notebooks page names every notebook, in order, as the README does."""
    page = NOTEBOOKS_DIR.parent / "docs" / "guides" / "notebooks.md"
    listed = re.findall(
        r"^\| \d+ \| `(\d\d_[a-z0-9_]+\.ipynb)` \|", page.read_text("utf-8"), flags=re.M
    )
    assert listed == [p.name for p in NOTEBOOKS], (
        f"docs/guides/notebooks.md lists {listed}, the folder holds {[p.name for p in NOTEBOOKS]}"
    )
