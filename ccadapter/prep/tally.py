"""What the hook socket dropped, counted and said in a few lines, whatever arrives on it.

A TCP socket takes whatever reaches its port: garbage, oversized or half-sent messages, job
ids slurmctld never heard of, thousands a second from a port scanner or a broken script.
Each drop is counted (the metrics' ``ccadapter_hook_messages_dropped_total{reason}``, and
``status`` through :meth:`HookTally.snapshot`), but the log says the first drop of a reason
at once, with its detail, and after that at most one line per reason a minute, with the count
since the last line and the latest detail. So a flood writes a handful of lines, not one per
message, and an operator still learns that it happens and what it looks like.

The same goes for jobs the fast path asked slurmctld about and slurmctld did not show
(``unknown``): counted per cluster, said once a minute.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ccadapter.prep.messages import DropReason

log = logging.getLogger(__name__)

# What each reason means in a log line (the detail says which message).
_SAID = {
    DropReason.INVALID: "not a hook message",
    DropReason.TOO_LARGE: "over 64 KiB",
    DropReason.TIMEOUT: "not complete within 1 s",
    DropReason.FAST_PATH_FULL: "the fast path holds its maximum of jobs",
    DropReason.STANDBY: "the daemon stands by",
    DropReason.UNKNOWN_JOB: "slurmctld did not show that job when asked before",
    DropReason.FLOOD: "many jobs slurmctld does not know were announced lately",
    DropReason.PEER: "a connection from an address outside prepSockAllowedPeers",
    DropReason.KNOWN: "the daemon holds that job in that state already",
    DropReason.SHARE: "its sender's share of questions to slurmctld is spent",
    DropReason.CONNECTIONS: "its sender holds its share of the socket's connections",
}


@dataclass
class _Line:
    """What one log key (a reason, or unknown jobs of a cluster) owes the log."""

    said_at: float | None = None  # when its last line was written
    since: int = 0  # counted since that line
    detail: str = ""  # the latest detail


@dataclass
class HookTally:
    """Counts for metrics and ``status``, summarized lines for the log. Thread-safe: the
    socket's thread and every fast path's slots report here."""

    on_received: Callable[[str], None] | None = None  # metrics: a message taken, by cluster
    on_drop: Callable[[str], None] | None = None  # metrics: a message dropped, by reason
    on_unknown: Callable[[str], None] | None = None  # metrics: a job unknown, by cluster
    every: float = 60.0  # seconds between two lines of one key
    clock: Callable[[], float] = time.monotonic
    wall: Callable[[], float] = time.time
    started: float = field(default_factory=time.time)
    _dropped: Counter[str] = field(default_factory=Counter)
    _unknown: Counter[str] = field(default_factory=Counter)
    _received: int = 0
    _lines: dict[str, _Line] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def received(self, cluster: str = "") -> None:
        """A valid message handed to ``cluster``'s fast path."""
        with self._lock:
            self._received += 1
        if self.on_received:
            self.on_received(cluster)

    def dropped(self, reason: DropReason, detail: str) -> None:
        """A message not acted on; the poll picks its job up."""
        with self._lock:
            self._dropped[reason] += 1
            line = self._due(f"drop:{reason}", detail)
        if self.on_drop:
            self.on_drop(reason)
        if line is not None:
            count, latest, span = line
            # a job held already lost nothing: said, not warned of
            level = logging.INFO if reason == DropReason.KNOWN else logging.WARNING
            if count == 1:
                log.log(level, "hook message dropped (%s): %s; the poll picks its job up",
                        _SAID[reason], latest)
            else:
                log.log(level, "%d hook messages dropped in %.0f s (%s), the latest: %s; "
                        "the poll picks their jobs up", count, span, _SAID[reason], latest)

    def unknown(self, cluster: str, job_ids: list[int]) -> None:
        """slurmctld did not show these jobs when the fast path asked about them."""
        if not job_ids:
            return
        with self._lock:
            self._unknown[cluster] += len(job_ids)
            line = self._due(f"unknown:{cluster}", ", ".join(map(str, job_ids[:5])),
                             len(job_ids))
        if self.on_unknown:
            for _ in job_ids:
                self.on_unknown(cluster)
        if line is not None:
            count, latest, _ = line
            where = f" of cluster {cluster}" if cluster else ""
            log.info("slurmctld does not show %d job(s)%s the hook announced (latest: %s); "
                     "left to the poll", count, where, latest)

    def snapshot(self) -> dict[str, Any]:
        """Counts since the daemon started, for ``status``."""
        with self._lock:
            return {"since": self.started, "at": self.wall(), "received": self._received,
                    "dropped": dict(sorted(self._dropped.items())),
                    "unknownJobs": dict(sorted(self._unknown.items()))}

    def _due(self, key: str, detail: str, count: int = 1) -> tuple[int, str, float] | None:
        """Count for ``key``; (count since its last line, latest detail, seconds since that
        line) when a line is due now: its first event, or the first one ``every`` seconds
        after its last line. Counts no later event brings to a line are in the metrics and
        ``status``."""
        line = self._lines.setdefault(key, _Line())
        line.since += count
        line.detail = detail
        now = self.clock()
        if line.said_at is not None and now - line.said_at < self.every:
            return None
        span = 0.0 if line.said_at is None else now - line.said_at
        line.said_at, owed = now, line.since
        line.since = 0
        return owed, line.detail, span
