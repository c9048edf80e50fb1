"""stale-jobs: runs we told cc-backend are running, which slurmctld no longer runs.

A run missing from ``squeue`` on two consecutive cycles (one missing answer can be a
requeue in flight or a controller restart) is looked up in sacct and stopped with Slurm's
final state. This catches the ends a time window can miss: slurmdbd recording an end late,
after the window that covered it had passed.
"""

from __future__ import annotations

import logging
from typing import Any

from ccadapter.model import cc_state
from ccadapter.outbox import Outbox
from ccadapter.reconcilers.events import events_for
from ccadapter.slurm.collector import Collector

log = logging.getLogger(__name__)

class StaleJobs:
    name = "stale-jobs"

    def __init__(self, collector: Collector, outbox: Outbox, cluster: str) -> None:
        self.collector = collector
        self.outbox = outbox
        self.cluster = cluster
        self._suspects: set[tuple[int, int]] = set()

    def run_once(self) -> dict[str, Any]:
        open_runs = set(self.outbox.open_runs(self.cluster))
        if not open_runs:
            self._suspects = set()
            return {"open": 0, "stopped": 0}
        active = self.collector.running_ids()
        missing = {run for run in open_runs if run[0] not in active}
        confirmed = missing & self._suspects
        self._suspects = missing - confirmed
        stopped = self._stop(confirmed) if confirmed else 0
        return {"open": len(open_runs), "suspects": len(self._suspects),
                "confirmed": len(confirmed), "stopped": stopped}

    def _stop(self, runs: set[tuple[int, int]]) -> int:
        result = self.collector.jobs_by_id({job_id for job_id, _ in runs})
        events = []
        for job in result.jobs:
            if (job.job_id, job.start_time) not in runs:
                continue
            if job.finished:
                events.extend(events_for(job))
            else:  # slurmdbd has not caught up yet: ask again next cycle
                self._suspects.add((job.job_id, job.start_time))
                log.info("job %d gone from squeue, sacct still says %s", job.job_id,
                         cc_state(job.state))
        found = {(j.job_id, j.start_time) for j in result.jobs}
        for job_id, start in sorted(runs - found):
            log.warning("job %d (start %d) is open in cc-backend but sacct has no such run",
                        job_id, start)
        return self.outbox.enqueue(events)
