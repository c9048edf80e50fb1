"""The end of a run that Slurm requeued, as the Prolog/Epilog fast path reads it.

When a run is requeued (preempted with ``PreemptMode=REQUEUE``, ``scontrol requeue``, a
failed PrologSlurmctld, a node that failed), slurmctld counts it in ``Restarts=`` and turns
the job's record into the next run's at once: while the ended run's EpilogSlurmctld runs,
``scontrol show job`` shows ``JobState=COMPLETING`` (PENDING with the COMPLETING flag) and
a StartTime that is the requeue moment, then PENDING. Built into a Job, that record looks
like a run that started then: sent as a start, cc-backend 1.5.4 holds it running beside the
real runs (its one-run-a-day check reads ended jobs only), and the run that ended waits for
the next poll to be stopped. slurmctld no longer knows that run; slurmdbd does.

A prolog's start can meet the same record: a PrologSlurmctld that fails (the site's check
after ccadapter's hook) has slurmctld requeue the job before the fast path asks, and the
record it is shown is the next run's, COMPLETING with the requeue moment as StartTime. Built
into a start, cc-backend holds a run that never was, running for ever beside the real one
(seen on 24.11). The run the prolog announced is slurmdbd's to tell then too.

So is a job that gave all its nodes to the job it expanded (``--dependency=expand:``, then
``NumNodes=0``): at its epilog slurmctld shows it COMPLETED with no node, its EndTime its time
limit's; slurmdbd holds its run, ended at the resize (:mod:`ccadapter.slurm.resize`).
"""

from __future__ import annotations

import logging
from collections import Counter

from ccadapter.errors import CcAdapterError
from ccadapter.model import Job, base_state
from ccadapter.outbox import Outbox
from ccadapter.prep.messages import HookEvent
from ccadapter.slurm.collector import Collector

log = logging.getLogger(__name__)

# slurmctld's record of a job requeued meanwhile: the ended run's epilog running, then waiting
_REQUEUED_STATES = frozenset({"COMPLETING", "PENDING", "REQUEUE_HOLD"})


def requeued_record(job: Job, outbox: Outbox) -> bool:
    """Whether slurmctld's record of a job whose end was announced is a requeued job's,
    not the run that ended: requeued at least once, not ended, and no start of its run
    stored (the prolog announced the run that ended, with its own StartTime). A later run
    that ends normally shows its own StartTime, whose start its prolog stored."""
    return job.restarts > 0 and not job.finished and not outbox.known_starts(
        [(job.job_id, job.start_time)], job.cluster)


def requeued_before_asked(job: Job) -> bool:
    """Whether a job whose start was announced was requeued before slurmctld was asked: the
    run its prolog announced ended (a failed PrologSlurmctld), the record is the next run's."""
    return (job.restarts > 0 and not job.finished
            and base_state(job.state) in _REQUEUED_STATES)


def read_from_slurmdbd(job: Job, outbox: Outbox,
                       wanted: frozenset[HookEvent] | set[HookEvent] = frozenset(
                           {HookEvent.END})) -> bool:
    """Whether the runs of a job whose start or end was announced are slurmdbd's to tell."""
    if HookEvent.END in wanted:
        return job.gave_its_nodes or requeued_record(job, outbox)
    return HookEvent.START in wanted and requeued_before_asked(job)


def ended_runs(collector: Collector, jobs: list[Job]) -> tuple[list[Job], set[int]]:
    """The runs slurmdbd holds of these jobs (``read_from_slurmdbd``), and the ids of those
    it does not show every ended run of yet (slurmctld sends it the end a moment later: ask
    again). Every requeue ended a run, so ``Restarts=`` says how many to expect, one more for
    a job that ended itself. No allocation
    details are asked of slurmctld: its record holds the next run's now; a run whose start
    its prolog stored keeps that start (the outbox keeps the first). slurmdbd unreachable:
    nothing, and every job is asked again (then left to the poll)."""
    ids = sorted({i for job in jobs for i in job.slurm_ids})
    try:
        found = collector.jobs_by_id(ids, starts=())
    except CcAdapterError as exc:
        log.warning("fast path: %s; requeued job(s) %s asked again", exc,
                    ", ".join(map(str, ids[:5])))
        return [], {job.job_id for job in jobs}
    ended = Counter(run.job_id for run in found.jobs if run.finished)
    for job in jobs:
        log.debug("fast path: job %d (Restarts=%d, ended: %s): %d ended run(s) in slurmdbd",
                  job.job_id, job.restarts, job.finished, ended[job.job_id])
    return found.jobs, {job.job_id for job in jobs
                        if ended[job.job_id] < job.restarts + int(job.finished)}
