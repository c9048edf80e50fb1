"""slurm-window: every run active since the last window goes into the outbox.

The window is [lastRun - slurmWindowOverlap, now], cut to slurmQueryMaxSpan (with a warning:
jobs older than that are not looked for). The overlap (120 s by default, 1 s in
cc-slurm-adapter) is there because slurmdbd receives job records late: a test here lost a
job that ran for one second when records lagged three seconds behind a 1 s overlap.
lastRun moves to the window's end only after every event of the window is committed to the
outbox, so a crash at any moment repeats a window, never skips one.

slurmdbd learns of jobs from slurmctld, which queues its messages while slurmdbd is away and
sends them once it is back: the records of jobs that ran during an outage arrive after sacct
already answers again, dated in windows that have passed. So after sacct failed, windows keep
starting where the failures began until ``outage_grace`` seconds after it answers again.
The same class with ``lookback`` set (``slurm-lookback``, every few minutes) re-reads a fixed
span and never touches lastRun: it catches records that arrive later still. It never reaches
before the first window this outbox ever ran (a new installation does not resend history).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from ccadapter.config import Config
from ccadapter.errors import CcAdapterError
from ccadapter.lastrun import LastRun
from ccadapter.outbox import Outbox
from ccadapter.reconcilers.events import events_for
from ccadapter.slurm.collector import Collector

log = logging.getLogger(__name__)

_OUTAGE, _RECOVERED = "slurm-window.outage_since", "slurm-window.recovered_at"
_ORIGIN = "slurm-window.origin"


class SlurmWindow:
    def __init__(self, collector: Collector, outbox: Outbox, last_run: LastRun, config: Config,
                 clock: Callable[[], float] = time.time, *, lookback: float | None = None,
                 outage_grace: float = 600.0) -> None:
        self.collector = collector
        self.outbox = outbox
        self.last_run = last_run
        self.config = config
        self.clock = clock
        self.lookback = lookback
        self.outage_grace = outage_grace
        self.name = "slurm-lookback" if lookback else "slurm-window"
        self._ignore = config.ignore_hosts_pattern()

    def window_start(self, now: float) -> float:
        if self.lookback:
            origin = self.outbox.get_state(_ORIGIN)
            span = min(self.lookback, self.config.slurm_query_max_span)
            return max(now - span, float(origin)) if origin else now
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
        since = max(last - self.config.slurm_window_overlap, earliest)
        outage = self.outbox.get_state(_OUTAGE)
        return min(since, float(outage)) if outage else since

    def run_once(self) -> dict[str, Any]:
        now = self.clock()
        since = self.window_start(now)
        if self.lookback and since >= now:
            return {"skipped": "no window has run yet"}
        try:
            # phase 1: what Slurm says (no script fetched again for a run already stored)
            result = self.collector.window(since, None, known=self.outbox.known_starts)
        except CcAdapterError:
            if not self.lookback and self.outbox.get_state(_OUTAGE) is None:
                self.outbox.set_state(_OUTAGE, repr(since))
            self.outbox.del_state(_RECOVERED)
            raise
        events = [ev for job in result.jobs for ev in events_for(job, self._ignore)]
        added = self.outbox.enqueue(events)  # phase 2: one transaction
        if not self.lookback:
            if self.outbox.get_state(_ORIGIN) is None:
                self.outbox.set_state(_ORIGIN, repr(since))
            self.last_run.set(now)
            self._after_outage(now)
        return {"since": since, "until": now, "jobs": len(result.jobs), "events": len(events),
                "new_events": added, "skipped_records": len(result.errors)}

    def _after_outage(self, now: float) -> None:
        if self.outbox.get_state(_OUTAGE) is None:
            return
        recovered = self.outbox.get_state(_RECOVERED)
        if recovered is None:
            log.info("sacct answers again; windows start at the outage's start for %.0f s",
                     self.outage_grace)
            self.outbox.set_state(_RECOVERED, repr(now))
        elif now - float(recovered) > self.outage_grace:
            self.outbox.del_state(_OUTAGE)
            self.outbox.del_state(_RECOVERED)
