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

The race's other half: the run the stray stop was applied to is held stopped with another's
state and duration, and its archive is written under the other's path, so cc-backend answers
500 to every job list that holds it. A range answered 500 is asked again start time by start
time; a run of ours held otherwise than its stop said, or not listable alone, has its stop
sent again, which :mod:`ccadapter.cc.rest_delivery` answers by deleting it in cc-backend and
sending it again, start and stop.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ccadapter.cc.client import CcBackendError, CcClient
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
    # runs whose stop was sent again because no list answered for their start time: once
    # per run within HORIZON (another run at that second may be the one cc-backend cannot
    # list, and replacing ours again would change nothing)
    _suspected: dict[tuple[int, int], float] = field(default_factory=dict, init=False)

    def run_once(self) -> dict[str, Any]:
        now = self.clock()
        until = now - self.commit_interval - SETTLE
        since = max(self._checked_until or 0.0, now - HORIZON)
        if until <= since:
            return {"checked": 0}
        stopped = self.outbox.stops_delivered(self.cluster, since, until)
        ranges = start_ranges(sorted({start for _, start in stopped}))
        listed: dict[tuple[int, int], tuple[str, Any]] = {}
        unlisted: set[int] = set()
        for lo, hi in ranges:
            unlisted |= self._list(listed, lo, hi, stopped)
        self._checked_until = until  # only once cc-backend answered for all of them
        lost = sorted(run for run in stopped if listed.get(run, ("",))[0] == "running")
        self._suspected = {r: t for r, t in self._suspected.items() if now - t < HORIZON}
        suspects = {run for run in stopped if run[1] in unlisted and run not in self._suspected}
        self._suspected.update(dict.fromkeys(suspects, now))
        astray = sorted(run for run, body in stopped.items()
                        if run in suspects or _held_otherwise(body, *run, listed))
        gone = sorted(set(stopped) - set(listed) - {r for r in stopped if r[1] in unlisted}
                      - self.outbox.not_held(self.cluster, set(stopped)))
        again = sum(self.outbox.reopen_start(self.cluster, *run, kind="stop") for run in lost)
        back = sum(self.outbox.reopen_start(self.cluster, *run, kind="stop") for run in gone)
        wrong = sum(self.outbox.reopen_start(self.cluster, *run, kind="stop") for run in astray)
        if again:
            log.warning("lost-stops: cc-backend still lists %d run(s) running whose stop it "
                        "took minutes ago (its stop/commit race), e.g. job %d; their stops are "
                        "sent again. It applied them to other jobs, which now show: %s "
                        "(replaced where ccadapter finds them: a stop answered \"already "
                        "stopped\", a stop of the last %d min; find any other by state and "
                        "duration in cc-backend's job table)", again, lost[0][0],
                        stray_stops(stopped, lost), HORIZON // 60)
        if back:
            log.warning("lost-stops: cc-backend no longer lists %d run(s) whose stop it took "
                        "minutes ago (its stop/commit race deleted them), e.g. job %d; each "
                        "is sent again, start and stop", back, gone[0][0])
        if wrong:
            log.warning("lost-stops: cc-backend holds %d run(s) otherwise than their stop said, "
                        "or cannot list them (its stop/commit race applied another run's stop "
                        "to them), e.g. job %d; their stops are sent again, and each held "
                        "wrong is replaced", wrong, astray[0][0])
        return {"checked": len(stopped), "queries": len(ranges), "stops_again": again,
                "runs_again": back, "astray": wrong}

    def _list(self, listed: dict[tuple[int, int], tuple[str, Any]], lo: int, hi: int,
              stopped: dict[tuple[int, int], dict[str, Any]]) -> set[int]:
        """The runs cc-backend lists that started in [lo, hi], into ``listed``. A run
        holding another's stop makes cc-backend answer 500 to every list that holds it (its
        archive is not where its row says): then each start time of ours there is asked
        alone, and those still answered 500 are returned."""
        try:
            listed.update(self.client.listed_runs(self.cluster, (lo, hi)))
            return set()
        except CcBackendError as exc:
            if exc.status != 500:
                raise
        if lo == hi:
            return {lo}
        broken: set[int] = set()
        for start in sorted({s for _, s in stopped if lo <= s <= hi}):
            broken |= self._list(listed, start, start, stopped)
        return broken


def _held_otherwise(body: dict[str, Any], job_id: int, start: int,
                    listed: dict[tuple[int, int], tuple[str, Any]]) -> bool:
    """cc-backend holds this run stopped otherwise than its stop said: another run's stop
    was applied to it (the race's other half)."""
    state, duration = listed.get((job_id, start), ("running", None))
    ended, ours = body.get("stopTime"), body.get("jobState")
    if state == "running" or not isinstance(ended, int) or ours is None:
        return False
    return state != ours or duration != ended - start


def stray_stops(stopped: dict[tuple[int, int], dict[str, Any]],
                lost: list[tuple[int, int]], most: int = 20) -> str:
    """What each lost stop made of the job cc-backend applied it to: our state, and the
    duration from our stopTime and *our* startTime (cc-backend computes it from the job it
    looked up, then writes it to the stale row); ``STATE D s`` each, ``most`` at most."""
    said = [f"{body['jobState']} {body['stopTime'] - start} s" for (_, start), body in
            ((run, stopped.get(run, {})) for run in lost)
            if isinstance(body.get("stopTime"), int) and body.get("jobState")]
    more = f" and {len(said) - most} more" if len(said) > most else ""
    return ", ".join(said[:most]) + more if said else "(their stops are not kept)"


def start_ranges(starts: list[int]) -> list[tuple[int, int]]:
    """Sorted start times as ranges of times at most :data:`GAP` apart."""
    ranges: list[tuple[int, int]] = []
    for start in starts:
        if ranges and start - ranges[-1][1] <= GAP:
            ranges[-1] = (ranges[-1][0], start)
        else:
            ranges.append((start, start))
    return ranges
