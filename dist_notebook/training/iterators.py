"""A data iterator left exhausted by a run: what the run's end message says about it.

A Stop interrupts every rank; when the interrupt lands inside a generator (the user's
``batches()``, a loop over a DataLoader), the KeyboardInterrupt passes through it and the
generator is finished for good: the next run's ``next(it)`` raises StopIteration at once.
That is ordinary Python, so nothing said so. Now the stopped run names the generators it
ended, and a run failing with StopIteration says what to do.
"""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING

from ..cluster import ClusterError
from ..cluster.onranks.execute import RankError
from ..cluster.onranks.transfer import pull

if TYPE_CHECKING:
    from ..cluster.kind import Cluster

log = logging.getLogger("dist_notebook")

FIX = "re-run the cell that builds the iterator"
EXHAUSTED = (
    "the data iterator is exhausted (an earlier run used it up, or a Stop inside its "
    f"generator ended it): {FIX}"
)
# Evaluated in each rank's namespace: its finished generators, {variable: function name}.
_FINISHED = (
    "{k: v.gi_code.co_name for k, v in list(globals().items())"
    " if type(v).__name__ == 'generator' and v.gi_frame is None and not k.startswith('_')}"
)
_FRAME = re.compile(r", in (\w+)\(")  # a traceback frame: "Cell In[3], line 5, in batches()"


def stop_iteration_hint(error: RankError | None) -> None:
    """Add the fix to a run's error when a rank's StopIteration ended it."""
    if error is not None and error.ename == "StopIteration":
        # After "StopIteration: " when it has no value (next() gives none), else after it.
        error.add_hint(f"; {EXHAUSTED}" if error.evalue else EXHAUSTED)


def ended_by_stop(cluster: Cluster, ranks: list[int], interrupt: RankError | None) -> str:
    """After a Stop: a line naming the generators that the interrupt went through and that
    are now finished on the ranks, with the fix; "" when there are none (or it cannot tell)."""
    if interrupt is None:
        return ""
    frames = {
        name
        for f in interrupt.failures
        if f.error is not None and f.error.traceback
        for name in _FRAME.findall(re.sub(r"\x1b\[[0-9;]*m", "", f.error.traceback))
    }
    if not frames:  # interrupted outside any function: no generator was in the way
        return ""
    try:
        finished = pull(cluster, _FINISHED, ranks)
    except (RankError, ClusterError, TimeoutError) as e:
        log.warning("could not look for data iterators the Stop ended: %s", e)
        return ""
    ended: dict[str, set[int]] = {}
    for rank, generators in finished.items():
        for variable, function in generators.items():
            if function in frames:
                ended.setdefault(f"{variable} ({function}())", set()).add(rank)
    if not ended:
        return ""
    names = ", ".join(sorted(ended))
    on = sorted({r for rs in ended.values() for r in rs})
    return (
        f"the Stop ended the data iterator {names} inside its generator, on rank"
        f"{'s' if len(on) > 1 else ''} {', '.join(map(str, on))}: it is exhausted now; "
        f"{FIX} before the next run"
    )
