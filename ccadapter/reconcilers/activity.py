"""Which runs a poll looks at, asked so that the cost follows the running jobs and what
changed, never the queue nor the history.

A run that ran during a window has either ended since its start (slurmdbd lists it by its
end time: a range of the job table's ``(time_end, time_eligible)`` index, with nodes,
:data:`~ccadapter.slurm.formats.listing.ENDED`) or runs now. What runs now is not asked of
slurmdbd: a run that has not ended has time_end 0 there, as every pending job has, and
slurmdbd reads every queued job's row to tell them apart (a cost that grows with the queue;
``sacct -s RUNNING`` before this module). slurmctld's step list names the jobs that run
(:meth:`~ccadapter.slurm.controller.Slurmctld.running_ids`, whose cost follows the running
jobs; figures in BENCHMARKS.md, section "Scale: a long queue of pending jobs"), and
only the jobs among them the outbox does not hold open are listed by id in slurmdbd
(``sacct -j``, an index lookup): in steady state, with the hook announcing every start, none
but the components of het jobs that run steps of their own (slurmctld names such a step by
the component's id; slurmdbd answers under the leader's, whose run the outbox holds).

This is complete for a window that reaches now: a run that started in it and has ended is
in the first part, one that still runs in the second. A slice of a long window that ends
before now lists the runs that ended in it; what started in it and ended later is in a later
slice or runs now. Nothing here depends on the window for the running runs, so a window whose
second part failed (slurmctld unreachable) loses nothing: the next one asks again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from ccadapter.slurm.collector import Collector, Listing
from ccadapter.slurm.formats.listing import ENDED

Run = tuple[int, int]


def ran_during(collector: Collector, since: float, until: float | None,
               open_runs: Callable[[], Iterable[Run]]) -> Listing:
    """The runs that ended during [since, until] and, when ``until`` is None (now), the
    runs that run now whose start the outbox may lack (``open_runs``: the runs it holds
    open, asked only then)."""
    listing = collector.stamps(since, until, asked=ENDED)
    if until is None:
        _, others = running_now(collector, open_runs())
        listing.stamps += others.stamps
        listing.errors += others.errors
    return listing


def running_now(collector: Collector, open_runs: Iterable[Run]) -> tuple[set[Run], Listing]:
    """The runs that run now, in two parts: those of ``open_runs`` whose job runs (nothing
    more is asked of them), and the listing of every run of the other running jobs (by id,
    from slurmdbd: their start times, whether their start is stored is the caller's to ask)."""
    running = collector.slurmctld.running_ids()
    held = {run for run in open_runs if run[0] in running}
    others = running - {job_id for job_id, _ in held}
    return held, collector.stamps_of(others) if others else Listing([])
