"""%dist_debug, %dist_autoreload and %dist_auto: each mistake names its fix, and with no
cluster a Tab in a %%dist cell gets the kernel's own completions at once (their use on a
real cluster, in a real kernel: tests/integration/test_iterate.py)."""

from __future__ import annotations

import time
from typing import Any

import pytest
from IPython.core.completer import provisionalcompleter
from IPython.core.error import UsageError

from dist_notebook.magics.complete import rank_of_cell

pytestmark = pytest.mark.timeout(60)
NO_CLUSTER = "no cluster is running: start one with %dist_cluster start"


def usage_error(shell: Any, name: str, line: str) -> str:
    with pytest.raises(UsageError) as info:
        shell.run_line_magic(name, line)
    return str(info.value)


@pytest.mark.parametrize(
    ("name", "line"), [("dist_debug", ""), ("dist_debug", "1"), ("dist_autoreload", "on")]
)
def test_without_a_cluster_says_to_start_one(no_cluster: Any, name: str, line: str) -> None:
    assert usage_error(no_cluster, name, line) == NO_CLUSTER


def test_dist_auto_on_without_a_cluster_says_to_start_one(no_cluster: Any) -> None:
    message = usage_error(no_cluster, "dist_auto", "on")
    assert message == "%dist_auto on needs a ready cluster: start one with %dist_cluster start"


@pytest.mark.parametrize("name", ["dist_auto", "dist_autoreload"])
def test_a_wrong_word_names_the_choices(no_cluster: Any, name: str) -> None:
    message = usage_error(no_cluster, name, "yes")
    assert "invalid choice: 'yes' (choose from 'on', 'off')" in message, message


def test_dist_debug_rank_must_be_a_number(no_cluster: Any) -> None:
    message = usage_error(no_cluster, "dist_debug", "one")
    assert "argument rank: 'one' is not a rank: give 0 to" in message, message


def test_dist_auto_off_and_its_state_need_no_cluster(
    no_cluster: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    no_cluster.run_line_magic("dist_auto", "off")
    no_cluster.run_line_magic("dist_auto", "")
    assert capsys.readouterr().out == "auto off: cells run in the kernel\nauto off\n"


def completion_texts(shell: Any, code: str) -> list[str]:
    with provisionalcompleter():
        return [c.text for c in shell.Completer.completions(code, len(code))]


def test_tab_in_a_dist_cell_without_a_cluster_is_the_kernels_at_once(no_cluster: Any) -> None:
    no_cluster.user_ns["kernel_side_name"] = 1
    completion_texts(no_cluster, "kernel_side_n")  # jedi's first use (its import) apart
    start = time.monotonic()
    found = completion_texts(no_cluster, "%%dist\nkernel_side_n")
    assert "kernel_side_name" in found and time.monotonic() - start < 1, found


@pytest.mark.parametrize(
    ("line", "offered"),
    [("%dist_auto o", ["off", "on"]), ("%dist_autoreload o", ["off", "on"])]
    + [("%dist_debug --h", ["--help"])],
)
def test_tab_offers_the_words_of_the_new_magics(
    no_cluster: Any, line: str, offered: list[str]
) -> None:
    found = completion_texts(no_cluster, line)
    assert all(word in found for word in offered), found


@pytest.mark.parametrize(
    ("cell", "line", "auto_on", "rank"),
    [
        ("%%dist\nx", 1, False, 0),
        ("\n%%dist_train --ranks 1,0 --steps 3\nx", 2, False, 1),
        ("%%dist --ranks 1\nx", 0, False, None),  # the magic's line: its flags
        ("%%distx\nx", 1, False, None),
        ("x = 1", 0, False, None),
        ("x = 1", 0, True, 0),
        ("%who_ls", 0, True, None),
    ],
)
def test_which_cells_complete_from_a_rank(
    cell: str, line: int, auto_on: bool, rank: int | None
) -> None:
    assert rank_of_cell(cell, line, auto_on) == rank
