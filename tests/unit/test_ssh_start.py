"""ssh engines start together: all hosts at once, a bounded number of a host at a time.

ipyparallel's SSHEngineSetLauncher starts one engine's ssh after the other's; on a busy
host each takes 1-5 s, so 32 engines on 4 hosts waited 140 s for the last. The engines'
ssh here is a stand-in that records when each connection began and ended (and answers as
the remote shell does, with the pid), so the test sees how many were open at once.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from traitlets.config import Config

from dist_notebook import envvars
from dist_notebook.cluster.launchers import SSH_CONFIG_ENV, RankSSHEngineSetLauncher

STAND_IN = """
import os, sys, time
script = sys.stdin.read()
host = sys.argv[sys.argv.index("--") - 1]  # ssh [options] host -- command
began = time.monotonic()
time.sleep(float(os.environ["STAND_IN_DELAY"]))
if "nohup" in script:  # a start (not the exit-waiting thread's look)
    if host in os.environ.get("STAND_IN_FAIL", "").split(","):
        sys.exit("ssh: connect to host " + host + ": Connection refused")
    with open(os.environ["STAND_IN_LOG"], "a") as f:
        f.write(f"{host} {began} {time.monotonic()}\\n")
    print(f"__remote_pid={os.getpid()}__")
"""


def most_at_once(spans: list[tuple[float, float]]) -> int:
    edges = sorted([(b, 1) for b, _ in spans] + [(e, -1) for _, e in spans])
    now = top = 0
    for _, step in edges:
        now += step
        top = max(top, now)
    return top


def start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, engines: dict[str, int], **traits: Any
) -> tuple[RankSSHEngineSetLauncher, dict[str, list[tuple[float, float]]]]:
    script = tmp_path / "ssh.py"
    script.write_text(STAND_IN)
    log = tmp_path / "starts.log"
    monkeypatch.setenv("STAND_IN_LOG", str(log))
    monkeypatch.setenv("STAND_IN_DELAY", "0.4")
    # The engines' ssh options as a user without a client config of ours has them (the
    # multinode tests' session points them at their test hosts' config).
    monkeypatch.delenv(SSH_CONFIG_ENV, raising=False)
    (tmp_path / "profile" / "log").mkdir(parents=True)
    launcher = RankSSHEngineSetLauncher(
        engines=engines,
        profile_dir=str(tmp_path / "profile"),
        cluster_id="t",
        ssh_cmd=[sys.executable, str(script)],
        **traits,
    )
    try:
        launcher.start(sum(engines.values()))
    finally:
        spans: dict[str, list[tuple[float, float]]] = {}
        for line in log.read_text().splitlines() if log.exists() else []:
            host, began, ended = line.split()
            spans.setdefault(host, []).append((float(began), float(ended)))
    return launcher, spans


def test_every_host_starts_its_engines_together_up_to_the_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    launcher, spans = start(tmp_path, monkeypatch, {"h1": 5, "h2": 3}, parallel_per_host=3)
    assert sorted(launcher.launchers) == ["h1/0", "h1/1", "h1/2", "h1/3", "h1/4"] + [
        "h2/0",
        "h2/1",
        "h2/2",
    ]
    assert all(el.state == "running" and el.pid for el in launcher.launchers.values())
    assert len(spans["h1"]) == 5 and len(spans["h2"]) == 3
    # One after another (ipyparallel's way) would never have two open at once.
    assert most_at_once(spans["h1"]) == 3, spans["h1"]  # the bound, not more
    assert most_at_once(spans["h1"] + spans["h2"]) > 3  # both hosts at once
    # Each engine is told its own local rank, as a sequential start tells it.
    ranks = sorted(el.get_env()[envvars.LOCAL_RANK] for el in launcher.launchers.values())
    assert ranks == ["0", "0", "1", "1", "2", "2", "3", "4"]


def test_a_host_that_copies_its_files_starts_its_first_engine_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a shared filesystem the first engine of a host sends the connection file
    the others read: it starts before them."""
    from ipyparallel.cluster.launcher import SSHLauncher, sshx

    def copying_start(self: Any, hostname: Any = None, user: Any = None, port: Any = None) -> None:
        # ipyparallel's start without its remote Python checks: the one ssh round trip
        # of the engine itself (the stand-in records it), after which the files are there.
        self.hostname = hostname
        cmd = self.program + self.program_args
        self.pid = sshx(self._ssh(), cmd, self.get_env(), self.remote_output_file)
        self.notify_start({"host": self.location, "pid": self.pid})

    monkeypatch.setattr(SSHLauncher, "start", copying_start)
    config = Config({"RankSSHEngineLauncher": {"shared_filesystem": False}})
    launcher, spans = start(tmp_path, monkeypatch, {"h1": 4}, config=config)
    assert launcher.launchers["h1/1"].shared_filesystem is False
    first = launcher.launchers["h1/0"]
    assert first.state == "running"
    spans_h1 = sorted(spans["h1"])
    assert all(began >= spans_h1[0][1] for began, _ in spans_h1[1:]), spans_h1
    assert most_at_once(spans_h1[1:]) == 3


def test_a_failed_start_raises_once_the_others_have_started(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STAND_IN_FAIL", "h2")
    with pytest.raises(Exception, match="Connection refused|returned non-zero") as failed:
        start(tmp_path, monkeypatch, {"h1": 2, "h2": 2})
    assert failed.value is not None
    log = (tmp_path / "starts.log").read_text().split()
    assert log.count("h1") == 2 and "h2" not in log  # h1's engines started all the same
