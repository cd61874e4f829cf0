"""Values moved between the kernel and a rank's namespace (push and pull)."""

from __future__ import annotations

from typing import Any


def _namespace() -> dict[str, Any]:
    from IPython import get_ipython

    shell = get_ipython()
    if shell is None:
        raise RuntimeError("not running inside an engine")
    return shell.user_ns


def set_values(blob: bytes) -> list[str]:
    """Bind the (cloudpickled) name -> value mapping in this rank's namespace."""
    import pickle

    values = pickle.loads(blob)  # noqa: S301 - written by our own kernel for this rank
    _namespace().update(values)
    return sorted(values)


def evaluate(expression: str) -> Any:
    """Evaluate the user's expression in this rank's namespace (as a cell would)."""
    # The expression is the user's own code, run where their cells run; nothing from
    # the kernel is evaluated here.
    return eval(compile(expression, "<dist_pull>", "eval"), _namespace())  # noqa: S307


_stash: bytes | None = None


def stash(blob: bytes) -> int:
    """On the source rank: keep *blob* for the broadcast that follows."""
    global _stash
    _stash = blob
    return len(blob)


def share_values(src: int) -> list[str]:
    """Every rank: receive rank *src*'s stashed blob over the process group, bind it.

    Only rank *src* gets the blob from the kernel; the others get it by broadcast,
    which is far cheaper than one copy per rank through the controller (measured for
    1 GiB on 4 CPU ranks: 19 s and 16 GiB of peak memory that way, 1.6 s to broadcast).
    """
    global _stash
    import torch.distributed as dist

    box = [_stash if dist.get_rank() == src else None]
    _stash = None
    dist.broadcast_object_list(box, src=src)
    received = box[0]
    if received is None:
        raise RuntimeError(f"rank {src} had nothing to share: push again")
    return set_values(received)
