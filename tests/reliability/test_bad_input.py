"""Bad input: fuzzed magic arguments (hypothesis, over 1000 cases in all) and bad cells.

Every fuzzed call must either work or raise an IPython UsageError with a message: never
another exception type, never an internal traceback. Where the arguments carry user
code (an expression to pull, a line-form training call) that code may raise on the
ranks: that is a RankError naming the rank, as for any cell. A valid ``--timeout`` may
expire: TimeoutError, as documented. The shared cluster must still work after each
magic's fuzzing; ``%dist_cluster`` is fuzzed with no current cluster and a stand-in for
the cluster class, so a fuzzed start/stop/restart can never touch the shared one.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from IPython.core.error import UsageError
from ranklines import printed_starting

from dist_notebook.cluster.onranks.execute import RankError
from dist_notebook.magics import cluster_magics

from .conftest import reduce_sum, session_of

pytestmark = pytest.mark.timeout(300)

FUZZ = settings(
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)

COMMON = [
    "",
    "-",
    "--",
    "=",
    "0",
    "1",
    "2",
    "-1",
    "7",
    "0.001",
    "2.5",
    "nan",
    "inf",
    "-inf",
    "1e309",
    "abc",
    "'",
    '"',
    "'a b'",
    '"x y"',
    "\\",
    "0,1",
    "1,0",
    "0,0",
    ",",
    "0,",
    "a,b",
    "$(ls)",
    "`x`",
    ";",
    "|",
    "&&",
    "#",
    "%",
    "{}",
    "[]",
    "é",
    "💥",
    "\t",
    "--help",
    "-h",
]


def lines(vocab: list[str]) -> st.SearchStrategy[str]:
    """Lines of the magic's own words (often valid), or of anything (mostly not)."""
    word = st.one_of(st.sampled_from(vocab + COMMON), st.text(max_size=6))
    own = st.lists(st.sampled_from(vocab), max_size=4)
    return st.one_of(own, st.lists(word, max_size=6)).map(" ".join)


TOTALS: dict[str, int] = {}


def tally(magic: str, seen: dict[str, int], wanted: int) -> None:
    """Record how many cases ran; hypothesis may stop early only if it ran out of cases."""
    TOTALS[magic] = sum(seen.values())
    print(f"fuzzed {magic}: {seen}")
    assert TOTALS[magic] >= wanted * 0.9, (magic, seen)


def check(call: Callable[[], Any], line: str, *, user_code: bool = False, success: Any = ()) -> str:
    """Run one fuzzed call; return 'ok', 'usage', 'rank' or 'timeout', else fail.

    *success*: exception types that stand for success (a stand-in's own signal).
    """
    try:
        call()
    except success:
        return "ok"
    except UsageError as e:
        assert str(e).strip(), f"an empty UsageError for {line!r}"
        return "usage"
    except RankError as e:
        assert user_code, f"{line!r}: RankError without user code: {e}"
        assert str(e).startswith("rank "), str(e)
        return "rank"
    except TimeoutError as e:
        assert "--timeout" in line, f"{line!r}: TimeoutError without --timeout: {e}"
        return "timeout"
    except BaseException as e:  # noqa: BLE001 - any other outcome is the failure we look for
        pytest.fail(f"{line!r} raised {type(e).__name__}: {e}")
    return "ok"


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Run the fuzzing from a scratch directory (checkpoint dirs land there)."""
    old = os.getcwd()
    path = str(tmp_path_factory.mktemp("fuzz"))
    os.chdir(path)
    yield path
    os.chdir(old)


# --- %dist_cluster, with no cluster and a stand-in for DistCluster -----------------


class _Started(Exception):
    pass


class FakeCluster:
    """Accepts the spec the magic built, and says so instead of starting anything."""

    def __init__(self, spec: Any, progress: Any = None) -> None:
        from dist_notebook.cluster import ClusterState

        self.spec = spec
        self.state = ClusterState.NEW  # read by the magic before it starts a cluster

    def start_sync(self) -> None:
        raise _Started


CLUSTER_WORDS = [
    "start",
    "status",
    "stop",
    "restart",
    "stacks",
    "-n",
    "--gpus",
    "--cpu",
    "--backend",
    "nccl",
    "gloo",
    "auto",
    "--timeout",
    "--threads",
    "--ip",
    "127.0.0.1",
    "--launcher",
    "local",
    "mpi",
    "ssh",
    "slurm",
    "--auto-restart",
    "--all",
    "-n0",
    "--gpus=0",
]


def test_fuzz_dist_cluster(shell: Any, cluster2: Any, monkeypatch: Any) -> None:
    session = session_of(shell)
    saved, session.cluster = session.cluster, None
    monkeypatch.setattr(cluster_magics, "DistCluster", FakeCluster)
    seen: dict[str, int] = {}

    @settings(FUZZ, max_examples=300)
    @given(lines(CLUSTER_WORDS))
    def one(line: str) -> None:
        session.cluster = None
        try:
            call = lambda: shell.run_line_magic("dist_cluster", line)  # noqa: E731
            outcome = check(call, line, success=_Started)
        finally:
            session.cluster = None
        seen[outcome] = seen.get(outcome, 0) + 1

    try:
        one()
        tally("%dist_cluster", seen, 300)
    finally:
        session.cluster = saved
    assert seen.get("ok", 0) >= 3 and seen.get("usage", 0) >= 20, seen
    assert cluster2.state.value == "ready" and reduce_sum(cluster2) == ["3\n", "3\n"]


# --- magics that run on the shared cluster -----------------------------------------


def test_fuzz_dist(shell: Any, cluster2: Any) -> None:
    seen: dict[str, int] = {}

    @settings(FUZZ, max_examples=150)
    @given(lines(["--ranks", "--no-stream", "--timeout", "--ranks=0", "--ranks=1,0", "5"]))
    def one(line: str) -> None:
        outcome = check(lambda: shell.run_cell_magic("dist", line, "fuzz_x = rank\n"), line)
        seen[outcome] = seen.get(outcome, 0) + 1

    one()
    tally("%%dist", seen, 150)
    assert seen.get("ok", 0) >= 3 and seen.get("usage", 0) >= 20, seen
    assert reduce_sum(cluster2) == ["3\n", "3\n"]


def test_fuzz_dist_push(shell: Any, cluster2: Any) -> None:
    shell.user_ns.update(fuzz_a=1, fuzz_b={"k": [1, 2]}, fuzz_c="text")
    seen: dict[str, int] = {}

    @settings(FUZZ, max_examples=120)
    @given(lines(["fuzz_a", "fuzz_b", "fuzz_c", "fuzz_missing", "In", "1abc", "fuzz_a,fuzz_b"]))
    def one(line: str) -> None:
        outcome = check(lambda: shell.run_line_magic("dist_push", line), line)
        seen[outcome] = seen.get(outcome, 0) + 1

    one()
    tally("%dist_push", seen, 120)
    assert seen.get("ok", 0) >= 3 and seen.get("usage", 0) >= 20, seen
    assert shell.run_line_magic("dist_pull", "fuzz_b --all") == {0: {"k": [1, 2]}, 1: {"k": [1, 2]}}


@pytest.mark.slow
def test_fuzz_dist_pull(shell: Any, cluster2: Any) -> None:
    seen: dict[str, int] = {}
    vocab = [
        "rank",
        "world_size",
        "1",
        "+",
        "(",
        ")",
        "'a'",
        "[1,",
        "]",
        "--rank",
        "--all",
        "--rank=1",
        "undefined_name",
        "1/0",
        "x[",
        "len(",
        "None",
        "rank*2",
    ]

    @settings(FUZZ, max_examples=150)
    @given(lines(vocab))
    def one(line: str) -> None:
        call = lambda: shell.run_line_magic("dist_pull", line)  # noqa: E731
        outcome = check(call, line, user_code=True)
        seen[outcome] = seen.get(outcome, 0) + 1

    one()
    tally("%dist_pull", seen, 150)
    assert seen.get("ok", 0) >= 3 and seen.get("usage", 0) >= 20, seen
    assert reduce_sum(cluster2) == ["3\n", "3\n"]


def test_fuzz_dist_run(shell: Any, cluster2: Any, workdir: str) -> None:
    script = os.path.join(workdir, "script.py")
    with open(script, "w") as f:
        f.write("import sys\nprint(sys.argv[1:])\n")
    seen: dict[str, int] = {}

    @settings(FUZZ, max_examples=80)
    @given(lines([script, script, "missing.py", "--epochs", "-x"]))
    def one(line: str) -> None:
        outcome = check(lambda: shell.run_line_magic("dist_run", line), line)
        seen[outcome] = seen.get(outcome, 0) + 1

    one()
    tally("%dist_run", seen, 80)
    assert seen.get("ok", 0) >= 3 and seen.get("usage", 0) >= 20, seen
    assert reduce_sum(cluster2) == ["3\n", "3\n"]


TRAIN_WORDS = [
    "--name",
    "fz",
    "--steps",
    "--ranks",
    "--no-dashboard",
    "--timeout",
    "--checkpoint-every",
    "--checkpoint-dir",
    "ckpt",
    "--resume",
    "train(",
    ")",
    "fuzz_train()",
    "--steps=3",
]


def test_fuzz_dist_train(shell: Any, cluster2: Any, workdir: str) -> None:
    shell.run_cell_magic("dist", "", "def fuzz_train():\n    report(step=0, loss=1.0)\n")
    seen: dict[str, int] = {}

    @settings(FUZZ, max_examples=120)
    @given(lines(TRAIN_WORDS), st.booleans())
    def one(line: str, as_cell: bool) -> None:
        # --no-dashboard first: widgets are the dashboard's tests, not these.
        line = "--no-dashboard " + line
        if as_cell:
            call = lambda: shell.run_cell_magic("dist_train", line, "fuzz_train()\n")  # noqa: E731
        else:
            call = lambda: shell.run_line_magic("dist_train", line)  # noqa: E731
        outcome = check(call, line, user_code=True)
        seen[outcome] = seen.get(outcome, 0) + 1

    one()
    tally("%%dist_train", seen, 120)
    assert seen.get("ok", 0) >= 3 and seen.get("usage", 0) >= 20, seen
    assert reduce_sum(cluster2) == ["3\n", "3\n"]


def test_fuzz_dist_runs(shell: Any) -> None:
    seen: dict[str, int] = {}

    @settings(FUZZ, max_examples=100)
    @given(lines(["--all", "-n", "5", "   "]))
    def one(line: str) -> None:
        outcome = check(lambda: shell.run_line_magic("dist_runs", line), line)
        seen[outcome] = seen.get(outcome, 0) + 1

    one()
    tally("%dist_runs", seen, 100)
    assert seen.get("ok", 0) >= 1 and seen.get("usage", 0) >= 20, seen


# --- bad cells ------------------------------------------------------------------


def test_syntax_error_is_clear_and_labelled(shell: Any, cluster2: Any, capsys: Any) -> None:
    capsys.readouterr()
    result = shell.run_cell("%%dist\ndef broken(:\n    pass\n")
    out = capsys.readouterr().out
    error = result.error_in_exec
    assert isinstance(error, RankError) and error.ename == "SyntaxError", error
    labelled = ("[rank ", "[ranks ", "--- rank")  # a line, or the folded header
    assert any(line.startswith(labelled) and "SyntaxError" in line for line in out.splitlines())
    assert reduce_sum(cluster2) == ["3\n", "3\n"]


@pytest.mark.timeout(60)
def test_cell_that_never_returns_times_out(shell: Any, cluster2: Any) -> None:
    t0 = time.monotonic()
    with pytest.raises(TimeoutError, match="longer than 2.0 s"):
        shell.run_cell_magic("dist", "--timeout 2", "while True:\n    pass\n")
    assert time.monotonic() - t0 < 15
    assert reduce_sum(cluster2) == ["3\n", "3\n"]


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_huge_output_comes_back(shell: Any, cluster2: Any, capsys: Any) -> None:
    capsys.readouterr()
    t0 = time.monotonic()
    shell.run_cell_magic("dist", "", "print('x' * (10 * 2**20))\n")
    took = time.monotonic() - t0
    out = capsys.readouterr().out
    # Both ranks' 10 MB line, once if it folded into one (it may come in pieces).
    assert out.count("x") >= 10 * 2**20, len(out)
    assert printed_starting(out, "x") == {0, 1}
    t0 = time.monotonic()
    assert reduce_sum(cluster2) == ["3\n", "3\n"]
    assert time.monotonic() - t0 < 5
    assert took < 60, f"10 MB per rank took {took:.1f} s"


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ("-n 10000", r"-n 10000 is more ranks than this machine can hold.*--force"),
        ("--ip 10.9.9.9", r"--ip 10.9.9.9 is not an address of this machine .*127.0.0.1"),
        ("--ip not-an-address", r"--ip 'not-an-address' is not an IP address"),
    ],
    ids=["too-many-ranks", "foreign-ip", "bad-ip"],
)
def test_start_refuses_what_cannot_work_before_starting_anything(
    no_cluster: Any, flags: str, message: str
) -> None:
    import psutil

    before = {p.pid for p in psutil.Process().children(recursive=True)}
    with pytest.raises(UsageError, match=message) as info:
        no_cluster.run_line_magic("dist_cluster", f"start --cpu {flags}")
    assert len(str(info.value).splitlines()) == 1  # one line, not the controller's log
    with pytest.raises(UsageError, match=message):  # again at once: same answer
        no_cluster.run_line_magic("dist_cluster", f"start --cpu {flags}")
    started = {p.pid for p in psutil.Process().children(recursive=True)} - before
    assert started == set(), f"processes started anyway: {started}"
