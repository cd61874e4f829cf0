"""Which GPUs this host has, found without initialising CUDA in the kernel.

The kernel must never create a CUDA context on the user's behalf (a forked or later
CUDA user would then break), so GPUs are counted with ``nvidia-smi``, restricted to
``CUDA_VISIBLE_DEVICES`` when the kernel has one.
"""

from __future__ import annotations

import os
import shutil
import subprocess


def query_gpus(field: str) -> list[str]:
    """One ``nvidia-smi --query-gpu`` *field* per GPU of this host (none without it)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    try:
        out = subprocess.run(
            [smi, f"--query-gpu={field}", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in out.splitlines() if line.strip()]


def visible_gpus() -> list[int]:
    """Indices of the GPUs engines may use, as CUDA_VISIBLE_DEVICES numbers them."""
    physical = [int(v) for v in query_gpus("index") if v.isdigit()]
    mask = os.environ.get("CUDA_VISIBLE_DEVICES")
    if mask is None:
        return physical
    wanted = [m.strip() for m in mask.split(",") if m.strip()]
    return [int(m) for m in wanted if m.isdigit() and int(m) in physical]
