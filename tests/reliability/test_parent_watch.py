"""A process of ours whose kernel died before its parent watch began still ends.

A kernel killed while a cluster starts can die between launching the controller (or an
engine) and that process's first look at its parent. The process then already belongs
to init (or a subreaper), and the pid in its environment names a parent it never sees.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import psutil
import pytest

# The launched process: looks at its parent only after the launcher has exited.
CHILD = textwrap.dedent(
    """
    import sys, time
    sys.stdin.read()  # EOF: the launcher is gone
    from dist_notebook.engine.parent import watch_parent
    watch_parent(period=0.05)
    time.sleep(60)
    """
)

# The launcher (a kernel that dies during a start): starts the child, names itself as
# its parent, prints the child's pid and exits without clean-up.
LAUNCHER = textwrap.dedent(
    """
    import os, subprocess, sys
    env = dict(os.environ, DIST_NOTEBOOK_PARENT_PID=str(os.getpid()))
    child = subprocess.Popen([sys.executable, "-c", sys.argv[1]], env=env,
                             stdin=subprocess.PIPE)
    print(child.pid, flush=True)
    os._exit(0)
    """
)


def test_a_process_whose_parent_died_before_its_watch_ends() -> None:
    out = subprocess.run(
        [sys.executable, "-c", LAUNCHER, CHILD],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        cwd=os.getcwd(),
    )
    child = psutil.Process(int(out.stdout.split()[0]))
    try:
        # The launcher's exit closed the child's stdin; it then starts its watch.
        child.wait(timeout=30)
    except psutil.TimeoutExpired:
        child.kill()
        pytest.fail("the process outlived its parent: the watch never started")
