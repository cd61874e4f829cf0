"""Values with large arrays between processes of one host, through one shared-memory file.

``dump(value)`` pickles *value* with cloudpickle, but every CPU tensor and every buffer
that pickle protocol 5 hands out of band (numpy arrays, bytearrays) is written once
into a file in ``/dev/shm``; the pickle itself stays small. ``load(...)`` maps that file
copy-on-write (``MAP_PRIVATE``) and rebuilds the value with its tensors and arrays as
views of the mapping: nothing is copied, every process that maps the file shares the
same pages of memory until it writes to them, and a write changes only the writer's copy
(so each rank still owns an independent value).

Used by ``%dist_push`` (the kernel writes, every rank maps) and ``%dist_pull`` (each rank
writes, the kernel maps), when the ranks share the kernel's host. The file is unlinked
as soon as every reader has mapped it: the pages live as long as a mapping does, and
nothing is left in /dev/shm.

Two tensors that were views of one storage arrive as two tensors (the layout of each is
kept; the sharing between them is not); a tensor on a GPU, a sparse or a quantised one
travels inside the pickle instead, as it would without this module.
"""

from __future__ import annotations

import io
import mmap
import os
import pickle
import tempfile
import threading
from dataclasses import dataclass
from typing import Any

SHM_DIR = "/dev/shm"
ALIGN = 64  # bytes: every array starts on a cache line
# Below this many out-of-band bytes the value goes inside the pickle (a file is not worth it).
MIN_BYTES = 1 << 20

_loading = threading.local()


@dataclass(frozen=True)
class Dumped:
    """A value as it travels: the small pickle, and where its arrays are."""

    pickle: bytes
    path: str | None  # the shared-memory file, or None when the value had no large arrays
    offsets: tuple[tuple[int, int], ...]  # (offset, nbytes) of each array, in pickle order
    size: int
    buffers: tuple[int, ...] = ()  # which arrays are pickle's own out-of-band buffers


def available(nbytes: int) -> bool:
    """Whether /dev/shm exists and has room for *nbytes* (with a margin), in the file
    system and in memory: a tmpfs is sized at half the RAM whatever is free, and
    filling it past the free memory ends in an out-of-memory kill."""
    try:
        st = os.statvfs(SHM_DIR)
    except OSError:
        return False
    import psutil

    room = min(st.f_bavail * st.f_frsize, psutil.virtual_memory().available)
    return room > nbytes * 1.1 + (64 << 20)


# --- names, and what is left behind ---------------------------------------------------
# Every file is named after the user and the process that wrote it, so that whatever a
# path of ours misses (a rank that raised while the others had written theirs, an
# interrupt, a kernel killed mid-push, an out-of-memory kill) is found and removed:
# the files of a cluster's ranks at its errors and stop, and at any kernel's next start
# the files of writers that are gone.
_NAME = "dist-notebook-{uid}-{pid}-"


def _prefix(pid: int | None = None) -> str:
    return _NAME.format(uid=os.getuid(), pid=os.getpid() if pid is None else pid)


def files_of(pids: list[int]) -> list[str]:
    """This user's shared-memory files written by the processes *pids*."""
    try:
        names = os.listdir(SHM_DIR)
    except OSError:
        return []
    prefixes = tuple(_prefix(pid) for pid in pids)
    return [os.path.join(SHM_DIR, n) for n in names if prefixes and n.startswith(prefixes)]


def remove_files_of(pids: list[int]) -> int:
    """Remove the files the processes *pids* wrote; return how many."""
    found = files_of(pids)
    for path in found:
        remove(path)
    return len(found)


def sweep_orphans() -> int:
    """Remove this user's files whose writer has ended; return how many."""
    import psutil

    mine = _NAME.format(uid=os.getuid(), pid="")[:-1]  # up to the writer's pid
    try:
        names = [n for n in os.listdir(SHM_DIR) if n.startswith(mine)]
    except OSError:
        return 0
    gone = set()
    for name in names:
        pid = name[len(mine) :].split("-", 1)[0]
        if pid.isdigit() and not psutil.pid_exists(int(pid)):
            gone.add(int(pid))
    return remove_files_of(sorted(gone))


def _rebuild_tensor(index: int, dtype: str, shape: tuple[int, ...], grad: bool, param: bool) -> Any:
    import torch

    view = _loading.views[index]
    kind = getattr(torch, dtype)
    if view.nbytes == 0:
        tensor = torch.empty(shape, dtype=kind)
    else:
        tensor = torch.frombuffer(view, dtype=kind).reshape(shape)
    if param:
        return torch.nn.Parameter(tensor, requires_grad=grad)
    return tensor.requires_grad_(grad) if grad else tensor


class _Pickler:
    """cloudpickle with CPU tensors and protocol-5 buffers taken out of band."""

    def __init__(self, file: io.BytesIO) -> None:
        import cloudpickle
        import torch

        self.arrays: list[Any] = []  # tensors (flattened to bytes later) and PickleBuffers
        arrays, torch_ = self.arrays, torch

        class Pickler(cloudpickle.Pickler):  # type: ignore[misc, name-defined]
            def reducer_override(self, obj: Any) -> Any:
                if type(obj) in (torch_.Tensor, torch_.nn.Parameter) and _plain(torch_, obj):
                    arrays.append(obj.detach())
                    dtype = str(obj.dtype).removeprefix("torch.")
                    param = isinstance(obj, torch_.nn.Parameter)
                    args = (len(arrays) - 1, dtype, tuple(obj.shape), obj.requires_grad, param)
                    return _rebuild_tensor, args
                return super().reducer_override(obj)

        self.pickler = Pickler(file, protocol=5, buffer_callback=self._buffer)

    def _buffer(self, buffer: pickle.PickleBuffer) -> bool:
        self.arrays.append(buffer)
        return False  # out of band


def _plain(torch: Any, tensor: Any) -> bool:
    """A dense CPU tensor: its bytes say everything about it."""
    return bool(
        tensor.device.type == "cpu"
        and tensor.layout == torch.strided
        and not tensor.is_quantized
        and not tensor.is_nested
    )


def _nbytes(array: Any) -> int:
    if isinstance(array, pickle.PickleBuffer):
        return array.raw().nbytes
    return int(array.numel() * array.element_size())


def dump(value: Any, min_bytes: int = MIN_BYTES) -> Dumped:
    """Pickle *value*, its large arrays into one new shared-memory file."""
    file = io.BytesIO()
    pickler = _Pickler(file)
    pickler.pickler.dump(value)
    if not pickler.arrays:
        return Dumped(file.getvalue(), None, (), 0)
    sizes = [_nbytes(a) for a in pickler.arrays]
    if sum(sizes) < min_bytes or not available(sum(sizes)):
        import cloudpickle

        return Dumped(cloudpickle.dumps(value), None, (), 0)
    offsets, end = [], 0
    for n in sizes:
        offsets.append((end, n))
        end += -(-n // ALIGN) * ALIGN
    fd, path = tempfile.mkstemp(prefix=_prefix(), dir=SHM_DIR)
    try:
        os.ftruncate(fd, max(end, 1))
        for array, (offset, _) in zip(pickler.arrays, offsets, strict=True):
            _write(fd, array, offset)
    except BaseException:
        os.unlink(path)
        raise
    finally:
        os.close(fd)
    buffers = tuple(i for i, a in enumerate(pickler.arrays) if isinstance(a, pickle.PickleBuffer))
    return Dumped(file.getvalue(), path, tuple(offsets), end, buffers)


def _write(fd: int, array: Any, offset: int) -> None:
    """Write one array's bytes at *offset* (pwrite: about twice as fast as through a
    mapping, which takes a page fault per page)."""
    if isinstance(array, pickle.PickleBuffer):
        data = array.raw()
    else:
        import torch

        data = memoryview(array.contiguous().reshape(-1).view(torch.uint8).numpy())
    done = 0
    while done < data.nbytes:
        done += os.pwrite(fd, data[done:], offset + done)


def load(dumped: Dumped) -> Any:
    """Rebuild a dumped value; its arrays are copy-on-write views of the shared file."""
    if dumped.path is None:
        return pickle.loads(dumped.pickle)  # noqa: S301 - written by our own processes
    with open(dumped.path, "rb") as f:
        mm = mmap.mmap(f.fileno(), max(dumped.size, 1), access=mmap.ACCESS_COPY)
    memory = memoryview(mm)
    views = [memory[offset : offset + n] for offset, n in dumped.offsets]
    _loading.views = views
    try:
        return pickle.loads(dumped.pickle, buffers=[views[i] for i in dumped.buffers])  # noqa: S301
    finally:
        _loading.views = None


def remove(path: str | None) -> None:
    """Unlink a shared-memory file once its readers mapped it (their pages stay)."""
    if path is not None:
        try:
            os.unlink(path)
        except FileNotFoundError:
            return


# --- on a rank ---------------------------------------------------------------------------
def bind(dumped: Dumped) -> list[str]:
    """Bind a dumped name -> value mapping in this rank's namespace (``%dist_push``)."""
    from .values import _namespace

    values = load(dumped)
    _namespace().update(values)
    return sorted(values)


def evaluate(expression: str) -> Dumped:
    """The value of *expression* in this rank's namespace, dumped (``%dist_pull``): its
    large arrays into a shared-memory file the kernel maps, the rest by value."""
    from IPython import get_ipython

    shell = get_ipython()
    if shell is None:
        raise RuntimeError("not running inside an engine")
    value = shell.ev(expression)
    try:
        return dump(value)
    except Exception as e:
        raise TypeError(
            f"the value of {expression!r} cannot be sent to the notebook ({type(e).__name__}: "
            f"{e}); pull plain data instead, e.g. a dict of its fields or tensors"
        ) from None
