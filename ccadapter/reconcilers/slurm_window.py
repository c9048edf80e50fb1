"""slurm-window: every run active since the last window goes into the outbox.

The window is [lastRun - slurmWindowOverlap, now], cut to slurmQueryMaxSpan (with a warning:
jobs older than that are not looked for). The overlap (120 s by default, 1 s in
cc-slurm-adapter) is there because slurmdbd receives job records late: with an overlap
shorter than that lag, a short job's records can arrive dated in a window already read.

Cost follows what changed: the window is first *listed* (one short line per run that ended in
it, and per running job the outbox does not hold open: :mod:`.activity`; pending jobs are not
listed), the listing is compared with what the outbox holds, and only the runs new to it (a
start not stored, an end whose stop is not stored) are read in detail, in batches. In steady
state, with the Prolog/Epilog hook delivering every start and end as it happens, a cycle is
two short listings (slurmdbd's ended runs, slurmctld's steps) and nothing else.

A long window (a catch-up after an outage, or the first cycle after days of downtime) is read
in slices of :data:`SLICE` seconds, and lastRun moves to each slice's end once its events are
committed to the outbox: memory is bounded by a slice, progress is logged per slice, and a
crash repeats at most one slice, never skips one.

slurmdbd learns of jobs from slurmctld, which queues its messages while slurmdbd is away and
sends them once it is back: the records of jobs that ran during an outage arrive after sacct
already answers again, dated in windows that have passed. So after sacct failed, windows keep
starting where the failures began until ``outage_grace`` seconds after it answers again.
The same class with ``lookback`` set (``slurm-lookback``) re-reads a fixed span and never
touches lastRun: it catches records that arrive later still. It never reaches before the first
window this outbox ever ran (a new installation does not resend history). It reads the span a
part of ``lookback_part`` seconds per cycle, oldest first, and starts over once a part reached
now: a cycle's cost follows the runs that ended in a part, not in the whole span (per-cycle
figures in BENCHMARKS.md, section "Scale: a long queue of pending jobs").

A record that cannot be read (a Slurm release newer than the newest verified one whose
layout changed, a corrupt slurmdbd row that breaks every answer holding it) is reported and
skipped, so that the rest is read and lastRun moves on; its job id is kept in the outbox
(:mod:`ccadapter.outbox.unparsed`) and asked again at the end of a cycle of the window, on a
delay of its own that grows to an hour, until it reads, however far the window has moved on.

Where one daemon serves several clusters, each has its own window (its own lastRun, its own
outage and origin in the outbox's state, :func:`ccadapter.model.scoped_key`): a cluster
whose Slurm fails holds back its own window only.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from ccadapter.errors import CcAdapterError, SlurmCommandError, SlurmParseError, Stopped
from ccadapter.model import scoped_key
from ccadapter.outbox import Outbox
from ccadapter.outbox.unparsed import Unparsed
from ccadapter.reconcilers.activity import ran_during
from ccadapter.reconcilers.lifecycle import events_for, hosts_ignored
from ccadapter.runtime.lastrun import LastRun
from ccadapter.slurm.collector import Collector

log = logging.getLogger(__name__)

_OUTAGE, _RECOVERED = "slurm-window.outage_since", "slurm-window.recovered_at"
_ORIGIN = "slurm-window.origin"  # cc.rest_delivery.ORIGIN_KEY
SLICE = 3600.0  # seconds of Slurm history per listing in a long window


@dataclass(frozen=True)
class WindowSettings:
    """What the window depends on, from the config. ``energy``: the cluster gathers energy
    and it can be sent, so a run that ended less than :data:`ENERGY_WAIT` ago is read until
    its energy is stored (:meth:`Outbox.needs`). ``scoped``: the outbox's state keys carry
    the cluster's name (``slurmClusters`` set)."""

    cluster: str
    poll_interval: float = 60
    max_span: float = 7 * 86400
    overlap: float = 120
    ignore: re.Pattern[str] | None = None
    energy: bool = False
    scoped: bool = False


# slurmctld adds a step's consumed energy to its job when the step completes, and slurmdbd
# gets the sum with the last one: the extern step's (PrologFlags=Contain) completes after the
# job's end, once the node's epilog ran, so a job record can show an end but no energy yet.
# A finished run without an energy event is read again while it ended less than this long
# ago: as often as a listing names it then (a run that never gets any: at most 5 times with
# the defaults, the window listing a run for slurmWindowOverlap + slurmPollInterval after
# its end and slurm-lookback once), once in the common case, never without energy gathering.
ENERGY_WAIT = 300.0


@dataclass
class _Tally:
    listed: int = 0
    read: int = 0
    events: int = 0
    new: int = 0
    skipped: int = 0


class SlurmWindow:
    def __init__(self, collector: Collector, outbox: Outbox, last_run: LastRun,
                 settings: WindowSettings, clock: Callable[[], float] = time.time, *,
                 lookback: float | None = None, lookback_part: float = 600.0,
                 outage_grace: float = 600.0,
                 energy_probe: Callable[[], bool] | None = None,
                 stopping: Callable[[], bool] = lambda: False) -> None:
        """``energy_probe``: asked at each window instead of ``settings.energy`` (one of
        several clusters: whether its slurmctld gathers energy is asked in its own lane).
        ``stopping``: the daemon's stop, asked before each slice and each batch: a window
        cut short raises :class:`Stopped`, its slice not counted (lastRun stays)."""
        self.collector = collector
        self.energy_probe = energy_probe
        self.stopping = stopping
        self.outbox = outbox
        self.last_run = last_run
        self.settings = settings
        self.clock = clock
        self.lookback = lookback
        self.lookback_part = lookback_part
        self._cursor: float | None = None  # where the lookback's next part starts
        self._ahead_said = False  # a lastRun ahead of the clock was said
        self._unparsed_asked = False  # every unreadable record asked once since the start
        self.outage_grace = outage_grace
        self.name = "slurm-lookback" if lookback else "slurm-window"
        scope = settings.cluster if settings.scoped else None
        self.unparsed = Unparsed(outbox.store, settings.cluster, settings.scoped, clock)
        self._outage, self._recovered, self._origin = (
            scoped_key(key, scope) for key in (_OUTAGE, _RECOVERED, _ORIGIN))

    def window_start(self, now: float) -> float:
        cfg = self.settings
        if self.lookback:
            origin = self.outbox.store.get_state(self._origin)
            if origin is None:
                return now
            span = min(self.lookback, cfg.max_span)
            # an origin ahead of the clock (stepped back since) came before every run of now
            return now - span if float(origin) > now else max(now - span, float(origin))
        last = self._clamped(self.last_run.get(), now)
        earliest = now - cfg.max_span
        if last is None:
            log.info("first start (no lastRun at %s): the first window reaches back "
                     "slurmPollInterval (%d s) only, plus every run still running; runs that "
                     "ended before are not sent (send them with `ccadapter backfill --since "
                     "7d`)", self.last_run.path, cfg.poll_interval)
            return now - cfg.poll_interval
        if last - 1 < earliest:
            log.warning("lastRun is %.0f s ago, more than slurmQueryMaxSpan (%d s): jobs that "
                        "ended before %s are not looked for (`ccadapter backfill` sends them)",
                        now - last, cfg.max_span, time.ctime(earliest))
            return earliest
        since = max(last - cfg.overlap, earliest)
        outage = self.outbox.store.get_state(self._outage)
        return min(since, float(outage)) if outage else since

    def _clamped(self, last: float | None, now: float) -> float | None:
        """lastRun, or now where it is ahead of this host's clock: the clock was stepped
        back since it was written, and a window from there would start after its end (sacct
        refuses that) until the clock caught up. Runs that ended meanwhile are found all the
        same: this window reaches back slurmWindowOverlap, and slurm-lookback the last hour.
        Said once per step."""
        if last is None or last <= now + 1:
            self._ahead_said = False
            return last
        if not self._ahead_said:
            self._ahead_said = True
            log.warning("%s: lastRun (%s, in %s) is %.0f s ahead of this host's clock (was the "
                        "clock set back? time-sync.target); windows start from now, and "
                        "slurm-lookback reads the last hour again", self.name,
                        time.ctime(last), self.last_run.path, last - now)
        return now

    def take_over(self) -> None:
        """This daemon takes over from another host's (controller failover): what this
        outbox remembers of its own last time in control no longer says where to read. The
        next window starts at lastRun (shared by the hosts: where the other daemon left
        off), and slurm-lookback reaches back no further than that window, not into the
        stretch the other daemon covered (re-sending it all again, as 422s). The keys are
        this cluster's (scoped with slurmClusters)."""
        for key in (self._outage, self._recovered, self._origin):
            self.outbox.store.del_state(key)

    def run_once(self) -> dict[str, Any]:
        now = self.clock()
        since = self.window_start(now)
        if self.lookback and since >= now:
            return {"skipped": "no window has run yet"}
        spans = [self._next_part(since, now)] if self.lookback else slices(since, now, SLICE)
        tally = _Tally()
        for number, (lo, hi) in enumerate(spans, 1):
            last = hi >= now  # a part that reaches now lists the jobs that run now too
            try:
                self._stop_here()
                self._slice(lo, None if last else hi, tally)
            except Stopped:
                raise
            except CcAdapterError:
                if not self.lookback and self.outbox.store.get_state(self._outage) is None:
                    self.outbox.store.set_state(self._outage, repr(lo))
                self.outbox.store.del_state(self._recovered)
                raise
            if not self.lookback:
                if self.outbox.store.get_state(self._origin) is None:
                    self.outbox.store.set_state(self._origin, repr(since))
                self.last_run.set(hi)
            if len(spans) > 1:
                log.info("%s: slice %d/%d (%s .. %s) done: %d runs listed, %d read, %d new "
                         "events", self.name, number, len(spans), time.ctime(lo),
                         time.ctime(hi), tally.listed, tally.read, tally.new)
        if not self.lookback:
            self._after_outage(now)
            self._read_unparsed(tally)
        return {"since": spans[0][0], "until": spans[-1][1], "slices": len(spans),
                "runs": tally.listed,
                "read": tally.read, "events": tally.events, "new_events": tally.new,
                "skipped_records": tally.skipped, "unparsed": len(self.unparsed.ids())}

    def _next_part(self, since: float, now: float) -> tuple[float, float]:
        """The lookback's part this cycle: from where the last part ended (or from the span's
        start, when that has passed it or the last part reached now)."""
        lo = self._cursor if self._cursor is not None and self._cursor > since else since
        hi = min(lo + self.lookback_part, now)
        self._cursor = hi if hi < now else None
        return lo, hi

    def _slice(self, since: float, until: float | None, tally: _Tally) -> None:
        """List, compare with the outbox, read what is new, enqueue it batch by batch."""
        cfg = self.settings
        listing = ran_during(self.collector, since, until,
                             partial(self.outbox.open_runs, cfg.cluster))
        tally.listed += sum(s.started for s in listing.stamps)
        tally.skipped += len(listing.errors)
        self._keep_unparsed(listing.unparsed, listing.errors)
        runs = [(s.job_id, s.start_time, s.finished) for s in listing.stamps
                if s.started and not hosts_ignored(s.nodes, cfg.ignore)]
        recent = self.clock() - ENERGY_WAIT
        energy = {s.run for s in listing.stamps if s.finished and s.end_time >= recent}
        # the probe asks slurmctld (until it answered once): only when it matters
        if energy and not (self.energy_probe() if self.energy_probe else cfg.energy):
            energy = set()
        details, starts = self.outbox.needs(cfg.cluster, runs, energy=energy)
        known = partial(self.outbox.known_starts, cluster=cfg.cluster)
        for result in self.collector.iter_jobs(details, starts=starts, known=known):
            self._stop_here()  # the batch read, not stored: read again at the next start
            events = [ev for job in result.jobs for ev in events_for(job, cfg.ignore)]
            tally.read += len(result.jobs)
            tally.events += len(events)
            tally.skipped += len(result.errors)
            tally.new += self.outbox.enqueue(events)  # one transaction per batch
            self._keep_unparsed(result.unparsed, result.errors)

    def _stop_here(self) -> None:
        if self.stopping():
            raise Stopped([self.name], "cut short: the daemon is stopping; what is left of "
                          "the window is read at the next start")

    def _keep_unparsed(self, job_ids: list[int], errors: list[str]) -> None:
        if job_ids:
            self.unparsed.add(job_ids, errors[-1] if errors else "")

    def _read_unparsed(self, tally: _Tally) -> None:
        """The records that could not be read before and are due again (each on its own
        delay, :mod:`ccadapter.outbox.unparsed`; at this process's first cycle every one:
        a restart is when an upgraded ccadapter may read them); those that read now are
        enqueued like any other and leave the list. A failure here fails nothing else:
        they are all kept."""
        ids = self.unparsed.due() if self._unparsed_asked else self.unparsed.ids()
        self._unparsed_asked = True
        if not ids:
            return
        cfg = self.settings
        known = partial(self.outbox.known_starts, cluster=cfg.cluster)
        still: list[int] = []
        errors: list[str] = []
        try:
            for result in self.collector.iter_jobs(ids, known=known):
                events = [ev for job in result.jobs for ev in events_for(job, cfg.ignore)]
                tally.read += len(result.jobs)
                tally.events += len(events)
                tally.new += self.outbox.enqueue(events)
                still += result.unparsed
                errors += result.errors
        except Stopped:
            raise
        except (SlurmCommandError, SlurmParseError) as exc:  # all still failing, or Slurm away
            log.debug("%s: unreadable records asked again: %s", self.name, exc)
            still, errors = ids, [str(exc)]
        if done := self.unparsed.settle(ids, still, errors[-1] if errors else ""):
            log.info("%s: %d Slurm record(s) that could not be read before are read now: "
                     "jobs %s", self.name, len(done), ", ".join(map(str, done[:10])))

    def _after_outage(self, now: float) -> None:
        if self.outbox.store.get_state(self._outage) is None:
            return
        recovered = self.outbox.store.get_state(self._recovered)
        if recovered is None:
            log.info("sacct answers again; windows start at the outage's start for %.0f s",
                     self.outage_grace)
            self.outbox.store.set_state(self._recovered, repr(now))
        elif now - float(recovered) > self.outage_grace:
            self.outbox.store.del_state(self._outage)
            self.outbox.store.del_state(self._recovered)


def slices(since: float, until: float, size: float) -> list[tuple[float, float]]:
    """[since, until] cut into consecutive spans of at most ``size`` seconds (at least one)."""
    spans = []
    start = since
    while until - start > size:
        spans.append((start, start + size))
        start += size
    spans.append((start, max(start, until)))
    return spans
