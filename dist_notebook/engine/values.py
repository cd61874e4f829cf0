"""Values moved between the kernel and a rank's namespace (push and pull)."""

from __future__ import annotations

from typing import Any


def _namespace() -> dict[str, Any]:
    from IPython import get_ipython

    shell = get_ipython()
    if shell is None:
        raise RuntimeError("not running inside an engine")
    return shell.user_ns


def set_values(blob: Any) -> list[str]:
    """Bind the (cloudpickled) name -> value mapping in this rank's namespace."""
    import pickle

    values = pickle.loads(blob)  # noqa: S301 - written by our own kernel for this rank
    _namespace().update(values)
    return sorted(values)


def evaluate(expression: str) -> bytes:
    """The value of the user's expression in this rank's namespace, as a cell computes it
    (IPython's own evaluation in the user namespace; nothing from the kernel runs here),
    pickled with cloudpickle.

    Pickled here, by value: a class defined in a ``%%dist`` cell lives in the engine's
    ``__main__``, which the kernel's ``__main__`` lacks. Left to ipyparallel, the kernel's
    receiving thread failed to unpickle the reply and the pull waited forever.
    """
    import cloudpickle
    from IPython import get_ipython

    shell = get_ipython()
    if shell is None:
        raise RuntimeError("not running inside an engine")
    value = shell.ev(expression)
    try:
        return cloudpickle.dumps(value)
    except Exception as e:
        raise TypeError(
            f"the value of {expression!r} cannot be sent to the notebook ({type(e).__name__}: "
            f"{e}); pull plain data instead, e.g. a dict of its fields or tensors"
        ) from None


_stash: Any = None


def stash(blob: Any) -> int:
    """On the source rank: keep *blob* (a uint8 array) for the broadcast that follows."""
    global _stash
    _stash = blob
    return len(blob)


def share_values(src: int) -> list[str]:
    """Every rank: receive rank *src*'s stashed blob over the process group, bind it.

    Only rank *src* gets the blob from the kernel (as one zero-copy buffer); the others
    get it by a tensor broadcast, far cheaper than one copy per rank through the
    controller. On NCCL the bytes travel through the rank's GPU.
    """
    global _stash
    import numpy
    import torch
    import torch.distributed as dist

    device = torch.device("cuda", 0) if dist.get_backend() == "nccl" else torch.device("cpu")
    mine = dist.get_rank() == src
    size = torch.tensor([len(_stash) if mine and _stash is not None else -1], device=device)
    dist.broadcast(size, src=src)
    if int(size.item()) < 0:
        raise RuntimeError(f"rank {src} had nothing to share: push again")
    if mine:
        data = torch.from_numpy(numpy.asarray(_stash, dtype=numpy.uint8)).to(device)
    else:
        data = torch.empty(int(size.item()), dtype=torch.uint8, device=device)
    _stash = None
    dist.broadcast(data, src=src)
    return set_values(data.cpu().numpy())
