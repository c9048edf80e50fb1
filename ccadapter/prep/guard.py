"""What hook messages about jobs slurmctld does not know may cost.

A message names a job id, and the fast path asks slurmctld about it. Whoever reaches a TCP
hook socket can name ids slurmctld never heard of, as many as it likes; each would cost
slurmctld a question and the fast path a place in a slot while genuine starts wait. Three
rules bound that; none can lose a job, since the poll finds every job the fast path skips:

- An id slurmctld did not show when asked is remembered (``memory`` ids, for ``ttl``
  seconds); a message naming it again is dropped unasked (``unknown_job``). Not an id above
  the newest slurmctld has shown: that may be a job not submitted yet, and remembering it
  would drop its real prolog's message (announcing the next ids would take the fast path
  from the next jobs). Such ids are asked again each time, paid from their sender's share
  (:mod:`ccadapter.prep.shares`).
- Every id slurmctld did not show draws on a budget that refills at ``rate`` ids a second up
  to ``burst``. While the budget is spent (a flood), a new id far from the newest one
  slurmctld showed (more than ``near`` apart) is dropped unasked (``flood``): slurmctld hands
  out ids in order, so a genuine job's id lies close to the newest it showed, while a port
  scanner's or a broken script's ids mostly do not.
- Spent twice over (the flood names ids close to the real ones too), every new id is dropped
  unasked until the budget is back above ``-burst``, at most ``burst / rate`` seconds later.

So a flood's questions to slurmctld are about ``burst`` at once and ``rate`` a second after
that, and genuine messages keep the fast path unless the flood imitates their ids. While no
flood runs nothing is refused: only ids slurmctld did not show spend the budget. Messages
of slurmctld's own hooks (reserved peers, :mod:`ccadapter.prep.peers`) are never refused
here: their ids are the real ones.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ccadapter.prep.messages import DropReason
from ccadapter.prep.shares import Bucket


@dataclass(frozen=True)
class GuardSettings:
    memory: int = 20_000  # ids remembered as unknown (about 2 MB)
    ttl: float = 3600.0  # seconds an unknown id is remembered
    rate: float = 2.0  # unknown ids a second the budget refills
    burst: float = 60.0  # the budget when full
    near: int = 1_000_000  # ids this close to the newest shown look genuine in a flood


class JobIdGuard:
    """Shared by the socket's thread (:meth:`refuse`) and the fast path's slots
    (:meth:`answered`); its lock guards its memory and budget."""

    def __init__(self, settings: GuardSettings | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.settings = settings or GuardSettings()
        self.clock = clock
        self._unknown: OrderedDict[int, float] = OrderedDict()  # id -> when it was missing
        self._budget = Bucket(self.settings.rate, self.settings.burst, clock())
        self._newest: int | None = None  # the highest id slurmctld showed
        self._lock = threading.Lock()

    def refuse(self, job_id: int) -> DropReason | None:
        """Why a message naming ``job_id`` is not to be asked about; None: ask."""
        with self._lock:
            now = self.clock()
            budget = self._budget.level(now)
            seen = self._unknown.get(job_id)
            if seen is not None:
                if now - seen < self.settings.ttl:
                    return DropReason.UNKNOWN_JOB
                del self._unknown[job_id]
            if budget >= 0:
                return None
            if budget >= -self.settings.burst and self._near(job_id):
                return None
            return DropReason.FLOOD

    def answered(self, shown: Iterable[int], missing: Iterable[int]) -> None:
        """slurmctld showed the jobs ``shown`` and did not show ``missing``."""
        with self._lock:
            now = self.clock()
            self._budget.level(now)
            newest = max(shown, default=None)
            if newest is not None and (self._newest is None or newest > self._newest):
                self._newest = newest
            for job_id in missing:
                self._budget.tokens -= 1
                if self._newest is None or job_id > self._newest:
                    continue  # maybe a job to come
                self._unknown[job_id] = now
                self._unknown.move_to_end(job_id)
            self._budget.tokens = max(self._budget.tokens, -2 * self.settings.burst)
            while len(self._unknown) > self.settings.memory:
                self._unknown.popitem(last=False)

    @property
    def flooding(self) -> bool:
        with self._lock:
            return self._budget.level(self.clock()) < 0

    def _near(self, job_id: int) -> bool:
        return self._newest is None or abs(job_id - self._newest) <= self.settings.near
