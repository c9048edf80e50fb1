"""cc-cache: compare cc-backend's running jobs with Slurm, every ccPollInterval and at start,
and repair both ways. A failed or unreadable answer from cc-backend ends the cycle with an
error: it is never read as "no jobs are running".

Both sides are compared as sets of runs (jobId, startTime): cc-backend's running jobs, read
page by page (only the two numbers of each are kept), and the runs Slurm runs now
(:func:`.activity.running_now`: slurmctld's step list, one line per step of a running job,
none per queued one, and the runs the outbox holds open; only running jobs it does not hold
open are listed by id in slurmdbd). Only the runs that differ are read in detail:

- running in cc-backend, ended in Slurm: cc-backend missed the stop; it is sent. A stop
  delivered more than :data:`LOST_STOP_AFTER` seconds ago is sent again: cc-backend 1.5.4
  answers 200 to a stop that meets a commit of its job cache and applies it to another job
  (internal/api/job.go stopJobByRequest looks in the cache before it takes the lock), and a
  stop published on NATS may be dropped. A run that slurmctld lists without a step (an
  allocation before its first srun, without PrologFlags=Contain) is read too: its details
  show it has not ended, and it is left running.
- running in Slurm, not in cc-backend: if the outbox never had its start, the start is sent;
  if the start was delivered, cc-backend lost it (restored from a backup) and it is sent
  again -- unless it was delivered less than ``commit_interval`` seconds ago: cc-backend 1.5
  keeps a new job in its job cache until its commit worker (``commit-job-worker``, 2 minutes by
  default) moves it, and ``GET /api/jobs/`` does not list it until then
  (internal/repository/jobCreate.go, internal/taskmanager/commitJobService.go at v1.5.4).
  Sending it again then would get a 500 (the cache's UNIQUE constraint), not a 422. Nor is a
  run cc-backend refused because it holds another run of the job id from less than a day
  before (``NOT_HELD``, :mod:`ccadapter.cc.rest_delivery`): it would refuse it again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from ccadapter.cc.client import CcClient
from ccadapter.outbox import DeliveryStatus
from ccadapter.reconcilers import OneCluster
from ccadapter.reconcilers.activity import running_now
from ccadapter.reconcilers.lifecycle import events_for
from ccadapter.reconcilers.lost_stops import stray_stops

log = logging.getLogger(__name__)

Run = tuple[int, int]
# A stop delivered this long ago whose run cc-backend still lists running was lost. Shorter
# gaps are a stop that crossed this cycle's read of cc-backend (or is still on its way over
# NATS): sending it again would only cost a 422.
LOST_STOP_AFTER = 60.0


@dataclass(eq=False)
class CcCache(OneCluster):
    name: ClassVar[str] = "cc-cache"

    client: CcClient
    commit_interval: float = 300.0
    clock: Callable[[], float] = time.time

    def run_once(self) -> dict[str, Any]:
        # phase 1: both sides' view, as sets of runs
        now = self.clock()
        cc_runs: set[Run] = set(self.client.running_runs(self.cluster))
        held, others = running_now(self.collector, self.outbox.open_runs(self.cluster))
        slurm_runs = held | {s.run for s in others.stamps if s.started and not s.finished}
        # phase 2: what to change
        # runs cc-backend shows running that Slurm no longer lists as running
        ended = self.enqueue_ended(cc_runs - slurm_runs)
        stops_again = self._lost_stops(cc_runs - slurm_runs, now)
        reopened, added, waiting = self._missing(slurm_runs - cc_runs, now)
        return {"cc_running": len(cc_runs), "slurm_running": len(slurm_runs), "ended": ended,
                "stops_again": stops_again, "reopened": reopened, "new_events": added,
                "in_cc_job_cache": waiting}

    def _lost_stops(self, runs: set[Run], now: float) -> int:
        """Runs cc-backend lists running whose stop we delivered: their stops again."""
        if not runs:
            return 0
        stops = self.outbox.start_deliveries(self.cluster, runs, kind="stop")
        lost = [run for run, (status, at) in sorted(stops.items())
                if status == DeliveryStatus.DELIVERED and at is not None
                and now - at > LOST_STOP_AFTER]
        bodies = self.outbox.stop_bodies(self.cluster, lost) if lost else {}
        again = [run for run in lost if self.outbox.reopen_start(self.cluster, *run,
                                                                 kind="stop")]
        if again:
            log.warning("cc-cache: cc-backend still lists %d run(s) running whose stop it "
                        "took; their stops are sent again. It applied them to other jobs, "
                        "which now show: %s (find them by state and duration in cc-backend's "
                        "job table)", len(again), stray_stops(bodies, again))
        return len(again)

    def _missing(self, runs: set[Run], now: float) -> tuple[int, int, int]:
        """Runs Slurm lists running that cc-backend does not list."""
        # a run whose start cc-backend refused for its duplicate rule stays unlisted
        runs = runs - self.outbox.not_held(self.cluster, runs)
        if not runs:
            return 0, 0, 0
        stored = self.outbox.start_deliveries(self.cluster, runs)
        reopened = waiting = 0
        unknown: set[Run] = set()
        for run in runs:
            status, delivered_at = stored.get(run, (None, None))
            if status is None:
                unknown.add(run)
            elif status == DeliveryStatus.DELIVERED and delivered_at is not None \
                    and now - delivered_at < self.commit_interval:
                waiting += 1  # in cc-backend's job cache, not listed yet
            elif status == DeliveryStatus.DELIVERED \
                    and self.outbox.reopen_start(self.cluster, *run):
                reopened += 1  # delivered once, lost by cc-backend since
        added = 0
        if unknown:
            for result in self.collector.iter_jobs({j for j, _ in unknown}):
                events = [ev for job in result.jobs
                          if (job.job_id, job.start_time) in unknown and job.started
                          and not job.finished for ev in events_for(job)]
                added += self.outbox.enqueue(events)
        if reopened:
            log.info("cc-cache: %d run(s) cc-backend lost are sent again", reopened)
        return reopened, added, waiting
