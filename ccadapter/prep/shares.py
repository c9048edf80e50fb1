"""What hook messages may cost slurmctld, per peer and in total, real job ids included.

Every message the fast path acts on costs slurmctld questions: ``show job`` for its job, and
for a start its batch script too; each retry of a job slurmctld has not finished recording
costs them again. A peer that can reach the socket can name real jobs (``squeue`` prints
them) as often as it likes, so the questions its messages cause are drawn from token
buckets (:class:`Bucket`), and a message whose questions are not there is dropped
(``share``): the poll picks its job up, as for every drop.

- A peer that is not reserved (:class:`~ccadapter.prep.peers.Peer`) draws on a bucket of
  its own, ``peer_rate`` questions a second up to ``peer_burst``, and on one that all of them
  share, ``total_rate`` up to ``total_burst``: so however many users, addresses or
  connections it takes, such messages cost slurmctld at most ``total_burst`` questions at
  once and ``total_rate`` a second after that.
- Reserved peers (SlurmUser, root, the controller hosts the administrator allowed) draw on a
  reserve of their own, which the others can never spend: real jobs keep the fast path
  whatever the others send. It is bounded too (``reserve_rate`` up to ``reserve_burst``),
  sized for a cluster's busiest bursts (a 20,000-task array starting at once, charged 3
  questions a task though the fast path asks such a burst in one dump).

A message for a job the daemon holds already in the state it announces costs nothing and is
not charged (the fast path asks the outbox first), nor is a message joining a job that is
waiting to be asked anyway.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from ccadapter.prep.peers import Peer


@dataclass(frozen=True)
class ShareSettings:
    peer_rate: float = 2.0  # questions a second one peer that is not reserved may cause
    peer_burst: float = 40.0
    total_rate: float = 4.0  # all peers that are not reserved, together
    total_burst: float = 80.0
    reserve_rate: float = 1_000.0  # SlurmUser, root and the allowed controller hosts
    reserve_burst: float = 60_000.0  # a 20,000-task array's starts at 3 questions each
    peers: int = 4096  # peers whose buckets are kept (the least recent one goes first)


class Bucket:
    """``rate`` tokens a second, up to ``burst``; starts full. Its owner may draw it below
    zero (:class:`~ccadapter.prep.guard.JobIdGuard` counts what was asked already)."""

    def __init__(self, rate: float, burst: float, now: float) -> None:
        self.rate, self.burst = rate, burst
        self.tokens, self.at = burst, now

    def level(self, now: float) -> float:
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
        self.at = now
        return self.tokens


class Shares:
    """Shared by the socket's thread and every cluster's fast path; its lock guards the
    buckets."""

    def __init__(self, settings: ShareSettings | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.settings = s = settings or ShareSettings()
        self.clock = clock
        now = clock()
        self._total = Bucket(s.total_rate, s.total_burst, now)
        self._reserve = Bucket(s.reserve_rate, s.reserve_burst, now)
        self._peers: OrderedDict[str, Bucket] = OrderedDict()
        self._lock = threading.Lock()

    def take(self, peer: Peer, questions: int) -> bool:
        """Whether ``peer`` may cost slurmctld ``questions`` more now (and they are drawn)."""
        with self._lock:
            now = self.clock()
            if peer.reserved:
                return self._draw([self._reserve], questions, now)
            own = self._peers.pop(peer.key, None) or Bucket(
                self.settings.peer_rate, self.settings.peer_burst, now)
            self._peers[peer.key] = own  # the most recent last
            while len(self._peers) > self.settings.peers:
                self._peers.popitem(last=False)
            return self._draw([own, self._total], questions, now)

    @staticmethod
    def _draw(buckets: list[Bucket], questions: int, now: float) -> bool:
        if any(b.level(now) < questions for b in buckets):
            return False
        for bucket in buckets:
            bucket.tokens -= questions
        return True
