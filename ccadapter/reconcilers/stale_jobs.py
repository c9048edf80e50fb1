"""stale-jobs: runs we told cc-backend are running, which Slurm has ended since.

Every cycle lists the runs of the jobs the outbox holds open (``sacct -j IDS``, one short
line per run: a cost that follows how many jobs run, not how many wait in the queue, nor how
many ever ran), and reads in detail only the runs that ended, to stop them with Slurm's final
state. This catches the ends a time window can miss: slurmdbd recording an end late, after
the window (and the hour of slurm-lookback) that covered it had passed.

A run that slurmdbd does not list at all on two consecutive cycles is reported (once): the
job may have been removed from the database by hand, and cc-backend keeps it running until
an operator stops it there.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ccadapter.reconcilers import OneCluster

log = logging.getLogger(__name__)


@dataclass(eq=False)
class StaleJobs(OneCluster):
    name: ClassVar[str] = "stale-jobs"

    _unlisted: set[tuple[int, int]] = field(default_factory=set, init=False)
    _reported: set[tuple[int, int]] = field(default_factory=set, init=False)

    def run_once(self) -> dict[str, Any]:
        open_runs = set(self.outbox.open_runs(self.cluster))
        if not open_runs:
            self._unlisted = set()
            return {"open": 0, "ended": 0, "stopped": 0}
        listing = self.collector.stamps_of({job_id for job_id, _ in open_runs})
        listed = {s.run: s for s in listing.stamps}
        ended = {run for run in open_runs if run in listed and listed[run].finished}
        self._note_unlisted(open_runs - set(listed))
        stopped = self.enqueue_ended(ended)
        return {"open": len(open_runs), "ended": len(ended), "unlisted": len(self._unlisted),
                "stopped": stopped}

    def _note_unlisted(self, unlisted: set[tuple[int, int]]) -> None:
        for job_id, start in sorted((unlisted & self._unlisted) - self._reported):
            log.warning("job %d (start %d) is open in cc-backend but slurmdbd lists no such "
                        "run; stop it in cc-backend if the job is gone", job_id, start)
            self._reported.add((job_id, start))
        self._unlisted = unlisted
        self._reported &= unlisted
