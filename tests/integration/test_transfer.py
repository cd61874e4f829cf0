"""Push kernel values to the ranks and pull values back."""

from __future__ import annotations

from typing import Any

import pytest

from dist_notebook.cluster.transfer import pull, push

pytestmark = pytest.mark.timeout(60)


def test_push_and_pull_through_the_magics(shell: Any, cluster2: Any) -> None:
    shell.run_cell("lr = 0.25\nconfig = {'layers': [8, 4], 'name': 'tiny'}")
    shell.run_line_magic("dist_push", "lr config")
    shell.run_cell_magic("dist", "", "scaled = lr * (rank + 1)\nname = config['name']")
    assert shell.run_line_magic("dist_pull", "scaled --all") == {0: 0.25, 1: 0.5}
    assert shell.run_line_magic("dist_pull", "scaled --rank 1") == 0.5
    assert shell.run_line_magic("dist_pull", "scaled") == 0.25  # rank 0 by default
    assert shell.run_line_magic("dist_pull", "config['layers'] + [name] --all") == {
        r: [8, 4, "tiny"] for r in (0, 1)
    }


def test_push_a_function_defined_in_the_notebook(shell: Any, cluster2: Any) -> None:
    # Defined in the kernel's namespace: travels by value (cloudpickle).
    shell.run_cell("offset = 100\ndef shift(x):\n    return x + offset\n")
    shell.run_line_magic("dist_push", "shift")
    shell.run_cell_magic("dist", "", "shifted = shift(rank)")
    assert shell.run_line_magic("dist_pull", "shifted --all") == {0: 100, 1: 101}


def test_push_an_instance_of_a_notebook_class(shell: Any, cluster2: Any) -> None:
    shell.run_cell(
        "class Settings:\n    def __init__(self, width):\n        self.width = width\n"
        "    def doubled(self):\n        return 2 * self.width\n"
        "settings = Settings(21)\n"
    )
    shell.run_line_magic("dist_push", "settings")
    assert shell.run_line_magic("dist_pull", "settings.doubled() --all") == {0: 42, 1: 42}


def test_push_and_pull_with_the_api_on_some_ranks(cluster2: Any) -> None:
    push(cluster2, {"only_on_1": "yes"}, ranks=[1])
    push(cluster2, {"only_on_1": None}, ranks=[0])
    assert pull(cluster2, "only_on_1", [0, 1]) == {0: None, 1: "yes"}


def test_pull_of_an_unknown_name_names_the_rank(shell: Any, cluster2: Any) -> None:
    from dist_notebook.cluster.execute import RankError

    with pytest.raises(RankError, match="rank 0 raised NameError"):
        shell.run_line_magic("dist_pull", "no_such_name_anywhere")
