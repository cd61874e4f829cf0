"""Why the run's steps are slow, in one line: the verdict of a run's rank summaries.

The straggler rule (``protocol.mark_stragglers``) finds the rank the others wait for. It
cannot say why; the verdict can, from each rank's own cost of a step (the records' CPU time
of the training thread, the time it waited for a CPU, the load, its cores, its time waiting
for data: ``protocol.Record``), as medians over the window:

*starved* (nothing to fix in the code)
    The others wait for the rank (the straggler rule holds), yet it does no more work (its
    CPU time per step is below WORK_RATIO x the other ranks' median) and the machine keeps it
    from a CPU: it waited for one for at least STARVED_DELAY_SHARE of its step, and that wait
    beyond the other ranks' median wait is at least STARVED_EXPLAINS of the time the others
    wait for it. Where the run delay is unknown (no ``/proc/thread-self/schedstat``): the load
    average is above the rank's cores. A starved rank is never marked the straggler: another
    process holds its core, and no change to the rank's code or data would help.
    Its share of a core is CPU time / (CPU time + run delay): the time it ran over the time it
    wanted to.
*does more work* (an imbalance to fix)
    Its CPU time per step is at least WORK_RATIO x the other ranks' median, by at least
    WORK_MIN_S: its shard, its batch or its branch of the code is heavier. Judged whether or
    not the straggler rule holds (a heavier rank on a machine with idle cores may be waited
    for by less than the rule's share).
*the straggler* (waits outside its CPU work)
    The straggler rule holds and neither of the above: the rank does the same work and gets a
    CPU, yet the others wait for it: it sleeps, reads a file, waits for a lock or a device.
*input-bound*
    The ranks' time waiting for data (``report(data_time=...)``) is at least
    INPUT_BOUND_SHARE of their step (every rank: the run; else the worst rank alone).
*comm-bound*
    The gradient all-reduce itself takes at least COMM_BOUND_SHARE of the step: per step the
    least comm time of the ranks (the last rank to arrive waits only for the transfer; the
    others' wait for it is skew, not communication), its median over the window's steps,
    over the ranks' median step time. The network or the gradient size sets the pace, not
    one rank.
*healthy*
    None of the above.

The order above is the verdict's: the first that holds is the line. CPU time is the host's
work: on GPU ranks (a record with a GPU sample) the work and starved verdicts are not judged
(the device's work is not in it, and a wait for the device may spin on the CPU).

Thresholds measured with bench/straggler.py (2 CPU ranks on a 2-core machine, with and
without two CPU hogs): bench/README.md and docs/guides/why-slow.md.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .protocol import RankSummary

WORK_RATIO = 1.3
WORK_MIN_S = 0.001
STARVED_DELAY_SHARE = 0.2
STARVED_EXPLAINS = 0.5
INPUT_BOUND_SHARE = 0.3
COMM_BOUND_SHARE = 0.5
HEALTHY = "healthy"
MIN_RECORDS = 10  # a run of one rank is judged from this many records on


def _others(s: RankSummary, ranks: Sequence[RankSummary], name: str) -> float | None:
    values = [v for o in ranks if o is not s and (v := getattr(o, name)) is not None]
    return statistics.median(values) if values else None


def _cpu_judged(ranks: Sequence[RankSummary]) -> bool:
    """Whether CPU time measures the ranks' work: CPU ranks that all measured it."""
    return len(ranks) >= 2 and all(s.cpu_time is not None and s.gpu_util is None for s in ranks)


def work_ratios(ranks: Sequence[RankSummary]) -> None:
    """Set each rank's ``work_ratio``: its CPU time per step over the other ranks' median."""
    judged = _cpu_judged(ranks)
    for s in ranks:
        others = _others(s, ranks, "cpu_time") if judged else None
        s.work_ratio = None if not others or s.cpu_time is None else s.cpu_time / others


def does_more_work(s: RankSummary, ranks: Sequence[RankSummary]) -> bool:
    others = _others(s, ranks, "cpu_time")
    return bool(
        s.work_ratio is not None
        and others is not None
        and s.cpu_time is not None
        and s.work_ratio >= WORK_RATIO
        and s.cpu_time - others >= WORK_MIN_S
    )


def is_starved(s: RankSummary, ranks: Sequence[RankSummary]) -> bool:
    """Whether a rank the others wait for (the straggler rule held) is starved of a CPU."""
    if s.work_ratio is None or s.work_ratio >= WORK_RATIO or not s.step_time:
        return False
    if s.run_delay is None:
        return s.load is not None and s.cores is not None and s.load > s.cores
    extra = s.run_delay - (_others(s, ranks, "run_delay") or 0.0)
    wait = s.others_wait or 0.0
    return s.run_delay >= STARVED_DELAY_SHARE * s.step_time and extra >= STARVED_EXPLAINS * wait


def _names(ranks: Sequence[RankSummary]) -> str:
    nums = [str(s.rank) for s in ranks]
    return ("rank " if len(nums) == 1 else "ranks ") + ", ".join(nums)


def _load(s: RankSummary) -> str:
    if s.load is None:
        return ""
    cores = "" if s.cores is None else f" on {s.cores:.0f} core{'s' if s.cores != 1 else ''}"
    return f" (load {s.load:.0f}{cores})"


def _ms(seconds: float) -> str:
    return f"{1e3 * seconds:.0f} ms"


def judge(ranks: Sequence[RankSummary]) -> str | None:
    """The run's verdict line from its rank summaries (``protocol.mark_stragglers`` run on
    them first); None until the straggler rule has enough steps to judge."""
    if not ranks or (len(ranks) >= 2 and all(s.others_wait is None for s in ranks)):
        return None
    if len(ranks) == 1 and ranks[0].records < MIN_RECORDS:
        return None
    starved = [s for s in ranks if s.starved]
    if starved:
        worst = min(starved, key=lambda s: s.cpu_share if s.cpu_share is not None else 1.0)
        who = _names(starved)
        verb = "is" if len(starved) == 1 else "are"
        it = "it" if len(starved) == 1 else f"rank {worst.rank}"
        if worst.cpu_share is None:
            got = f"{it} waits for a CPU"
        else:
            got = f"{it} gets {100 * worst.cpu_share:.0f}% of a core"
        return f"{who} {verb} starved: {got}{_load(worst)}; nothing to fix in the code"
    heavier = sorted((s for s in ranks if does_more_work(s, ranks)), key=lambda s: -s.work_ratio)  # type: ignore[operator]
    if heavier:
        top = heavier[0]
        verb = "does" if len(heavier) == 1 else "do"
        return (
            f"{_names(heavier)} {verb} {top.work_ratio:.1f}x the work of the median rank: "
            "its shard or its branch is heavier"
        )
    slow = [s for s in ranks if s.straggler]
    if slow:
        top = max(slow, key=lambda s: s.others_wait or 0.0)
        return (
            f"{_names(slow)} is the straggler: the others wait {_ms(top.others_wait or 0.0)} "
            "of each step for it, and it does no more work (it sleeps, or waits for I/O, "
            "a lock or a device)"
        )
    shares = [s.data_share for s in ranks]
    known = [v for v in shares if v is not None]
    if known and len(known) == len(ranks) and min(known) >= INPUT_BOUND_SHARE:
        return f"input-bound: {100 * statistics.median(known):.0f}% of each step waits for data"
    bound = [s for s in ranks if s.data_share is not None and s.data_share >= INPUT_BOUND_SHARE]
    if bound:
        top = max(bound, key=lambda s: s.data_share or 0.0)
        return (
            f"{_names([top])} is input-bound: {100 * (top.data_share or 0.0):.0f}% "
            "of its step waits for data"
        )
    share = transfer_share(ranks)
    if share is not None and share >= COMM_BOUND_SHARE:
        return (
            f"comm-bound: the gradient all-reduce takes {100 * share:.0f}% of each step, "
            "even for the last rank to arrive"
        )
    return HEALTHY


def transfer_share(ranks: Sequence[RankSummary]) -> float | None:
    """The all-reduce's own share of a step: the median over the steps every rank reported
    of the least comm time of the ranks, over the ranks' median step time."""
    timed = [s for s in ranks if s.per_step_comm]
    steps = [s.step_time for s in ranks if s.step_time]
    if len(ranks) < 2 or len(timed) < len(ranks) or not steps:
        return None
    common = set.intersection(*(set(s.per_step_comm) for s in timed))
    if len(common) < MIN_RECORDS:
        return None
    transfer = statistics.median(min(s.per_step_comm[k] for s in timed) for k in common)
    return transfer / statistics.median(steps)
