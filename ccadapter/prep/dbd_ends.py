"""Ends the fast path reads from slurmdbd, not slurmctld, where the outbox holds the start.

A stop needs what a run ended with (state, end time, exit code), never its allocation: the
start the outbox holds carries the nodes, hwthreads, GPUs and script into the stop. slurmdbd
has the end a moment after EpilogSlurmctld is run (slurmctld queues the job's completion for
slurmdbd when it ends the job), and one ``sacct`` answers a whole part of ends. Asked of
slurmctld, each end was one ``show job`` (REQUEST_JOB_INFO_SINGLE) under its job read lock,
one RPC per job on top of its start's, and most exactly when a burst ends (issue 47). So the
ends whose run is open in the outbox are read from slurmdbd, every one of a part in one
question; one slurmdbd does not show ended yet is asked again after the fast path's delay
(slurmdbd's lag, not slurmctld's). Where slurmdbd cannot be asked, or shows no run of the
job at all, slurmctld is asked, as before. A het job component's end is slurmctld's: its
run is stored under its leader's id.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping

from ccadapter.errors import CcAdapterError
from ccadapter.model import Job
from ccadapter.outbox import NewEvent, Outbox
from ccadapter.outbox.events import latest_runs
from ccadapter.prep.messages import HookEvent
from ccadapter.reconcilers.lifecycle import events_for
from ccadapter.slurm.collector import Collector

log = logging.getLogger(__name__)

Part = Mapping[int, tuple[set[HookEvent], int]]  # id -> (events announced, attempts)


def open_ends(outbox: Outbox, cluster: str, part: Part) -> list[int]:
    """The ids of the part announcing only an end whose run the outbox holds open (its start
    stored, no stop)."""
    ends = [i for i, (kinds, _) in part.items() if kinds == {HookEvent.END}]
    latest = latest_runs(outbox.store, cluster, ends) if ends else {}
    return sorted(i for i in ends if latest.get(i) == "start")


def ends_in_slurmdbd(collector: Collector, outbox: Outbox, cluster: str, part: Part,
                     ignore: re.Pattern[str] | None = None
                     ) -> tuple[list[NewEvent], dict[int, int], set[int]]:
    """The events of the part's open ends as slurmdbd holds them; the ids slurmdbd does not
    show ended yet, with their attempts (to be asked again); and every id this took (the
    others are slurmctld's). slurmdbd unreachable: it took none."""
    ids = open_ends(outbox, cluster, part)
    if not ids:
        return [], {}, set()
    try:
        found = collector.jobs_by_id(ids, starts=())
    except CcAdapterError as exc:
        log.info("fast path: slurmdbd not asked (%s); %d end(s) asked of slurmctld", exc,
                 len(ids))
        return [], {}, set()
    latest: dict[int, Job] = {}
    for run in found.jobs:  # a requeued job's earlier runs are ended: its latest tells
        if run.job_id not in latest or run.start_time > latest[run.job_id].start_time:
            latest[run.job_id] = run
    events = [e for run in found.jobs if run.finished for e in events_for(run, ignore)]
    unended = {i: part[i][1] for i, run in latest.items() if not run.finished}
    if len(latest) < len(ids):  # slurmdbd unreachable, or it has not even the start yet
        log.debug("fast path: slurmdbd shows no run of %d job(s); asked of slurmctld",
                  len(ids) - len(latest))
    return events, unended, set(latest)
