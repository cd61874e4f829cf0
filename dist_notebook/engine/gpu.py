"""GPU utilisation, memory and power of this rank's device, read through NVML.

On a GPU rank a ``%%dist_train`` run starts a sampler thread that reads NVML
(``nvidia-ml-py``, the ``gpu`` extra) every ``PERIOD`` seconds and keeps the latest
sample; the ``report()`` step hook adds it to the next record as ``gpu``:
``{"util": percent busy, "mem": bytes used, "power": watts}``. A sample goes out once,
with the first record after it was taken, so records between samples carry no ``gpu``
(the summaries take the latest one). Each NVML read costs ~0.1-1 ms on the sampler
thread, twice a second: under 0.1% of a core, and nothing on the training thread
beyond reading one attribute.

The device is matched by UUID: NVML numbers devices in PCI order and ignores
``CUDA_VISIBLE_DEVICES``, so "cuda:0" of a rank is generally not NVML's device 0.
On CPU ranks (no CUDA device, or no NVML library) nothing starts and records have no
``gpu``: the views then hide the GPU columns.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

log = logging.getLogger("dist_notebook")
PERIOD = 0.5  # seconds between NVML reads (2 Hz)


class GpuUnavailable(RuntimeError):
    """NVML cannot be read for this rank's device; the message says why."""


def normalise_uuid(uuid: str) -> str:
    """'GPU-5b4f...' (NVML) and '5b4f...' (CUDA) as one form: lower case, no prefix."""
    text = str(uuid).strip().lower()
    return text[4:] if text.startswith("gpu-") else text


def cuda_uuid() -> str | None:
    """The UUID of this rank's CUDA device (cuda:0, its only visible one), or None on CPU.

    Never initialises CUDA on a rank that has not: on a GPU rank the process group did.
    """
    import torch

    if not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return None
    return normalise_uuid(str(torch.cuda.get_device_properties(0).uuid))


def nvml_handle(nvml: Any, uuid: str) -> Any:
    """NVML's handle of the device whose UUID is *uuid* (any form)."""
    wanted = normalise_uuid(uuid)
    for index in range(nvml.nvmlDeviceGetCount()):
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        found = nvml.nvmlDeviceGetUUID(handle)
        if isinstance(found, bytes):
            found = found.decode()
        if normalise_uuid(found) == wanted:
            return handle
    raise GpuUnavailable(f"NVML lists no device with UUID {uuid}")


def read(nvml: Any, handle: Any) -> dict[str, float]:
    """One sample of the device: utilisation (%), memory used (bytes), power (W)."""
    sample = {
        "util": float(nvml.nvmlDeviceGetUtilizationRates(handle).gpu),
        "mem": float(nvml.nvmlDeviceGetMemoryInfo(handle).used),
    }
    power = _power(nvml, handle)
    if power is not None:
        sample["power"] = power
    return sample


def _power(nvml: Any, handle: Any) -> float | None:
    """Watts drawn, or None where the board (or a MIG slice) does not report power."""
    try:
        return float(nvml.nvmlDeviceGetPowerUsage(handle)) / 1000.0  # milliwatts
    except nvml.NVMLError_NotSupported:
        return None


class Sampler:
    """Reads one device through NVML every ``period`` seconds on a thread of its own."""

    def __init__(self, nvml: Any, handle: Any, period: float = PERIOD) -> None:
        self.nvml = nvml
        self.handle = handle
        self.period = period
        self.samples = 0
        self.latest: dict[str, float] | None = None
        self._sent: dict[str, float] | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="dist-notebook-gpu", daemon=True)

    def start(self) -> Sampler:
        self._take()
        self._thread.start()
        return self

    def _take(self) -> None:
        self.latest = read(self.nvml, self.handle)  # one reference swap: no lock needed
        self.samples += 1

    def _run(self) -> None:
        while not self._stop.wait(self.period):
            try:
                self._take()
            except self.nvml.NVMLError as e:  # a device lost mid-run: say so once, stop
                log.warning("GPU sampling stopped: %s", e)
                return

    def step_hook(self, now: float) -> dict[str, Any]:
        """The report() hook: the newest sample, once."""
        latest = self.latest
        if latest is None or latest is self._sent:
            return {}
        self._sent = latest
        return {"gpu": latest}

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)


_sampler: Sampler | None = None


def start_sampler(uuid: str | None = None) -> Sampler | None:
    """Start sampling this rank's GPU for report(); None on a CPU rank."""
    global _sampler
    from .reporter import add_step_hook

    stop_sampler()
    uuid = uuid or cuda_uuid()
    if uuid is None:
        return None
    try:
        import pynvml as nvml
    except ImportError:
        log.warning("no GPU metrics: install the gpu extra (pip install 'dist-notebook[gpu]')")
        return None
    try:
        nvml.nvmlInit()
        sampler = Sampler(nvml, nvml_handle(nvml, uuid)).start()
    except (nvml.NVMLError, GpuUnavailable) as e:
        log.warning("no GPU metrics for this rank: %s", e)
        return None
    _sampler = sampler
    add_step_hook(sampler.step_hook)
    return sampler


def stop_sampler() -> None:
    global _sampler
    from .reporter import remove_step_hook

    sampler, _sampler = _sampler, None
    if sampler is None:
        return
    remove_step_hook(sampler.step_hook)
    sampler.stop()
    try:
        sampler.nvml.nvmlShutdown()
    except sampler.nvml.NVMLError as e:
        log.debug("nvmlShutdown: %s", e)
