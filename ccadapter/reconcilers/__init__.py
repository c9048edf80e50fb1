"""Reconcilers: each compares one source of truth with what cc-backend knows or will know,
and puts the difference into the outbox. Each runs alone (``ccadapter sync --once --only
NAME``) and has its own interval in the daemon.

Every cycle has two phases: first read the state (Slurm, cc-backend, the outbox), then
decide what to enqueue, one transaction per batch of events. Nothing is sent from here:
delivery is the outbox's business.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from ccadapter.reconcilers.lifecycle import events_for

if TYPE_CHECKING:
    from ccadapter.outbox import Outbox
    from ccadapter.slurm.collector import Collector


class Reconciler(Protocol):
    name: str

    def run_once(self) -> dict[str, Any]:
        """One cycle; returns a small summary for logs and ``sync --once``."""
        ...


@dataclass(eq=False)
class OneCluster:
    """What the reconcilers that follow one cluster's live state (stale-jobs, cc-cache,
    nodestate) work with: that cluster's Slurm, through its collector, and the outbox, where
    their events carry the cluster's name. (slurm-window reads its cluster from its
    ``WindowSettings``, which it shares with slurm-lookback.)"""

    collector: Collector
    outbox: Outbox
    cluster: str

    def enqueue_ended(self, runs: set[tuple[int, int]]) -> int:
        """The events of those ``runs`` that Slurm shows ended go into the outbox, read a
        batch of ids at a time (no job scripts: an end needs none); returns how many were
        new. No runs: no Slurm call."""
        added = 0
        if not runs:
            return 0
        for result in self.collector.iter_jobs({job_id for job_id, _ in runs}, starts=()):
            added += self.outbox.enqueue([ev for job in result.jobs
                                          if (job.job_id, job.start_time) in runs
                                          and job.finished for ev in events_for(job)])
        return added
