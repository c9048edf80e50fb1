"""lost-stops: the runs whose stop cc-backend took a few minutes ago, asked whether it still
lists them running; the stops it lost are sent again.

cc-backend 1.5.4 answers 200 to a stop that meets a commit of its job cache and applies it to
another job (internal/api/job.go ``stopJobByRequest`` looks in the cache before it takes the
lock; see :mod:`.cc_cache`): the run stays running there. cc-cache finds such runs too, but
every ``ccPollInterval`` (6 hours by default) and by listing every running job; the race
shows within minutes of the stop, so this looks at each stop once, soon after it went out:
once ``ccCommitJobInterval`` has passed (a run still in the job cache is listed only after
the commit) plus a minute (a stop crossing the listing), within :data:`HORIZON`. It asks
``GET /api/jobs/?start-time=FROM-TO`` for the start times of those runs, close ones in one
range: the cost follows the stops of the last minutes, not the jobs running.

cc-backend can also lose the run itself: the month-of-life run (tests/bench/life.py, 30 days
at 5,000 jobs a day, the commit worker at its default) found four runs whose stop it had
taken absent from its database, beside four runs holding another's stop. A run whose stop
went out and that cc-backend no longer lists at all is sent again, start and stop (the stop
is answered 404, so its start goes first). A run cc-backend's duplicate rule refused (noted
"not held") is absent by design and left alone.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ccadapter.cc.client import CcClient
from ccadapter.outbox import Outbox

log = logging.getLogger(__name__)

HORIZON = 1800.0  # stops delivered longer ago than this are cc-cache's
SETTLE = 60.0  # after the commit: a stop that crossed the listing is not lost
GAP = 600  # start times this close are asked in one range


@dataclass(eq=False)
class LostStops:
    name: ClassVar[str] = "lost-stops"

    outbox: Outbox
    cluster: str
    client: CcClient
    commit_interval: float = 300.0
    clock: Callable[[], float] = time.time
    _checked_until: float | None = field(default=None, init=False)

    def run_once(self) -> dict[str, Any]:
        now = self.clock()
        until = now - self.commit_interval - SETTLE
        since = max(self._checked_until or 0.0, now - HORIZON)
        if until <= since:
            return {"checked": 0}
        stopped = self.outbox.stops_delivered(self.cluster, since, until)
        ranges = start_ranges(sorted({start for _, start in stopped}))
        listed: dict[tuple[int, int], tuple[str, Any]] = {}
        for lo, hi in ranges:
            listed.update(self.client.listed_runs(self.cluster, (lo, hi)))
        self._checked_until = until  # only once cc-backend answered for all of them
        lost = sorted(run for run in stopped if listed.get(run, ("",))[0] == "running")
        astray = self._say_astray(stopped, listed)
        gone = sorted(set(stopped) - set(listed) - self.outbox.not_held(self.cluster, set(stopped)))
        again = sum(self.outbox.reopen_start(self.cluster, *run, kind="stop") for run in lost)
        back = sum(self.outbox.reopen_start(self.cluster, *run, kind="stop") for run in gone)
        if again:
            log.warning("lost-stops: cc-backend still lists %d run(s) running whose stop it "
                        "took minutes ago (its stop/commit race), e.g. job %d; their stops are "
                        "sent again", again, lost[0][0])
        if back:
            log.warning("lost-stops: cc-backend no longer lists %d run(s) whose stop it took "
                        "minutes ago (its stop/commit race deleted them), e.g. job %d; each "
                        "is sent again, start and stop", back, gone[0][0])
        return {"checked": len(stopped), "queries": len(ranges), "stops_again": again,
                "runs_again": back, "astray": astray}

    def _say_astray(self, stopped: dict[tuple[int, int], dict[str, Any]],
                    listed: dict[tuple[int, int], tuple[str, Any]]) -> int:
        """Say each run cc-backend holds stopped otherwise than its stop said: another
        run's stop was applied to it (the race's other half). No API undoes that; the
        same line as a stop answered "already stopped as ..." says it, with both lengths."""
        said = 0
        for (job_id, start), body in sorted(stopped.items()):
            state, duration = listed.get((job_id, start), ("running", None))
            ended, ours = body.get("stopTime"), body.get("jobState")
            if state == "running" or not isinstance(ended, int) or ours is None:
                continue
            if state != ours or duration != ended - start:
                log.error("cc-backend holds job %d (%s, start %d) stopped as %s, Slurm ended "
                          "it %s: another stop was applied to it (%s s there, %d s in Slurm); "
                          "correct it in cc-backend (cc-backend 1.5.4 stops the wrong job "
                          "when its job cache is committed during a stop)", job_id,
                          self.cluster, start, state, ours, duration, ended - start)
                said += 1
        return said


def start_ranges(starts: list[int]) -> list[tuple[int, int]]:
    """Sorted start times as ranges of times at most :data:`GAP` apart."""
    ranges: list[tuple[int, int]] = []
    for start in starts:
        if ranges and start - ranges[-1][1] <= GAP:
            ranges[-1] = (ranges[-1][0], start)
        else:
            ranges.append((start, start))
    return ranges
