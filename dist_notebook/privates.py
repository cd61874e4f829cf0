"""Every private name of ipyparallel, ipykernel, IPython and torch that dist-notebook uses.

After an upgrade of one of those libraries, this is the file to open: each function
below wraps one private attribute or method, says what it relies on and which
versions were checked, and ``PRIVATES`` lists every such name (the ones our subclasses
override as well as the ones we call) so ``tests/unit/test_privates.py`` can check that
each one still exists in the installed version, and names that version when one is gone.

Checked with the versions in ``CHECKED``; the dependency ranges in ``pyproject.toml``
allow others. Nothing here imports torch at import time (the kernel imports this module
before torch is needed); each function imports what it touches.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

CHECKED = {
    "ipyparallel": "9.2.0",
    "ipykernel": "7.4.0",
    "IPython": "9.18.1",
    "torch": "2.13.0",
    "ray": "2.60.0",  # optional: the [ray] extra
}


@dataclass(frozen=True)
class Private:
    """One private name: ``owner`` (module path, then ``:`` and a class) holds ``name``.

    ``instance`` marks an attribute set on instances (in ``__init__`` or a method), not
    on the class; ``why`` is the use, in a few words; ``overridden_in`` names our module
    whose subclass overrides it (the one place besides this one where it is written)."""

    library: str
    owner: str
    name: str
    why: str
    instance: bool = False
    overridden_in: str = ""


PRIVATES: tuple[Private, ...] = (
    # ipyparallel: the kernel's side (client, async results, launchers).
    Private("ipyparallel", "ipyparallel.client.asyncresult:AsyncResult", "_children",
            "one future per engine of a call: which ranks are done", instance=True),
    Private("ipyparallel", "ipyparallel.client.asyncresult:AsyncResult", "_metadata",
            "each engine's reply metadata: which rank raised, its output", instance=True),
    Private("ipyparallel", "ipyparallel.client.client:Client", "_send_control_request",
            "a control-channel request of our own msg_type to some engines"),
    Private("ipyparallel", "ipyparallel.cluster.cluster:Cluster", "_new_engine_set_id",
            "the id of an engine set that scale starts, known before it starts"),
    Private("ipyparallel", "ipyparallel.cluster.launcher:LocalProcessLauncher", "_wait",
            "overridden: a forked engine's exit is reported by the fork server",
            overridden_in="dist_notebook/cluster/launchers.py"),
    Private("ipyparallel", "ipyparallel.cluster.launcher:LocalProcessLauncher", "_start_waiting",
            "called after a start ipyparallel's start() would have done"),
    Private("ipyparallel", "ipyparallel.cluster.launcher:LocalProcessLauncher", "_stop_waiting",
            "the event that ends a launcher's exit-waiting thread", instance=True),
    Private("ipyparallel", "ipyparallel.cluster.launcher:LocalProcessLauncher", "_output",
            "overridden: the engine log's cached text (read from a shared filesystem)",
            overridden_in="dist_notebook/cluster/launchers.py"),
    Private("ipyparallel", "ipyparallel.cluster.launcher:SSHEngineLauncher", "_to_send_default",
            "overridden: the files an ssh engine copies when the hosts share no filesystem",
            overridden_in="dist_notebook/cluster/launchers.py"),
    Private("ipyparallel", "ipyparallel.engine.kernel:IPythonParallelKernel",
            "_publish_execute_input", "replaced: engines do not echo the code they run"),
    # ipykernel: the notebook kernel's parent message and its subshells.
    Private("ipykernel", "ipykernel.kernelbase:Kernel", "_get_shell_context_var",
            "the shell message a cell came from (the debugger's stdin)"),
    Private("ipykernel", "ipykernel.kernelbase:Kernel", "_shell_parent_ident",
            "the ident of that message's sender", instance=True),
    Private("ipykernel", "ipykernel.kernelbase:Kernel", "_allow_stdin",
            "whether the front end of the cell accepts input()"),
    Private("ipykernel", "ipykernel.kernelbase:Kernel", "_publish_status",
            "wrapped while a cell blocks: a subshell's idle is followed by the cell's busy"),
    Private("ipykernel", "ipykernel.subshell_manager:SubshellManager", "_shell_channel_io_loop",
            "the loop a subshell is created on (the live view's Stop route)", instance=True),
    Private("ipykernel", "ipykernel.subshell_manager:SubshellManager", "_create_subshell",
            "a subshell of the live view's own, for its Stop button's messages"),
    Private("ipykernel", "ipykernel.subshell_manager:SubshellManager", "_delete_subshell",
            "that subshell's end, with the live view's"),
    Private("ipykernel", "ipykernel.comm.comm:BaseComm", "_reply_subshell_for",
            "the subshell that handles a comm's messages"),
    # (display/uipoll.RestoreRoute: a reloaded page's widget restore while a cell blocks)
    Private("ipykernel", "ipykernel.kernelbase:Kernel", "shell_channel_thread_main",
            "the shell-channel thread's receive callback, wrapped while a cell blocks"),
    Private("ipykernel", "ipykernel.shellchannel:ShellChannelThread", "asyncio_lock",
            "the shell-channel thread's routing lock (keeps arrival order)", instance=True),
    Private("ipykernel", "ipykernel.subshell_manager:SubshellManager",
            "get_shell_channel_to_subshell_socket", "the socket into the live view's subshell"),
    # IPython
    Private("IPython", "IPython.core.compilerop:CachingCompiler", "_filename_map",
            "cell file name -> execution count (a rank's line in a cell)", instance=True),
    # torch.distributed
    Private("torch", "torch.distributed.distributed_c10d", "_world",
            "the process groups of this rank, their names and the default one"),
    Private("torch", "torch.distributed.distributed_c10d:_World", "group_count",
            "the counter that names the next group (reset after a failed creation)"),
    Private("torch", "torch.distributed.distributed_c10d:ProcessGroup",
            "_get_sequence_number_for_group", "how many collectives a group has run"),
    Private("torch", "torch._C._distributed_c10d", "_dump_fr_trace_json",
            "the flight recorder's last collectives (ops of a mismatch)"),
    Private("torch", "torch.distributed.distributed_c10d", "_set_pg_timeout",
            "a group's timeout for the collectives started after it (breakpoint cells)"),
    Private("torch", "torch.nn.parallel:DistributedDataParallel", "_get_ddp_logging_data",
            "DDP's runtime statistics: the communication time of a step"),
    Private("torch", "torch.nn.parallel:DistributedDataParallel",
            "_set_ddp_runtime_logging_sample_rate", "how often DDP samples them"),
    Private("torch", "torch.nn.parallel:DistributedDataParallel", "logger",
            "DDP's C++ logger: writes a step's timings at report(), not the next forward",
            instance=True),
    Private("torch", "torch.utils.data.dataloader", "_BaseDataLoaderIter",
            "every DataLoader iterator's __next__: a step's wait for its data"),
    Private("torch", "torch._C._distributed_c10d:Logger", "_get_ddp_logging_data",
            "the logger's numbers alone (a third of the cost of DDP's whole logging data)"),
    Private("torch", "torch", "_dynamo",
            "imported early: DDP's constructor imports it (1-2 s), a rank warms it"),
    # ray (the [ray] extra): the address ray.init() would connect to, checked first.
    Private("ray", "ray._private.services", "canonicalize_bootstrap_address_or_die",
            "the GCS address ray.init() will dial, to check that it answers"),
)  # fmt: skip


# -- ipyparallel ----------------------------------------------------------------------


def children(ar: Any) -> list[Any]:
    """The per-engine futures of a multi-engine AsyncResult, in target order.

    ``AsyncResult._children`` (ipyparallel 9.0-9.2): set in ``__init__``; each child
    is done when its engine replied."""
    return list(ar._children)


def metadata(ar: Any) -> list[Any]:
    """Each engine's reply metadata of *ar* (``status``, ``stdout``, ``engine_id``...).

    ``AsyncResult._metadata`` (ipyparallel 9.0-9.2): one dict per child, filled as the
    replies arrive."""
    return list(ar._metadata)


def send_control_request(client: Any, targets: list[int], msg_type: str, content: dict) -> Any:
    """Send a control-channel request of *msg_type* to *targets*; a future of the reply.

    ``Client._send_control_request(targets, msg_type, content, block)`` (ipyparallel
    9.0-9.2): what ``abort``/``shutdown`` use; the engine answers on its control
    handler table, where ``engine/collectives`` registers its own type."""
    return client._send_control_request(
        targets=targets, msg_type=msg_type, content=content, block=False
    )


def new_engine_set_id(ipp: Any) -> str:
    """The id ipyparallel would give the next engine set of *ipp* (an ipyparallel Cluster).

    ``Cluster._new_engine_set_id()`` (ipyparallel 9.0-9.2): a fresh id, also what
    ``start_engines`` picks when none is given; scale needs it before the start to put
    it in the engines' environment."""
    return str(ipp._new_engine_set_id())


def start_waiting(launcher: Any) -> None:
    """Start the launcher's thread that waits for its process to exit.

    ``LocalProcessLauncher._start_waiting()`` (ipyparallel 9.0-9.2): the last step of
    its ``start()``, for a start done by other means (a fork server, one ssh)."""
    launcher._start_waiting()


def stop_waiting_event(launcher: Any) -> Any:
    """The event that ends *launcher*'s exit-waiting thread, or None (not started).

    ``LocalProcessLauncher._stop_waiting`` (ipyparallel 9.0-9.2): a threading.Event
    made by ``_start_waiting``; the thread checks it every ``poll_seconds``."""
    return getattr(launcher, "_stop_waiting", None)


def ssh_files_to_send(launcher: Any) -> list:
    """What ipyparallel's ssh engine launcher copies to its host (connection files).

    ``SSHEngineLauncher._to_send_default`` (ipyparallel 9.0-9.2): the traitlets default
    of ``to_send``, called unbound on our subclass."""
    from ipyparallel.cluster.launcher import SSHEngineLauncher

    return list(SSHEngineLauncher._to_send_default(launcher))  # type: ignore[attr-defined]


def silence_execute_input() -> None:
    """Make ipyparallel's engine kernel skip its ``execute_input`` broadcast.

    ``Kernel._publish_execute_input(code, parent, execution_count)`` (ipykernel 7.x,
    called from ``execute_request``), replaced on ``IPythonParallelKernel``
    (ipyparallel 9.0-9.2)."""
    from ipyparallel.engine.kernel import IPythonParallelKernel

    def _publish_execute_input(self: Any, code: str, parent: Any, execution_count: int) -> None:
        return None

    kernel: Any = IPythonParallelKernel
    kernel._publish_execute_input = _publish_execute_input


# -- ipykernel and IPython ------------------------------------------------------------


def shell_parent_ident(kernel: Any) -> Any:
    """The ident of the front end whose shell message is being handled.

    ``Kernel._get_shell_context_var(Kernel._shell_parent_ident)`` (ipykernel 7.0-7.4):
    a ContextVar, per subshell; ``get_parent("shell")`` is its public twin for the
    message itself."""
    return kernel._get_shell_context_var(kernel._shell_parent_ident)


def allow_stdin(kernel: Any) -> bool:
    """Whether the front end of the cell being run accepts ``input()`` requests.

    ``Kernel._allow_stdin`` (ipykernel 7.0-7.4): set from each execute request."""
    return bool(kernel._allow_stdin)


def publish_status(kernel: Any) -> Any:
    """*kernel*'s ``_publish_status(status, channel, parent=None)`` (bound).

    ``Kernel._publish_status`` (ipykernel 6.0-7.4): every busy, idle and starting status
    on IOPub goes through it (``_publish_status_and_flush`` calls it), from the main
    shell, each subshell's thread and the control thread; *parent* None means the calling
    thread's ``get_parent(channel)``."""
    return kernel._publish_status


def replace_publish_status(kernel: Any, fn: Any) -> None:
    """Make *kernel* publish its statuses through *fn* (an instance attribute)."""
    kernel._publish_status = fn


def restore_publish_status(kernel: Any, fn: Any) -> None:
    """Undo ``replace_publish_status(kernel, fn)`` (where *fn* is still the one set)."""
    if vars(kernel).get("_publish_status") is fn:
        del kernel._publish_status


def shell_receive_callback(kernel: Any) -> Any:
    """The shell-channel thread's receive callback of *kernel* (a coroutine function).

    ``Kernel.shell_channel_thread_main`` (ipykernel 7.0-7.4): what the shell stream's
    ``on_recv`` calls for each front-end message; its code reads ``_reply_subshell_for``."""
    return kernel.shell_channel_thread_main


def shell_channel_lock(kernel: Any) -> Any:
    """The asyncio lock the shell-channel thread routes messages under (arrival order).

    ``ShellChannelThread.asyncio_lock`` (ipykernel 7.0-7.4)."""
    return kernel.shell_channel_thread.asyncio_lock


def on_shell_channel_loop(manager: Any, call: Any) -> None:
    """Run *call* on the shell-channel thread's loop (the subshells' one writer).

    ``SubshellManager._shell_channel_io_loop`` (ipykernel 7.0-7.4), a tornado IOLoop."""
    manager._shell_channel_io_loop.add_callback(call)


def create_subshell(manager: Any) -> str:
    """A new subshell's id (call on the shell-channel thread).

    ``SubshellManager._create_subshell()`` (ipykernel 7.0-7.4), what a
    ``create_subshell_request`` runs."""
    return str(manager._create_subshell())


def delete_subshell(manager: Any, subshell: str) -> None:
    """End the subshell *subshell* (on the shell-channel thread).

    ``SubshellManager._delete_subshell(subshell_id)`` (ipykernel 7.0-7.4); KeyError for
    one already gone."""
    manager._delete_subshell(subshell)


def subshell_socket(manager: Any, subshell: str) -> Any:
    """The socket that carries shell messages into *subshell*.

    ``SubshellManager.get_shell_channel_to_subshell_socket(subshell_id)`` (ipykernel
    7.0-7.4)."""
    return manager.get_shell_channel_to_subshell_socket(subshell)


def route_comm(comm: Any, subshell: str) -> None:
    """Make the kernel hand *comm*'s messages to *subshell*.

    ``BaseComm._reply_subshell_for(data, default)`` (ipykernel 7.4), read by the
    shell-channel thread for each ``comm_msg``; replaced on this comm only."""
    comm._reply_subshell_for = lambda _data, _default: subshell


def unroute_comm(comm: Any) -> None:
    """*comm*'s messages go to the main shell again (undoes ``route_comm``)."""
    if "_reply_subshell_for" in vars(comm):
        del comm._reply_subshell_for


def cell_filenames(shell: Any) -> dict[str, int]:
    """{compiled cell file name: execution count} of an IPython shell (empty: none).

    ``CachingCompiler._filename_map`` (IPython 8-9) on ``shell.compile``; the
    tracebacks of IPython name cells from it."""
    return dict(getattr(getattr(shell, "compile", None), "_filename_map", None) or {})


# -- torch.distributed ----------------------------------------------------------------


def _world() -> Any:
    """torch's registry of this process's groups, or None where it has none.

    ``torch.distributed.distributed_c10d._world`` (torch 2.4-2.13): a ``_World``
    whose ``pg_map``, ``pg_names`` and ``default_pg`` are the groups."""
    import torch.distributed.distributed_c10d as c10d

    return getattr(c10d, "_world", None)


def group_names() -> dict[Any, str]:
    """{process group: its name} of every group torch knows on this rank."""
    world = _world()
    return {g: str(name) for g, name in dict(world.pg_names).items()} if world else {}


def default_group() -> Any:
    """The default process group (``_World.default_pg``), or None."""
    world = _world()
    return world.default_pg if world is not None else None


def live_groups() -> list[Any]:
    """Every process group of this rank (``_World.pg_map``'s keys)."""
    world = _world()
    return list(world.pg_map) if world is not None else []


def reset_group_count() -> None:
    """Make the next group be named as on a fresh process (``_World.group_count = 0``).

    torch 2.4-2.13 names each new group by this counter and resets it only when a
    default group is destroyed."""
    world = _world()
    if world is not None and hasattr(type(world), "group_count"):
        world.group_count = 0


def set_group_timeout(seconds: float) -> None:
    """The default group's timeout, for the collectives it starts from now on.

    ``distributed_c10d._set_pg_timeout(timedelta)`` (torch 2.3-2.13; gloo and NCCL)."""
    from datetime import timedelta

    from torch.distributed.distributed_c10d import _set_pg_timeout

    _set_pg_timeout(timedelta(seconds=seconds))


def sequence_number(group: Any) -> int:
    """How many collectives *group* has run on this rank.

    ``ProcessGroup._get_sequence_number_for_group()`` (torch 2.4-2.13); RuntimeError
    or ValueError for a group being destroyed."""
    return int(group._get_sequence_number_for_group())


def flight_recorder_json() -> str | None:
    """torch's flight recorder dump as JSON, or None for a torch without one.

    ``torch._C._distributed_c10d._dump_fr_trace_json(include_collectives,
    only_active)`` (torch 2.5-2.13, which returns bytes): entries oldest first, each with
    ``process_group``, ``profiling_name`` and ``is_p2p``."""
    from torch._C import _distributed_c10d

    dump: Any = getattr(_distributed_c10d, "_dump_fr_trace_json", None)
    if dump is None:
        return None
    raw = dump(True, False)  # bytes in torch 2.13
    return raw.decode() if isinstance(raw, bytes) else str(raw)


def ddp_logging_data(model: Any) -> dict[str, Any]:
    """DDP's runtime statistics of *model* (``avg_backward_comm_time`` and others).

    ``DistributedDataParallel._get_ddp_logging_data()`` (torch 2.4-2.13);
    AssertionError or RuntimeError once the reducer is gone."""
    return dict(model._get_ddp_logging_data())


def dataloader_iterator_class() -> Any:
    """The base class of every DataLoader iterator, whose ``__next__`` they all use.

    ``torch.utils.data.dataloader._BaseDataLoaderIter`` (torch 2.4-2.13); ImportError
    without torch."""
    from torch.utils.data import dataloader

    return dataloader._BaseDataLoaderIter


def ddp_timings(model: Any) -> dict[str, int]:
    """The numbers of DDP's runtime statistics of *model* (``iteration``,
    ``backward_comm_time`` ...), without its strings (module names, bucket sizes): 9 us a
    read after a step where the whole logging data took 29 us.

    ``DistributedDataParallel.logger._get_ddp_logging_data().ints_map`` (torch 2.4-2.13);
    AttributeError for a DDP without a logger, RuntimeError once its reducer is gone."""
    return model.logger._get_ddp_logging_data().ints_map  # a new dict at each call


def log_ddp_runtime_stats(model: Any) -> None:
    """Have DDP write the reducer's timings of its last iteration into its logging data
    now (DDP itself does it at the next forward).

    ``DistributedDataParallel.logger.set_runtime_stats_and_log()`` (torch 2.4-2.13: the
    ``logger`` attribute is set in ``__init__``); AttributeError for a DDP without one."""
    model.logger.set_runtime_stats_and_log()


def set_ddp_logging_sample_rate(model: Any, rate: int) -> None:
    """Make DDP sample its runtime statistics every *rate* iterations.

    ``DistributedDataParallel._set_ddp_runtime_logging_sample_rate(rate)`` (torch
    2.4-2.13); AttributeError or RuntimeError for a DDP without a C++ reducer."""
    model._set_ddp_runtime_logging_sample_rate(rate)


def import_dynamo() -> None:
    """Import ``torch._dynamo`` (~800 modules), which DDP's constructor imports anyway.

    A private module of torch 2.x, imported ahead so the first training cell does not
    wait for it."""
    import torch._dynamo  # noqa: F401


# -- ray ------------------------------------------------------------------------------


def ray_bootstrap_address(address: str) -> str:
    """The GCS host:port that ``ray.init(address=...)`` dials for *address* ("auto": the
    last ``ray start`` here, else a running GCS found on this machine), with loopback
    turned into the machine's address as Ray does unless told not to.

    ``ray._private.services.canonicalize_bootstrap_address_or_die`` (ray 2.60); it raises
    ConnectionError where no cluster is found, ValueError for a malformed address."""
    from ray._private import services

    return str(services.canonicalize_bootstrap_address_or_die(address))
