"""``breakpoint()`` in ``%%dist`` as a user debugs with it, in a real kernel (jupyter_client,
a real 2-rank gloo cluster; prompts answered as a notebook's input box answers them):
pdb opens at the breakpoint's own line (it opened at ``--Return--`` when the call was a
statement of the cell), ``n`` goes to the cell's next statement, the call chooses the
ranks that stop (``breakpoint(rank=1)``, ``rank="all"``), ``torch.distributed.breakpoint``
stops its rank with the others at its barrier, a rank's error names ``%dist_debug``, and
``%dist?`` tells all of it."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from .test_iterate import Kernel

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kernel]:
    tmp: Path = tmp_path_factory.mktemp("breakpoints")
    env = dict(os.environ)
    env.update(CUDA_VISIBLE_DEVICES="", DIST_NOTEBOOK_STORE=str(tmp / "runs.sqlite"))
    k = Kernel(env, tmp)
    try:
        text = k.ok("%load_ext dist_notebook\n%dist_cluster start -n 2 --cpu")
        assert re.search(r"cluster \w+: ready", text), text
        yield k
        k.run("%dist_cluster stop")
    finally:
        k.close()


def test_pdb_opens_at_the_breakpoints_line_and_n_goes_to_the_next_statement(
    kernel: Kernel,
) -> None:
    cell = "%%dist\nx = 10 + rank\nbreakpoint()\ny = x * 2\nprint('y', rank, y)\n"
    text, errors = kernel.run(cell, ["p x", "n", "n", "p y", "c"])
    assert not errors, (text, errors)
    assert "--Return--" not in text and "--Call--" not in text, text
    # Where pdb stood at each prompt: first the breakpoint's own line (a prompt's output
    # and its input request come on two channels, so only their order within each counts).
    at = re.findall(r"^-> (.*)$", text, re.M)
    assert at == ["breakpoint()", "y = x * 2", "print('y', rank, y)"], text
    assert "breakpoint() on rank 0: the other ranks run on" in text, text
    assert "\n20\n" in text and "[rank 0] y 0 20" in text and "[rank 1] y 1 22" in text, text


def test_n_on_the_cells_last_statement_ends_the_cell(kernel: Kernel) -> None:
    text, errors = kernel.run("%%dist\nz = rank\nbreakpoint()\n", ["n"])
    assert not errors, (text, errors)
    assert "--Return--" not in text, text
    assert "[ranks 0,1] next cell" in kernel.ok("%%dist\nprint('next cell')"), text


def test_breakpoint_rank_1_stops_rank_1_only(kernel: Kernel) -> None:
    text, errors = kernel.run(
        "%%dist\nv = rank * 3\nbreakpoint(rank=1)\nprint('v', v)\n", ["p v", "c"]
    )
    assert not errors, (text, errors)
    assert kernel.prompts == ["(Pdb rank 1) "] * 2, kernel.prompts
    assert "\n3\n" in text and "[rank 0] v 0" in text and "[rank 1] v 3" in text, text


def test_breakpoint_on_every_rank(kernel: Kernel) -> None:
    text, errors = kernel.run("%%dist\nbreakpoint(rank='all')\nprint('done', rank)\n", ["c", "c"])
    assert not errors, (text, errors)
    assert sorted(kernel.prompts) == ["(Pdb rank 0) ", "(Pdb rank 1) "], kernel.prompts
    assert "every rank stops here" in text, text
    assert re.search(r"\[ranks? 0,1\] done|\[rank 0\] done 0", text), text


def test_a_bad_rank_argument_says_what_it_takes(kernel: Kernel) -> None:
    _, errors = kernel.run("%%dist\nbreakpoint(rank=1.5)\n")
    assert (
        errors
        and "breakpoint(rank=...) takes a rank, a list of ranks or 'all'" in (errors[0]["evalue"])
    ), errors


def test_torch_distributed_breakpoint_stops_its_rank_the_others_wait(kernel: Kernel) -> None:
    cell = (
        "%%dist\nimport time, torch.distributed as dist\nt0 = time.monotonic()\n"
        "dist.breakpoint(rank=1)\nprint('waited', rank, round(time.monotonic() - t0) >= 2)\n"
    )

    import time as _time

    original = kernel.kc.input

    def late_input(value: str) -> None:
        _time.sleep(2.5)  # the user reads the code: rank 0 waits at the barrier meanwhile
        original(value)

    kernel.kc.input = late_input  # type: ignore[method-assign]
    try:
        text, errors = kernel.run(cell, ["c"])
    finally:
        kernel.kc.input = original  # type: ignore[method-assign]
    assert not errors, (text, errors)
    assert kernel.prompts == ["(Pdb rank 1) "], kernel.prompts
    assert "-> dist.breakpoint(rank=1)" in text, text
    assert "[rank 0] waited 0 True" in text and "[rank 1] waited 1 True" in text, text
    assert "the other ranks wait at its barrier" in text, text


def test_a_ranks_error_names_dist_debug_and_help_tells_breakpoint(kernel: Kernel) -> None:
    _, errors = kernel.run("%%dist\nvalue = 1 / (rank - 1)\n")
    shown = re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(errors[0]["traceback"]))
    assert "%dist_debug opens pdb where rank 1 raised" in shown, shown
    text, _ = kernel.run("%dist_debug", ["p rank", "q"])
    assert "pdb on rank 1" in text and "\n1\n" in text, text
    helped = kernel.ok("print(get_ipython().find_cell_magic('dist').__doc__)")  # %%dist?
    for said in ("breakpoint(rank=1)", 'rank="all"', "--debug-ranks", "%dist_debug"):
        assert said in helped, (said, helped)
    assert "torch.distributed.breakpoint(rank=1)" in helped, helped
