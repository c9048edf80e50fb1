"""The job lifecycle as events: which runs become which outbox events. Pure.

    never started ──────────────────────────────► nothing (never sent)
    started, running ───────────────────────────► start
    started, ended (completed, failed, ...) ─────► start, stop (the outbox orders them)
      ... with energy accounted by slurmdbd ────► start, stop, energy (after the stop)
    all hosts match ignoreHosts ────────────────► nothing
    a het job's component on its own ───────────► nothing (the het job is one Job, keyed by
                                                  its leader's id and start)

A requeued job's runs are separate (same jobId, other startTime): the old run's stop and the
new run's start are separate events, ordered by the outbox.
"""

from __future__ import annotations

import re

from ccadapter.cc.payload import energy_meta_body, start_job_body, stop_job_body
from ccadapter.errors import SlurmParseError
from ccadapter.model import EventKind, Job
from ccadapter.outbox import NewEvent
from ccadapter.slurm.formats.records import ParseContext
from ccadapter.slurm.formats.values import expand_hostlist


def ignored(job: Job, pattern: re.Pattern[str] | None) -> bool:
    return bool(pattern and job.hostnames and all(pattern.search(h) for h in job.hostnames))


def hosts_ignored(nodes: str, pattern: re.Pattern[str] | None) -> bool:
    """The same rule for a hostlist expression (``n[1-2]``) as the run listing gives it;
    a list that cannot be expanded is not ignored (the detailed read reports it)."""
    if not pattern or not nodes:
        return False
    try:
        hosts = expand_hostlist(nodes, ParseContext("", "ignoreHosts"))
    except SlurmParseError:
        return False
    return bool(hosts) and all(pattern.search(h) for h in hosts)


def events_for(job: Job, ignore: re.Pattern[str] | None = None) -> list[NewEvent]:
    if not job.started or job.het_part or ignored(job, ignore) or not job.user:
        return []
    start = start_job_body(job)
    events = [NewEvent(job.cluster, job.job_id, job.start_time, EventKind.START, start,
                       rich=job.allocation_known)]
    if job.finished:
        events.append(NewEvent(job.cluster, job.job_id, job.start_time, EventKind.STOP,
                               {"stop": stop_job_body(job), "start": start}))
        if (energy := energy_meta_body(job)) is not None:
            events.append(NewEvent(job.cluster, job.job_id, job.start_time, EventKind.ENERGY,
                                   energy))
    return events
