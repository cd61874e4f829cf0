"""Every environment variable dist-notebook reads or sets, by name, in one place.

Set by the user (in the kernel's or a script's environment):

- ``STORE``: the run store's SQLite file (default: one per user, ``store.location``).
- ``WARM``: ``1`` keeps every cluster spec's warm pool filled (``cluster.pool``).
- ``FORKSERVER``: ``0`` spawns every local engine as a new process (``cluster.forkserver``).
- ``SSH_CONFIG``: the ssh client config of ssh and mpi engines (default ``~/.ssh/config``).

Set by the kernel for the engines it starts (read on the ranks, ``engine.rankenv``):

- ``RANK``, ``LOCAL_RANK``, ``LOCAL_SIZE``, ``NODE``, ``WORLD_SIZE``: the rank's place,
  before torch is imported (remote launchers' own variables are read too).
- ``RANK_OFFSET``: rank of the first engine of a local set (a replacement's rank).
- ``LOCAL_OFFSET``: first local rank of a set that scale adds to a host.
- ``HOST_NAME``, ``ENGINE_SET``: the host and the engine set a rank belongs to.
- ``CONTROLLER_IP``: the controller's address, seen from a remote host.
- ``DEVICES``, ``GPUS_PER_NODE``, ``CPU``: the rank's GPU, or CPU only.
- ``PARENT_PID``: the process whose death ends this one (``engine.parent``).
- ``STACK_DIR``: where a rank writes its stacks on SIGUSR1 (``engine.stacks``).
- ``GLOO_IFNAME``: the network interface the rank picked for gloo (set on the rank).
"""

from __future__ import annotations

PREFIX = "DIST_NOTEBOOK_"

STORE = "DIST_NOTEBOOK_STORE"
WARM = "DIST_NOTEBOOK_WARM"
FORKSERVER = "DIST_NOTEBOOK_FORKSERVER"
SSH_CONFIG = "DIST_NOTEBOOK_SSH_CONFIG"

RANK = "DIST_NOTEBOOK_RANK"
LOCAL_RANK = "DIST_NOTEBOOK_LOCAL_RANK"
LOCAL_SIZE = "DIST_NOTEBOOK_LOCAL_SIZE"
NODE = "DIST_NOTEBOOK_NODE"
WORLD_SIZE = "DIST_NOTEBOOK_WORLD_SIZE"
RANK_OFFSET = "DIST_NOTEBOOK_RANK_OFFSET"
LOCAL_OFFSET = "DIST_NOTEBOOK_LOCAL_OFFSET"
HOST_NAME = "DIST_NOTEBOOK_HOST_NAME"
ENGINE_SET = "DIST_NOTEBOOK_ENGINE_SET"
CONTROLLER_IP = "DIST_NOTEBOOK_CONTROLLER_IP"
DEVICES = "DIST_NOTEBOOK_DEVICES"
GPUS_PER_NODE = "DIST_NOTEBOOK_GPUS_PER_NODE"
CPU = "DIST_NOTEBOOK_CPU"
PARENT_PID = "DIST_NOTEBOOK_PARENT_PID"
STACK_DIR = "DIST_NOTEBOOK_STACK_DIR"
GLOO_IFNAME = "DIST_NOTEBOOK_GLOO_IFNAME"

ALL = frozenset(
    value for name, value in dict(globals()).items() if name.isupper() and name != "PREFIX"
)
