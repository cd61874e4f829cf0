"""What a rank's step cost it, measured at each ``report()``: CPU time, CPU wait, load,
cores and peak memory (``protocol.STEP_MEASURES``; ``data_time`` is the user's).

The step is the time since the rank's previous report(), as its step time. Per step:

- ``cpu_time``: CPU seconds the reporting thread (the training loop's) used,
  ``time.thread_time()``'s difference. None on the first report, or when report() is
  called from another thread than the last time.
- ``run_delay``: seconds that thread was runnable but waited for a CPU: the second field
  of ``/proc/thread-self/schedstat`` (nanoseconds, the scheduler's own count), its
  difference. None where the file is absent (not Linux, schedstats off).
- ``load``: the 1-minute load average (``os.getloadavg()``; the kernel updates it every
  5 s, so it is read at most once a second).
- ``cores``: the cores the rank may run on (``os.sched_getaffinity(0)``), read at each
  report (a user may pin the rank's process while it runs).
- ``peak_mem``: bytes. On a rank whose process uses CUDA, ``torch.cuda.max_memory_allocated``
  of its device since the previous report (the peak is reset at each report: sampled
  between steps, memory shows its low point), a host-side counter of torch's allocator,
  no sync. Otherwise the process's resident-set high-water mark, reset at each report by
  writing 5 to ``/proc/self/clear_refs`` (which resets only that mark, without walking the
  pages); where that write is refused, the mark since the process started, and
  ``peak_since_start`` says so. The mark is read from ``getrusage``'s ``ru_maxrss``
  (0.5 us), which follows the reset, where it agrees with ``VmHWM`` of
  ``/proc/self/status`` when the measures start (the kernel takes the larger of the mark
  and one kept from before the process's exec); else from that file, 26 us a read in a
  training process (its text is made anew at each read).

Cost, timed in a 2-rank DDP loop after each step (the caches cold): ~10-15 us a report
(schedstat 3 us, the reset 3 us, affinity 4 us, thread_time 0.5 us, getrusage 0.5 us);
the files stay open, read with pread.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Any

LOAD_EVERY_S = 1.0  # the load average is re-read at most this often


class StepMeasures:
    """One run's measures on one rank: each ``take()`` closes a step."""

    def __init__(self) -> None:
        self._thread: int | None = None
        self._cpu = 0.0
        self._delay: int | None = None
        self._sched: int | None = None  # /proc/thread-self/schedstat of self._thread
        self._load: float | None = None
        self._load_at = -LOAD_EVERY_S
        self._status = _open("/proc/self/status", os.O_RDONLY)
        self._clear = _open("/proc/self/clear_refs", os.O_WRONLY)
        self.peak_since_start = self._clear is None
        self._reset_peak()
        self._rusage = self._rusage_agrees()

    def take(self) -> tuple[float | None, float | None, float | None, float | None, float | None]:
        """(cpu_time, run_delay, load, cores, peak_mem) of the step now ending."""
        thread = threading.get_ident()
        cpu = time.thread_time()
        if thread != self._thread:
            self._switch(thread)
            cpu_time = run_delay = None
            self._delay = self._read_delay()
        else:
            cpu_time = cpu - self._cpu
            delay = self._read_delay()
            run_delay = (
                None if delay is None or self._delay is None else (delay - self._delay) / 1e9
            )
            self._delay = delay
        self._cpu = cpu
        now = time.monotonic()
        if now - self._load_at >= LOAD_EVERY_S:
            self._load_at = now
            self._load = _load()
        return cpu_time, run_delay, self._load, _cores(), self._peak()

    def close(self) -> None:
        for fd in (self._sched, self._status, self._clear):
            if fd is not None:
                os.close(fd)
        self._sched = self._status = self._clear = None

    def _switch(self, thread: int) -> None:
        """Report() runs in *thread* from now on: its own schedstat file."""
        if self._sched is not None:
            os.close(self._sched)
        self._thread = thread
        self._sched = _open("/proc/thread-self/schedstat", os.O_RDONLY)

    def _read_delay(self) -> int | None:
        if self._sched is None:
            return None
        fields = os.pread(self._sched, 128, 0).split()
        return int(fields[1]) if len(fields) > 1 else None

    def _peak(self) -> float | None:
        cuda = _cuda()
        if cuda is not None:
            allocated = float(cuda.max_memory_allocated())
            cuda.reset_peak_memory_stats()
            return allocated
        peak = _maxrss() if self._rusage else self._hwm()
        self._reset_peak()
        return peak

    def _hwm(self) -> float | None:
        """VmHWM of /proc/self/status, in bytes."""
        if self._status is None:
            return None
        status = os.pread(self._status, 8192, 0)
        at = status.find(b"VmHWM:")
        if at < 0:
            return None
        return float(int(status[at + 6 : status.index(b"kB", at)]) * 1024)

    def _rusage_agrees(self) -> bool:
        """Whether ru_maxrss is this process's mark (just reset): within 10% of VmHWM."""
        hwm = self._hwm()
        return hwm is not None and abs(_maxrss() - hwm) <= 0.1 * hwm

    def _reset_peak(self) -> None:
        if self._clear is None:
            return
        try:
            os.write(self._clear, b"5")
        except OSError:  # refused (a kernel or sandbox without it): the mark since start
            os.close(self._clear)
            self._clear = None
            self.peak_since_start = True


def _maxrss() -> float:
    """getrusage's peak resident set of this process, in bytes (Linux counts KiB)."""
    import resource  # POSIX only: called only where /proc/self/status is

    return float(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)


def _open(path: str, flags: int) -> int | None:
    try:
        return os.open(path, flags)
    except OSError:  # not Linux, or /proc hidden: this measure is None
        return None


def _load() -> float | None:
    try:
        return os.getloadavg()[0]
    except OSError:  # no load average on this system
        return None


def _cores() -> float | None:
    affinity = getattr(os, "sched_getaffinity", None)
    return None if affinity is None else float(len(affinity(0)))


def _cuda() -> Any:
    """torch.cuda where this process already uses CUDA (never imports torch)."""
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    if cuda is None or not cuda.is_initialized():
        return None
    return cuda
