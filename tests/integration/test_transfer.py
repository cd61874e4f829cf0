"""Push kernel values to the ranks and pull values back."""

from __future__ import annotations

from typing import Any

import pytest

from dist_notebook.cluster.onranks.transfer import pull, push

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
    from dist_notebook.cluster.onranks.execute import RankError

    with pytest.raises(RankError, match="rank 0 raised NameError"):
        shell.run_line_magic("dist_pull", "no_such_name_anywhere")


def _in_thread(fn: Any, limit: float) -> Any:
    """fn() in a thread: its result, or a failure if it has not returned within *limit* s
    (a hang then fails the test instead of blocking the session)."""
    import threading

    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as e:  # handed to the test below
            box["error"] = e

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(limit)
    assert not thread.is_alive(), f"still waiting after {limit} s"
    if "error" in box:
        raise box["error"]
    return box["value"]


def test_pull_an_instance_of_a_class_defined_with_dist(shell: Any, cluster2: Any) -> None:
    # The README's way to define classes; the class exists only in the ranks' __main__.
    shell.run_cell_magic("dist", "", "class Cfg:\n    lr = 0.1\ncfg = Cfg()\ncfg.rank = rank\n")
    cfg = _in_thread(lambda: shell.run_line_magic("dist_pull", "cfg"), 20)
    assert type(cfg).__name__ == "Cfg" and cfg.lr == 0.1 and cfg.rank == 0
    both = _in_thread(lambda: shell.run_line_magic("dist_pull", "cfg --all"), 20)
    assert {r: c.rank for r, c in both.items()} == {0: 0, 1: 1}


def test_pull_of_a_value_that_cannot_travel_says_so(shell: Any, cluster2: Any) -> None:
    from dist_notebook.cluster.onranks.execute import RankError

    shell.run_cell_magic("dist", "", "import threading\nlock = threading.Lock()\n")
    with pytest.raises(RankError, match="cannot be sent to the notebook.*pull plain data"):
        _in_thread(lambda: shell.run_line_magic("dist_pull", "lock"), 20)


def test_pull_of_a_value_the_kernel_cannot_rebuild_says_so(shell: Any, cluster2: Any) -> None:
    from dist_notebook.cluster.onranks.transfer import PullError

    # A module that exists on the ranks only: its objects pickle by reference.
    shell.run_cell_magic(
        "dist",
        "",
        "import sys, types\nmod = types.ModuleType('only_on_ranks')\n"
        "exec('class Thing:\\n    pass', mod.__dict__)\nmod.Thing.__module__ = 'only_on_ranks'\n"
        "sys.modules['only_on_ranks'] = mod\nthing = mod.Thing()\n",
    )
    with pytest.raises(PullError, match="cannot be rebuilt in the notebook.*import or define"):
        _in_thread(lambda: shell.run_line_magic("dist_pull", "thing"), 20)


# --- large values through shared memory (engine/shm.py) ----------------------------------
@pytest.fixture
def shm_dir(shell: Any, cluster2: Any) -> Any:
    """A private folder on tmpfs for this test's shared-memory files, in the kernel and on
    the ranks, so the test sees exactly the files it made (others may push meanwhile)."""
    import shutil
    import tempfile

    from dist_notebook.engine import shm

    folder = tempfile.mkdtemp(prefix="dist-notebook-test-", dir="/dev/shm")
    old = shm.SHM_DIR
    shm.SHM_DIR = folder
    shell.run_cell_magic(
        "dist", "", f"import dist_notebook.engine.shm as _s\n_s.SHM_DIR = {folder!r}"
    )
    yield folder
    shell.run_cell_magic("dist", "", f"_s.SHM_DIR = {old!r}")
    shm.SHM_DIR = old
    shutil.rmtree(folder)


def test_a_state_dict_pushes_and_pulls_through_shared_memory(
    shell: Any, cluster2: Any, shm_dir: str
) -> None:
    import os

    import numpy
    import torch

    big = {
        "w": torch.arange(2 * 2**18, dtype=torch.float32).reshape(512, 1024),  # 2 MiB
        "b": torch.nn.Parameter(torch.ones(1024, 300, dtype=torch.bfloat16)),
        "table": numpy.linspace(0, 1, 2**18),
        "step": 7,
    }
    shell.user_ns["big"] = big
    shell.run_line_magic("dist_push", "big")
    assert os.listdir(shm_dir) == [], "the pushed file is unlinked once the ranks mapped it"
    # Each rank owns its copy: a write on rank 1 changes neither rank 0 nor the kernel.
    shell.run_cell_magic("dist", "--ranks 1", "big['w'] += 1")
    got = shell.run_line_magic(
        "dist_pull",
        "(float(big['w'].sum()), type(big['b']).__name__, big['b'].dtype, "
        "float(big['table'][-1]), big['step']) --all",
    )
    total = float(big["w"].sum())
    assert got == {
        0: (total, "Parameter", torch.bfloat16, 1.0, 7),
        1: (total + big["w"].numel(), "Parameter", torch.bfloat16, 1.0, 7),
    }
    assert float(big["w"].sum()) == total
    pulled = shell.run_line_magic("dist_pull", "big --all")
    assert os.listdir(shm_dir) == [], "pulled files are unlinked once the kernel mapped them"
    assert torch.equal(pulled[0]["w"], big["w"]) and torch.equal(pulled[1]["w"], big["w"] + 1)
    assert numpy.array_equal(pulled[0]["table"], big["table"]) and pulled[1]["step"] == 7
    pulled[0]["w"].zero_()  # the kernel's copy is its own too
    assert shell.run_line_magic("dist_pull", "float(big['w'].sum())") == total
    shell.run_cell_magic("dist", "", "del big")
