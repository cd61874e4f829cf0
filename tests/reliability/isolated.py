"""Run a Python script in a mount namespace of its own: read-only directories, or an
/etc/hosts that maps this machine's name elsewhere, without touching the machine.

Needs root (CI runs as root); otherwise a read-only directory is made with its mode,
and a test that needs its own /etc/hosts says it cannot run.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

import pytest


def can_isolate() -> bool:
    return os.geteuid() == 0 and shutil.which("unshare") is not None


def run_isolated(
    script: str,
    *,
    read_only: Iterable[Path] = (),
    hosts: Path | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """Run *script* with `python -c`; *read_only* directories and *hosts* (bound over
    /etc/hosts) hold for this process tree only."""
    command = [sys.executable, "-c", script]
    if can_isolate():
        mounts = []
        for directory in read_only:
            d = shlex.quote(str(directory))
            mounts.append(f"mount --bind {d} {d} && mount -o remount,bind,ro {d} {d}")
        if hosts is not None:
            mounts.append(f"mount --bind {shlex.quote(str(hosts))} /etc/hosts")
        shell = " && ".join([*mounts, 'exec "$@"'])
        command = ["unshare", "--mount", "--propagation", "private", "sh", "-c", shell, "sh"]
        command += [sys.executable, "-c", script]
    elif hosts is not None:
        pytest.skip("a private /etc/hosts needs root (a mount namespace); CI runs as root")
    else:
        for directory in read_only:
            directory.chmod(0o500)
    try:
        return subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=dict(os.environ, PYTHONUNBUFFERED="1", **(env or {})),
        )
    except subprocess.TimeoutExpired as hung:
        # The whole output, not the repr's first characters: where it hung is at its end.
        out, err = (_text(x)[-4000:] for x in (hung.stdout, hung.stderr))
        raise AssertionError(
            f"the script ran past {timeout} s\n--- stdout\n{out}\n--- stderr\n{err}"
        ) from None
    finally:
        if not can_isolate():
            for directory in read_only:
                directory.chmod(0o700)


def _text(data: bytes | str | None) -> str:
    if data is None:
        return ""
    return data if isinstance(data, str) else data.decode(errors="replace")
