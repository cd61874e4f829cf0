"""The docs pages' notebook examples run as pasted, as the README's do (test_readme.py):
the getting-started page's code cells, then the ``python`` blocks of the guides that go on
from it, in the order below, in one fresh real kernel with a real 2-rank CPU gloo cluster.

Each page's blocks go on from the kernel the pages before left (the model and optimizer
of getting started, the cluster a guide stops and starts), so the order is the one a
reader pasting them would follow. Every docs page's fences must say what they are for
(``python``, ``ipython``, ``bash``, ``text``, or a MyST directive), and a page with
``python`` blocks that is not listed here fails the test, so none slips past unrun.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from .test_readme import KNOWN, RUN, blocks, run_blocks, text_of

DOCS = Path(__file__).resolve().parents[2] / "docs"
CODE_CELL = "{code-cell} ipython3"  # a myst-nb cell: run by `make docs` and here
# The pages whose examples run, in the order they go on from one another.
PAGES = [
    "getting-started.md",
    "guides/failures.md",
    "guides/exporters.md",
    "guides/detach.md",
    "guides/batch-export.md",
]

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def pages() -> list[Path]:
    return sorted(p for p in DOCS.rglob("*.md") if "_build" not in p.parts)


def runnable(page: Path) -> list[str]:
    """The code a reader pastes from *page*, in order."""
    return [code for lang, code in blocks(page.read_text("utf-8")) if lang in (RUN, CODE_CELL)]


def test_every_docs_block_says_what_it_is_for() -> None:
    unknown = []
    for page in pages():
        for index, (lang, _) in enumerate(blocks(page.read_text("utf-8"))):
            if lang not in KNOWN and lang != CODE_CELL and not lang.startswith("{"):
                unknown.append((str(page.relative_to(DOCS)), index, lang))
    assert not unknown, f"blocks without a known fence language {sorted(KNOWN)}: {unknown}"


def test_every_page_with_examples_is_run() -> None:
    with_examples = {str(p.relative_to(DOCS)) for p in pages() if runnable(p)}
    assert with_examples == set(PAGES), f"pages with python examples: {sorted(with_examples)}"


def test_docs_examples_run_in_order_in_a_fresh_kernel(tmp_path: Path) -> None:
    sources = [(page, code) for page in PAGES for code in runnable(DOCS / page)]
    labels = [f"{page}: block" for page, _ in sources]
    nb, took = run_blocks([code for _, code in sources], labels, tmp_path)
    work = tmp_path / "notebook"
    print(f"\ndocs blocks: {', '.join(f'{t:.1f}' for t in took)} s; {sum(took):.1f} s in all")
    out = {page: "" for page in PAGES}
    for (page, _), cell in zip(sources, nb.cells, strict=True):
        out[page] += text_of(cell)
    # What each page says its blocks show.
    start = out["getting-started.md"]
    assert re.search(r"cluster \w+: ready in", start), start
    assert "[rank 0] 0 2 899" in start and "[rank 1] 1 2 898" in start, start
    assert "succeeded 400" in start, start
    assert "0 AssertionError [0]" in start, start  # the caught RankError
    assert "[(0, 2), (1, 2)]" in start, start
    assert (work / "digits.csv").stat().st_size > 0
    assert list((work / "checkpoints" / "digits-ckpt").iterdir()), "no checkpoint written"
    assert list((work / "runs").glob("digits-tb-*/rank1")), "no TensorBoard events of rank 1"
    detach = out["guides/detach.md"]
    assert "[rank 0] rank 0 was here" in detach and "[rank 1] rank 1 was here" in detach, detach
    # the same kernel pastes the attach: it holds the cluster already
    assert re.search(r"attached to (cluster \w+ in|this kernel already)", detach), detach
    batch = out["guides/batch-export.md"]
    assert "wrote digits_batch.py" in batch and "digits-batch" in batch, batch
    assert (work / "digits_batch.py").stat().st_size > 0
    assert (work / "digits_batch.sbatch").stat().st_size > 0


def test_the_readme_is_a_front_page_whose_links_resolve() -> None:
    readme = DOCS.parent / "README.md"
    text = readme.read_text("utf-8")
    assert len(text.splitlines()) <= 200
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    assert any(link.startswith("docs/") for link in links), links
    missing = [link for link in links if "://" not in link and not (DOCS.parent / link).exists()]
    assert not missing, f"README links to files that are not there: {missing}"
