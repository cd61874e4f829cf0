"""Fork server: ``python -m dist_notebook.boot.forkserver``, one per kernel.

Importing torch and ipyparallel's engine is most of an engine's start (about 2.3 CPU-s
on a 2-core machine; four ranks import them four times over on two cores). This process
imports them once, as soon as ``%load_ext dist_notebook`` runs, and then forks each local
engine from itself: a forked engine starts with every module loaded and registers in
tens of milliseconds.

Once no request has come for a second (30 s once it has forked engines, which are then
starting), it also imports what the first training cell would wait for (torch._dynamo,
which DDP's constructor imports: 1-2 s more), so engines forked after that have it too.
A start of many ranks (``cluster.forkserver.warm_first``) asks for it before its first
fork instead: done once here, it is not done again by every engine after the start.

Protocol (JSON lines). The kernel writes requests on our stdin::

    {"id": 1, "argv": [...], "env": {...}, "cwd": "...", "output": "<log file>"}

and reads from our stdout ``{"ready": true}`` once (or ``{"error": "..."}`` and we exit),
then ``{"id": 1, "pid": 1234}`` (or ``{"id": 1, "error": "..."}``) per request, and
``{"exit": 1234, "code": -9}`` when a forked engine ends (negative: the signal). Before
forking many engines the kernel writes ``{"warm": true}``: we do the warm imports below
now (if not done yet) and answer ``{"warmed": true}``.

Rules that make forking safe here: this process starts no thread of its own and runs
no torch operation (no OpenMP pool, no CUDA context) before it forks (numpy's OpenBLAS
starts a worker at import and stops it around each fork by itself, as it does for a
DataLoader's forked workers); each child gets the
environment the launcher computed (rank, devices, threads) before it touches torch,
sets its thread count explicitly (OpenMP read OMP_NUM_THREADS when torch was loaded
here), reseeds numpy, and becomes its own session as a spawned engine would.

Lifetime: we end at EOF on stdin (the kernel closed us or died) or when the kernel is no
longer our parent; our engines watch us as their parent, so they end
with us and nothing outlives the kernel.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import select
import signal
import sys
import time
import traceback
from typing import Any

PARENT_POLL = 0.25  # seconds between checks that the kernel is still our parent
# Read by the interpreter at start-up only; PYTHONPATH is redone in the child.
STARTUP_VARS = (
    "PYTHONHASHSEED",
    "PYTHONOPTIMIZE",
    "PYTHONWARNINGS",
    "PYTHONSAFEPATH",
    "PYTHONNOUSERSITE",
    "PYTHONUSERBASE",
    "PYTHONHOME",
    "PYTHONDEVMODE",
    "PYTHONUTF8",
    "PYTHONIOENCODING",
)
IDLE_BEFORE_WARM = 1.0  # seconds without a request before the extra imports (``_warm``)
IDLE_AFTER_FORKS = 30.0  # the same once engines have been forked


def _preload() -> None:
    """Import what every engine imports, in the order its boot would."""
    from . import engine as engine_boot

    engine_boot._no_debugger()
    import ipyparallel.engine.app  # noqa: F401
    import ipyparallel.engine.kernel  # noqa: F401
    import torch  # noqa: F401
    import torch.distributed  # noqa: F401

    from ..engine import group, parent, rankenv, reporter, stacks, values  # noqa: F401


def _warm() -> None:
    """What the first training cell would import (``group._warm_after_start``): done
    here once the server has been idle a moment, so engines forked after it have it."""
    import cloudpickle  # noqa: F401
    import torch.nn.parallel  # noqa: F401

    from .. import privates

    privates.import_dynamo()


def _warm_now() -> None:
    try:
        _warm()
        gc.freeze()
    except Exception as e:  # an optimisation only: engines import it later
        print(f"dist-notebook fork server: warm imports failed: {e}", file=sys.stderr)


def _send(out: int, message: dict[str, Any]) -> None:
    data = (json.dumps(message) + "\n").encode()
    while data:
        data = data[os.write(out, data) :]


def _name_process(name: bytes) -> None:
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.prctl(15, ctypes.c_char_p(name), 0, 0, 0)  # PR_SET_NAME
    except (OSError, AttributeError) as e:  # not Linux: the name stays "python"
        print(f"dist-notebook: process name not set: {e}", file=sys.stderr)


def _entries(value: str) -> list[str]:
    return [p for p in value.split(os.pathsep) if p]


def _search_path(cwd: str, pythonpath: str) -> list[str]:
    """sys.path as ``python -m`` started in *cwd* with *pythonpath* would have it: the
    kernel may have changed PYTHONPATH since it started us (a test harness does)."""
    ours = {os.path.abspath(p) for p in _entries(os.environ.get("PYTHONPATH", ""))}
    rest = [p for p in sys.path[1:] if os.path.abspath(p) not in ours]
    return [cwd, *(os.path.abspath(p) for p in _entries(pythonpath)), *rest]


def _startup_mismatch(env: dict[str, str]) -> str:
    """Interpreter settings read only at start-up that differ in *env*: such an engine
    must be a fresh process (the kernel spawns it instead)."""
    changed = [name for name in STARTUP_VARS if env.get(name) != os.environ.get(name)]
    return ", ".join(changed)


def _child(request: dict[str, Any], keep: tuple[int, ...]) -> int:
    """In the forked child: become the engine the request describes; return its exit code."""
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    os.setsid()  # as a spawned engine: a Ctrl-C to the kernel's group is not ours
    for fd in keep:
        os.close(fd)
    null = os.open(os.devnull, os.O_RDONLY)
    log = os.open(request["output"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    os.dup2(null, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(null)
    os.close(log)
    cwd = os.path.abspath(request["cwd"])
    os.chdir(cwd)
    sys.path[:] = _search_path(cwd, request["env"].get("PYTHONPATH", ""))
    os.environ.clear()
    os.environ.update(request["env"])
    # torch read TORCH_DISTRIBUTED_DEBUG when the server imported it; read it again, as
    # a spawned engine would at its import (the kernel's value may have changed since).
    import torch.distributed as dist

    if dist.is_available():
        dist.set_debug_level_from_env()
    # ipyparallel's apps take their working directory from a default read at their
    # import (here: the server's start), then chdir to it: give them ours.
    sys.argv = ["ipengine", f"--BaseParallelApplication.work_dir={cwd}", *request["argv"]]
    _name_process(b"dist-engine")  # what ps -o comm and top show, not "python"
    if "numpy.random" in sys.modules:
        # numpy seeded its global generator here, once; Python's random reseeds by itself.
        sys.modules["numpy.random"].seed()
    from . import engine as engine_boot

    try:
        engine_boot.main()
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:
        traceback.print_exc()
        return 1
    return 0


def _fork(request: dict[str, Any], keep: tuple[int, ...]) -> int:
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            code = _child(request, keep)
        finally:
            with contextlib.suppress(Exception):
                sys.stdout.flush()
                sys.stderr.flush()
            os._exit(code)
    return pid


def _reap(out: int) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        _send(out, {"exit": pid, "code": os.waitstatus_to_exitcode(status)})


def serve(inp: int, out: int, parent: int | None = None) -> None:
    """Answer fork requests on *inp* until EOF or until *parent* is no longer our
    parent; report exits on *out*. Single-threaded: the parent check is a poll here,
    not ``engine.parent``'s watch thread, so no thread ever exists to be forked."""
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # only to wake select
    buffer = b""
    warmed = forked = False
    last_request = time.monotonic()
    while parent is None or os.getppid() == parent:
        ready, _, _ = select.select([inp, wake_r], [], [], PARENT_POLL)
        if wake_r in ready:
            os.read(wake_r, 4096)
        _reap(out)
        if inp not in ready:
            # Before any fork, after a second of quiet (the user is writing the next
            # cell): a start that waited for us sends its requests at once. After forks,
            # only after a long quiet: the engines just forked are still starting, and
            # the import would take the cores from them (and block our next requests).
            idle = time.monotonic() - last_request
            if not warmed and idle > (IDLE_BEFORE_WARM if not forked else IDLE_AFTER_FORKS):
                warmed = True
                _warm_now()
            continue
        last_request = time.monotonic()
        forked = True
        chunk = os.read(inp, 65536)
        if not chunk:
            return
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            request = json.loads(line)
            if "warm" in request:
                # The kernel asks before forking many engines (cluster.forkserver.warm_first).
                if not warmed:
                    warmed = True
                    _warm_now()
                _send(out, {"warmed": True})
                continue
            if time.time() > request.get("deadline", float("inf")):
                # The kernel stopped waiting (and spawns this engine itself): never fork it.
                _send(out, {"id": request.get("id"), "error": "the kernel gave up on it"})
                continue
            changed = _startup_mismatch(request["env"])
            if changed:
                reason = f"{changed} changed since the fork server started"
                _send(out, {"id": request.get("id"), "error": reason})
                continue
            try:
                pid = _fork(request, (inp, out, wake_r, wake_w))
            except OSError as e:
                _send(out, {"id": request.get("id"), "error": f"fork failed: {e}"})
            else:
                _send(out, {"id": request.get("id"), "pid": pid})


def main() -> None:
    from ..engine.parent import die_with_parent, named_parent

    parent = named_parent()
    if parent is not None:
        # Ended by the OS with the kernel even while torch is being imported below.
        die_with_parent(parent)
    # Our own stdout is the protocol; anything else printed goes to stderr.
    out = os.dup(1)
    os.dup2(2, 1)
    try:
        _preload()
    except BaseException as e:
        _send(out, {"error": f"{type(e).__name__}: {e}"})
        raise SystemExit(1) from e
    # Out of the collector's sight in every engine (and their pages stay shared: a
    # collection no longer writes to them), as the gc module's documentation advises
    # before forking.
    gc.freeze()
    _send(out, {"ready": True})
    serve(0, out, parent)


if __name__ == "__main__":
    main()
