"""cc-cache: compare cc-backend's running jobs with Slurm, every ccPollInterval, and repair
both ways. A failed or unreadable answer from cc-backend ends the cycle with an error: it is
never read as "no jobs are running"."""

from __future__ import annotations

import logging
from typing import Any

from ccadapter.cc.client import CcClient
from ccadapter.outbox import Outbox
from ccadapter.reconcilers.events import events_for
from ccadapter.slurm.collector import Collector

log = logging.getLogger(__name__)


class CcCache:
    name = "cc-cache"

    def __init__(self, client: CcClient, collector: Collector, outbox: Outbox,
                 cluster: str) -> None:
        self.client = client
        self.collector = collector
        self.outbox = outbox
        self.cluster = cluster

    def run_once(self) -> dict[str, Any]:
        # phase 1: both sides' view
        cc_runs = {(int(j["jobId"]), int(j["startTime"])) for j in
                   self.client.running_jobs(self.cluster)}
        active = self.collector.running_ids()
        ids = {j for j, _ in cc_runs if j not in active} | active
        jobs = self.collector.jobs_by_id(ids).jobs if ids else []
        # phase 2: what to change
        events = []
        ended = reopened = 0
        for job in jobs:
            run = (job.job_id, job.start_time)
            if run in cc_runs and job.finished:
                events.extend(events_for(job))  # cc-backend missed the end
                ended += 1
            elif run not in cc_runs and job.started and not job.finished:
                if self.outbox.reopen_start(self.cluster, *run):
                    reopened += 1  # delivered once, lost by cc-backend since
                else:
                    events.extend(events_for(job))
        added = self.outbox.enqueue(events)
        return {"cc_running": len(cc_runs), "slurm_active": len(active), "ended": ended,
                "reopened": reopened, "new_events": added}
