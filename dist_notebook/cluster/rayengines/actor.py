"""The Ray actor that holds one rank: its bundle's CPUs and GPUs, and its engine process.

It runs on a Ray node, in a Ray worker process. ``start`` spawns the engine there
(``python -m dist_notebook.boot.engine``, the boot module every launcher starts) as its
child, which ends with it (``engine.parent``: the actor is named the engine's parent);
``wait`` returns the engine's exit code when it exits. The kernel holds a ``wait`` call
in flight for each rank: it returns an exit code, or fails with Ray's reason when the
actor or its node dies (``watch``).

The actor is threaded (``max_concurrency``): ``signal`` and ``stop`` run while
``wait`` blocks. Its files (the engine's log and profile folder) are in a private
temporary folder of the node, removed at ``stop``.

Nothing here imports Ray at module level: the kernel imports this module only once
connected, the Ray worker only to run it.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any

from ... import envvars

ENGINE_MODULE = "dist_notebook.boot.engine"
OUTPUT_LIMIT = 64 * 1024  # bytes of the engine's log sent back


class RankActor:
    """One rank: an ipyparallel engine started by this actor (see the module)."""

    def __init__(self) -> None:
        self.process: subprocess.Popen[bytes] | None = None
        self.folder = tempfile.mkdtemp(prefix="dist-notebook-rank-")  # 0700
        self.log_path = os.path.join(self.folder, "engine.log")

    def start(
        self, engine_args: list[str], env: dict[str, str], work_dir: str, cpus: float
    ) -> dict[str, Any]:
        """Spawn the engine with *env* over this worker's environment (*cpus*: its
        bundle's, its thread count unless *env* sets one); where it runs."""
        import ray

        gpus = [str(g) for g in ray.get_gpu_ids()]
        full = {**os.environ, **env}
        full[envvars.PARENT_PID] = str(os.getpid())
        if gpus:
            # The GPUs Ray gave this actor, by their ids on the node.
            full["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)
            full[envvars.DEVICES] = ",".join(gpus)
            full.pop(envvars.CPU, None)
        if "OMP_NUM_THREADS" not in env:
            threads = str(max(1, int(cpus)))
            full["OMP_NUM_THREADS"] = full["MKL_NUM_THREADS"] = threads
        args = [sys.executable, "-m", ENGINE_MODULE, *engine_args]
        # The engine's profile folder must exist (ipengine does not create one it is
        # given); it holds only the engine's own files: its connection comes in the env.
        profile = os.path.join(self.folder, "profile")
        os.makedirs(profile, mode=0o700, exist_ok=True)
        args.append(f"--profile-dir={profile}")
        cwd = work_dir if work_dir and os.path.isdir(work_dir) else self.folder
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                args, env=full, cwd=cwd, stdout=log, stderr=subprocess.STDOUT
            )
        context = ray.get_runtime_context()
        return {
            "pid": self.process.pid,
            "actor_pid": os.getpid(),
            "host": socket.gethostname(),
            "node_id": context.get_node_id(),
            "node_ip": ray.util.get_node_ip_address(),
            "gpus": gpus,
        }

    def wait(self) -> int:
        """Block until the engine exits; its exit code (negative: the signal)."""
        assert self.process is not None
        return self.process.wait()

    def signal(self, sig: int) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(sig)

    def output(self) -> str:
        """The end of the engine's log."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(max(0, os.path.getsize(self.log_path) - OUTPUT_LIMIT))
                return f.read().decode(errors="replace")
        except FileNotFoundError:
            return ""

    def stop(self, timeout: float) -> int | None:
        """End the engine (SIGTERM, SIGKILL after *timeout* s), remove the files; its
        exit code."""
        code = None
        if self.process is not None:
            self.signal(signal.SIGTERM)
            deadline = time.monotonic() + timeout
            while self.process.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            if self.process.poll() is None:
                self.process.kill()
            code = self.process.wait()
        shutil.rmtree(self.folder, ignore_errors=True)
        return code
