"""Checkpoints of a training run: save every N steps, resume from the latest.

In every rank's namespace as ``checkpointer``; a ``%%dist_train --checkpoint-every N``
run configures it::

    ckpt = checkpointer(model, optimizer, sampler=sampler)
    for step in range(ckpt.restore(), steps):   # 0, or the step after the latest save
        ...
        ckpt.save(step)                         # writes every N steps

Rank 0 writes one file per checkpoint: the model (unwrapped from DDP), the optimizer,
the step, the sampler's epoch and every rank's RNG states (gathered to rank 0, so a
resumed run draws the same random numbers). It writes to a temporary name and then
renames, so a crash never leaves a half-written checkpoint behind.
"""

from __future__ import annotations

import importlib.util
import os
import random
import re
from dataclasses import dataclass
from typing import Any

_NAME = re.compile(r"^step-(\d+)\.pt$")


@dataclass
class CheckpointConfig:
    every: int | None = None
    directory: str | None = None
    resume: bool = False


_config = CheckpointConfig()


def configure(every: int | None, directory: str | None, resume: bool) -> None:
    """Set by the kernel at the start of a run."""
    global _config
    _config = CheckpointConfig(every, directory, resume)
    if directory and _rank() == 0:
        os.makedirs(directory, exist_ok=True, mode=0o700)


def _rank() -> int:
    import torch.distributed as dist

    return dist.get_rank() if dist.is_initialized() else int(os.environ.get("RANK", "0"))


def _rng_state() -> dict[str, Any]:
    import torch

    state: dict[str, Any] = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state()
    if importlib.util.find_spec("numpy") is not None:
        import numpy

        state["numpy"] = numpy.random.get_state()
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    import torch

    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])
    if "numpy" in state:
        import numpy

        numpy.random.set_state(state["numpy"])


def latest(directory: str) -> str | None:
    """The newest complete checkpoint file in *directory*, if any."""
    if not os.path.isdir(directory):
        return None
    steps = [(int(m.group(1)), name) for name in os.listdir(directory) if (m := _NAME.match(name))]
    return os.path.join(directory, max(steps)[1]) if steps else None


class Checkpointer:
    def __init__(self, model: Any, optimizer: Any = None, *, sampler: Any = None) -> None:
        self.model = getattr(model, "module", model)
        self.optimizer = optimizer
        self.sampler = sampler
        self.config = _config
        self.saved: list[str] = []

    def save(self, step: int, force: bool = False) -> str | None:
        """Save after *step* when it completes a multiple of --checkpoint-every (or *force*)."""
        import torch
        import torch.distributed as dist

        every, directory = self.config.every, self.config.directory
        if directory is None or (not force and (not every or (step + 1) % every)):
            return None
        rngs: list[Any] = [None] * (dist.get_world_size() if dist.is_initialized() else 1)
        if dist.is_initialized():
            dist.all_gather_object(rngs, _rng_state())
        else:
            rngs[0] = _rng_state()
        if _rank() != 0:
            return None
        state = {
            "step": step,
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict() if self.optimizer is not None else None,
            "epoch": getattr(self.sampler, "epoch", None),
            "rng": rngs,
        }
        path = os.path.join(directory, f"step-{step:08d}.pt")
        tmp = f"{path}.tmp-{os.getpid()}"
        torch.save(state, tmp)
        os.replace(tmp, path)  # atomic: readers see the old file set or the new one
        self.saved.append(path)
        return path

    def restore(self) -> int:
        """Load the latest checkpoint when the run resumes; return the step to start at."""
        import torch

        directory = self.config.directory
        if not self.config.resume or directory is None:
            return 0
        path = latest(directory)
        if path is None:
            return 0
        state = torch.load(path, map_location="cpu", weights_only=False)
        self.model.load_state_dict(state["model"])
        if self.optimizer is not None and state["optimizer"] is not None:
            self.optimizer.load_state_dict(state["optimizer"])
        if self.sampler is not None and state["epoch"] is not None:
            self.sampler.set_epoch(state["epoch"])
        rngs = state["rng"]
        _set_rng_state(rngs[_rank() % len(rngs)])
        return int(state["step"]) + 1


def checkpointer(model: Any, optimizer: Any = None, *, sampler: Any = None) -> Checkpointer:
    return Checkpointer(model, optimizer, sampler=sampler)
