"""Local engines forked from the kernel's fork server (cluster/forkserver.py).

A forked engine must be indistinguishable from a spawned one where it matters: its own
environment, thread count, random state, working directory and session; its exit code
reaches the cluster; it ends with the kernel; and with the server gone or switched off,
engines are spawned as before.
"""

from __future__ import annotations

import ast
import json
import os
import signal
import time
from collections.abc import Iterator
from typing import Any

import psutil
import pytest

from dist_notebook import ClusterSpec, DistCluster
from dist_notebook.cluster import forkserver
from dist_notebook.cluster.onranks.execute import run_on_ranks

from .procs import kill_all, wait_gone

ALL_REDUCE = "import json\nt = torch.ones(1)\ndist.all_reduce(t)\njson.dumps(t.item())"


def values(cluster: DistCluster, code: str) -> list[Any]:
    outputs = run_on_ranks(cluster, code)
    texts = [o.result["data"]["text/plain"] for o in outputs if o.result]
    return [json.loads(ast.literal_eval(t)) for t in texts]


def dead_within(cluster: DistCluster, ranks: set[int], timeout: float) -> dict[int, str]:
    """The cluster's dead ranks once its launchers have recorded the exits of *ranks*."""
    deadline = time.monotonic() + timeout
    dead = cluster.dead_ranks()
    while not ranks <= set(dead) and time.monotonic() < deadline:
        time.sleep(0.05)
        dead = cluster.dead_ranks()
    return dead


@pytest.fixture(scope="module")
def server(shell: Any) -> forkserver.ForkServer:
    """The session's server, started by ``%load_ext`` (the ``shell`` fixture)."""
    running = forkserver.current()
    assert running is not None, "%load_ext dist_notebook did not start the fork server"
    assert running.wait_ready(), f"the fork server failed: {running.error}"
    return running


@pytest.fixture
def forked(server: forkserver.ForkServer) -> Iterator[DistCluster]:
    cluster = DistCluster(ClusterSpec(n=2, threads=1))
    cluster.start_sync()
    yield cluster
    pids = [r.pid for r in cluster.ranks]
    cluster.stop_sync()
    kill_all(wait_gone(pids, 10))


def test_engines_are_forked_with_their_own_state(
    server: forkserver.ForkServer, forked: DistCluster
) -> None:
    probe = (
        "import json, os, sys, numpy, torch\n"
        "json.dumps({'ppid': os.getppid(), 'sid': os.getsid(0) == os.getpid(),"
        " 'threads': torch.get_num_threads(), 'rank_env': os.environ['RANK'],"
        " 'cuda': os.environ.get('CUDA_VISIBLE_DEVICES'), 'cwd': os.getcwd(),"
        " 'path': sys.path, 'np': int(numpy.random.randint(1 << 30)),"
        " 'comm': open('/proc/self/comm').read().strip(),"
        " 'frozen': __import__('gc').get_freeze_count()})"
    )
    got = values(forked, probe)
    assert [g["rank_env"] for g in got] == ["0", "1"]
    for g in got:
        assert g["ppid"] == server.pid  # forked, not spawned
        assert g["sid"]  # its own session, as a spawned engine
        assert g["threads"] == 1  # the spec's, not what the server loaded torch with
        assert g["cuda"] == ""  # CPU ranks hide GPUs: the launcher's environment
        assert g["cwd"] == os.getcwd() and g["cwd"] in g["path"]  # as ``python -m`` here
        assert g["comm"] == "dist-engine"
        # What the server imported is out of the collector's sight (boot/forkserver.py).
        assert g["frozen"] > 100_000
    assert got[0]["np"] != got[1]["np"], "numpy's random state is shared across ranks"
    assert values(forked, ALL_REDUCE) == [2.0, 2.0]


def test_a_killed_engine_reports_its_signal(forked: DistCluster) -> None:
    pid = forked.ranks[1].pid
    os.kill(pid, signal.SIGKILL)
    assert wait_gone([pid], 10) == []
    # The exit code comes from the fork server, the engine's parent.
    assert dead_within(forked, {1}, 10).get(1) == "signal SIGKILL"


def spawned_engine(cluster: DistCluster) -> bool:
    """Every rank runs ``boot.engine`` as its own command (not forked)."""
    return all(
        "dist_notebook.boot.engine" in psutil.Process(r.pid).cmdline() for r in cluster.ranks
    )


def test_switched_off_engines_are_spawned(
    server: forkserver.ForkServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(forkserver.ENV_SWITCH, "0")
    assert forkserver.prestart() is None and not forkserver.enabled()
    monkeypatch.setattr(forkserver, "_server", None)
    with DistCluster(ClusterSpec(n=2)) as cluster:
        assert spawned_engine(cluster)
        assert values(cluster, ALL_REDUCE) == [2.0, 2.0]
        # A spawned engine freezes what its start made when its group is created.
        frozen = values(cluster, "import gc, json\njson.dumps(gc.get_freeze_count())")
        assert min(frozen) > 100_000


def test_pythonpath_set_after_load_ext_reaches_forked_engines(
    server: forkserver.ForkServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    (tmp_path / "late_module.py").write_text("VALUE = 7\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    with DistCluster(ClusterSpec(n=2)) as cluster:
        got = values(
            cluster, "import json, os, late_module\njson.dumps([os.getppid(), late_module.VALUE])"
        )
        assert got == [[server.pid, 7], [server.pid, 7]]


def test_a_start_up_setting_changed_after_load_ext_spawns_engines(
    server: forkserver.ForkServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONHASHSEED", "123")  # read only when an interpreter starts
    with DistCluster(ClusterSpec(n=2)) as cluster:
        assert spawned_engine(cluster)
        assert values(cluster, "import json, os\njson.dumps(os.environ['PYTHONHASHSEED'])") == [
            "123",
            "123",
        ]
        assert values(cluster, ALL_REDUCE) == [2.0, 2.0]


def test_a_dead_server_ends_its_engines_and_the_next_start_spawns(
    server: forkserver.ForkServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A server of this test's own: the session's also serves the shared cluster's engines.
    own = forkserver.ForkServer()
    assert own.wait_ready(), own.error
    monkeypatch.setattr(forkserver, "_server", own)
    cluster = DistCluster(ClusterSpec(n=2))
    try:
        cluster.start_sync()
        pids = [r.pid for r in cluster.ranks]
        assert {psutil.Process(p).ppid() for p in pids} == {own.pid}
        own.proc.kill()
        # Its engines see their parent gone within the parent watch's period.
        assert wait_gone(pids, 5) == []
        assert forkserver.current() is None
        assert set(dead_within(cluster, {0, 1}, 10)) == {0, 1}
        cluster.restart_sync()
        assert spawned_engine(cluster)
        assert values(cluster, ALL_REDUCE) == [2.0, 2.0]
        replacement = forkserver.prestart()  # a dead server is replaced by the next one
        assert replacement is not None and replacement.pid != own.pid
        replacement.close()
    finally:
        cluster.stop_sync()
        own.close()


def test_the_kernels_cwd_and_distributed_debug_now_reach_forked_engines(
    server: forkserver.ForkServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """What a spawned engine takes at its start, a forked one takes at its fork: the
    kernel's working directory now and TORCH_DISTRIBUTED_DEBUG set after %load_ext."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TORCH_DISTRIBUTED_DEBUG", "INFO")
    probe = "import json, os\njson.dumps([os.getppid(), os.getcwd(), str(dist.get_debug_level())])"
    for _ in range(3):
        # A server busy with its idle-time imports past the reply timeout is given up on
        # and the ranks are spawned (which take both too): then start again, to fork.
        with DistCluster(ClusterSpec(n=2)) as cluster:
            got = values(cluster, probe)
        if got[0][0] == server.pid:
            break
    assert got == [[server.pid, str(tmp_path), "DebugLevel.INFO"]] * 2


def test_a_request_the_kernel_gave_up_on_is_never_forked(server: forkserver.ForkServer) -> None:
    """Past its deadline the server refuses a request; and an engine forked for a request
    the kernel stopped waiting for (it spawns that rank itself) is ended at once."""
    import json as json_

    children = {p.pid for p in psutil.Process(server.pid).children()}

    def send(request: dict[str, Any]) -> int:
        with server._cond:
            server._next_id += 1
            request_id = server._next_id
        line = {"id": request_id, "argv": ENGINE_WAITING, "env": dict(os.environ)}
        line.update(cwd=os.getcwd(), output=os.devnull, **request)
        assert server.proc.stdin is not None
        with server._write_lock:
            server.proc.stdin.write(json_.dumps(line).encode() + b"\n")
            server.proc.stdin.flush()
        return request_id

    late = send({"deadline": time.time() - 1})
    deadline = time.monotonic() + 10
    while late not in server._replies:
        assert time.monotonic() < deadline, "no reply to the late request"
        time.sleep(0.02)
    assert server._replies.pop(late) == {"id": late, "error": "the kernel gave up on it"}
    assert {p.pid for p in psutil.Process(server.pid).children()} == children  # no fork

    with server._cond:
        server._abandoned.add(server._next_id + 1)  # as spawn() does at its timeout
    send({"deadline": time.time() + 30})
    deadline = time.monotonic() + 10
    while server._abandoned:
        assert time.monotonic() < deadline, "the reply to the abandoned request never came"
        time.sleep(0.02)
    time.sleep(0.5)
    stray = {p.pid for p in psutil.Process(server.pid).children()} - children
    assert wait_gone(sorted(stray), 5) == []  # forked, then ended by the kernel


# An engine that waits 30 s for a connection file that never comes (a long-lived fork).
ENGINE_WAITING = [
    "--IPEngine.url_file=/nonexistent/ipcontroller-engine.json",
    "--IPEngine.wait_for_url_file=30",
]


def test_a_many_rank_start_has_the_server_warm_before_its_first_fork(
    server: forkserver.ForkServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At WARM_FIRST_RANKS_PER_CORE ranks a core or more, spawn() asks the server for its
    warm imports first (once), so the engines do not each import them after the start."""
    cores = os.cpu_count() or 1
    many = {"DIST_NOTEBOOK_WORLD_SIZE": str(forkserver.WARM_FIRST_RANKS_PER_CORE * cores)}
    few = {"DIST_NOTEBOOK_WORLD_SIZE": str(forkserver.WARM_FIRST_RANKS_PER_CORE * cores - 1)}
    assert forkserver.warm_first(many) and not forkserver.warm_first(few)
    assert not forkserver.warm_first({})
    assert not forkserver.warm_first({"DIST_NOTEBOOK_WORLD_SIZE": "x"})

    fresh = forkserver.ForkServer()
    try:
        assert fresh.wait_ready(), fresh.error
        asked = []
        real_warm = fresh.warm

        def warm(timeout: float = forkserver.READY_TIMEOUT) -> bool:
            asked.append(timeout)
            return real_warm(timeout)

        monkeypatch.setattr(fresh, "warm", warm)
        env = dict(os.environ)
        fresh.spawn(ENGINE_WAITING, {**env, **few}, os.getcwd(), os.devnull)
        assert asked == [] and not fresh._warmed
        fresh.spawn(ENGINE_WAITING, {**env, **many}, os.getcwd(), os.devnull)
        assert len(asked) == 1 and fresh._warmed  # the server answered "warmed"
        fresh.spawn(ENGINE_WAITING, {**env, **many}, os.getcwd(), os.devnull)
        assert fresh.warm() is True  # once warmed, at once: nothing is sent again
    finally:
        children = [p.pid for p in psutil.Process(fresh.pid).children()]
        fresh.close()
        kill_all(wait_gone(children, 10))
