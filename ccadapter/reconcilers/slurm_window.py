"""slurm-window: every run active since the last window goes into the outbox.

The window is [lastRun - 1 s, now], cut to slurmQueryMaxSpan (with a warning: jobs older than
that are not looked for). lastRun moves to the window's end only after every event of the
window is committed to the outbox, so a crash at any moment repeats a window, never skips one.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from ccadapter.config import Config
from ccadapter.lastrun import LastRun
from ccadapter.outbox import Outbox
from ccadapter.reconcilers.events import events_for
from ccadapter.slurm.collector import Collector

log = logging.getLogger(__name__)


class SlurmWindow:
    name = "slurm-window"

    def __init__(self, collector: Collector, outbox: Outbox, last_run: LastRun, config: Config,
                 clock: Callable[[], float] = time.time) -> None:
        self.collector = collector
        self.outbox = outbox
        self.last_run = last_run
        self.config = config
        self.clock = clock
        self._ignore = config.ignore_hosts_pattern()

    def window_start(self, now: float) -> float:
        last = self.last_run.get()
        earliest = now - self.config.slurm_query_max_span
        if last is None:
            log.info("no lastRun yet: looking back %d s", self.config.slurm_poll_interval)
            return now - self.config.slurm_poll_interval
        if last - 1 < earliest:
            log.warning("lastRun is %.0f s ago, more than slurmQueryMaxSpan (%d s): jobs that "
                        "ended before %s are not looked for", now - last,
                        self.config.slurm_query_max_span, time.ctime(earliest))
            return earliest
        return last - 1

    def run_once(self) -> dict[str, Any]:
        now = self.clock()
        since = self.window_start(now)
        result = self.collector.window(since, None)  # phase 1: what Slurm says
        events = [ev for job in result.jobs for ev in events_for(job, self._ignore)]
        added = self.outbox.enqueue(events)  # phase 2: one transaction
        self.last_run.set(now)
        return {"since": since, "until": now, "jobs": len(result.jobs), "events": len(events),
                "new_events": added, "skipped_records": len(result.errors)}
