"""backfill: put the runs of a past time range into the outbox again, chunk by chunk.

The same query and events as the slurm-window reconciler, over a range the operator names.
It leaves lastRun as it is, unless there is none (a first start): then the command sets it to
the range's end, so that the daemon's first window continues where the backfill ended. The
outbox identifies events by (cluster, jobId, startTime, kind), so a run it already holds,
delivered or not, is not enqueued twice: a backfill over a range the daemon covered sends
nothing new. With ``resend`` the delivered events of the
range are opened again with fresh bodies from Slurm, for a cc-backend that lost them
(restored from an old backup); cc-backend answers 422 "already there" to what it still has.

Events older than slurmQueryMaxSpan have left the outbox (``compact``); those are enqueued
as new and cc-backend's 422 makes them count as delivered.
The range is cut into chunks so that one listing stays small and a failure loses at most one
chunk's work: everything before it is committed. Within a chunk only the runs that ran are
read (pending jobs never are), in batches.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ccadapter.outbox import Outbox, admin
from ccadapter.reconcilers.lifecycle import events_for
from ccadapter.slurm.collector import Collector


@dataclass(frozen=True)
class ChunkResult:
    since: float
    until: float
    jobs: int
    events: int
    new: int
    resent: int
    skipped_records: int


def chunks(since: float, until: float, size: float) -> list[tuple[float, float]]:
    """[since, until] cut into consecutive spans of at most ``size`` seconds."""
    if until <= since:
        raise ValueError("the range is empty: --until must be later than --since")
    if size <= 0:
        raise ValueError("the chunk size must be positive")
    spans = []
    start = since
    while start < until:
        end = min(start + size, until)
        spans.append((start, end))
        start = end
    return spans


class Backfill:
    def __init__(self, collector: Collector, outbox: Outbox,
                 ignore: re.Pattern[str] | None, resend: bool = False) -> None:
        self.collector = collector
        self.outbox = outbox
        self.ignore = ignore
        self.resend = resend

    def run_chunk(self, since: float, until: float) -> ChunkResult:
        """One listing of the chunk, then its runs read and committed batch by batch (one
        transaction each, plus one to reopen with ``resend``): memory is bounded by a
        batch, however many runs a chunk of a busy month holds."""
        jobs = events_total = new = resent = skipped = 0
        for result in self.collector.iter_window(since, until):
            events = [ev for job in result.jobs for ev in events_for(job, self.ignore)]
            new += self.outbox.enqueue(events)
            resent += admin.resend(self.outbox.store, events) if self.resend else 0
            jobs += len(result.jobs)
            events_total += len(events)
            skipped += len(result.errors)
        return ChunkResult(since, until, jobs, events_total, new, resent, skipped)
