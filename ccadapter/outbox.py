"""The durable outbox: every start, stop and nodestate event is on disk before anyone may
count it as handled, and leaves only when cc-backend took it.

SQLite in WAL mode in the state directory. An event is identified by (cluster, jobId,
startTime, kind): enqueueing it twice is a no-op, so overlapping Slurm windows, restarts and
hook-plus-poll double sightings never become double deliveries. Per job the order is kept by
what :meth:`Outbox.due` hands out: a stop only after the start of the same run was delivered
(or rejected), and the start of a requeued job's new run only after the old run's events.

Allocation details (hwthreads, GPUs) are captured at first sight: a pending start is only ever
replaced by a richer one (one that carries allocation details), and a stop carries the start
body stored for its run, so that a stop answered 404 can deliver the start first, hours later.
"""

from __future__ import annotations

import json
import random
import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SCHEMA = """
CREATE TABLE IF NOT EXISTS events (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    cluster         TEXT    NOT NULL,
    job_id          INTEGER NOT NULL,
    start_time      INTEGER NOT NULL,
    kind            TEXT    NOT NULL CHECK (kind IN ('start', 'stop', 'nodestate')),
    payload         TEXT    NOT NULL,
    rich            INTEGER NOT NULL DEFAULT 0,
    status          TEXT    NOT NULL DEFAULT 'pending'
                    CHECK (status IN ('pending', 'delivered', 'rejected')),
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at REAL    NOT NULL DEFAULT 0,
    last_error      TEXT,
    created_at      REAL    NOT NULL,
    delivered_at    REAL,
    UNIQUE (cluster, job_id, start_time, kind)
);
CREATE INDEX IF NOT EXISTS events_due ON events (status, next_attempt_at);
CREATE TABLE IF NOT EXISTS state (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""

PENDING, DELIVERED, REJECTED = "pending", "delivered", "rejected"


@dataclass(frozen=True)
class NewEvent:
    cluster: str
    job_id: int
    start_time: int
    kind: str
    payload: dict[str, Any]
    rich: bool = False  # carries allocation details captured from slurmctld


@dataclass(frozen=True)
class Event:
    id: int
    cluster: str
    job_id: int
    start_time: int
    kind: str
    payload: dict[str, Any]
    attempts: int
    created_at: float


@dataclass(frozen=True)
class Backoff:
    """Delay before the n-th retry: exponential, capped, with full jitter (no herds)."""

    base: float = 1.0
    cap: float = 300.0

    def delay(self, attempts: int, rng: Callable[[], float] = random.random) -> float:
        ceiling = min(self.cap, self.base * 2 ** min(attempts, 30))
        return ceiling / 2 + rng() * ceiling / 2


@dataclass(frozen=True)
class Result:
    """What became of one delivery attempt."""

    event_id: int
    status: str  # PENDING (retry later), DELIVERED or REJECTED
    error: str = ""


_DUE = """
SELECT id, cluster, job_id, start_time, kind, payload, attempts, created_at FROM events e
WHERE status = 'pending' AND next_attempt_at <= :now
  AND NOT (kind = 'stop' AND EXISTS (
        SELECT 1 FROM events s WHERE s.cluster = e.cluster AND s.job_id = e.job_id
          AND s.start_time = e.start_time AND s.kind = 'start' AND s.status = 'pending'))
  AND NOT (kind = 'start' AND EXISTS (
        SELECT 1 FROM events p WHERE p.cluster = e.cluster AND p.job_id = e.job_id
          AND p.start_time < e.start_time AND p.kind IN ('start', 'stop')
          AND p.status = 'pending'))
ORDER BY id LIMIT :limit
"""


class Outbox:
    """Thread-safe: one connection, one lock; writes are batched by the callers."""

    def __init__(self, path: str | Path, clock: Callable[[], float] = time.time,
                 backoff: Backoff | None = None,
                 on_enqueued: Callable[[str, int], None] | None = None) -> None:
        """``on_enqueued(kind, count)`` hears of new events once they are committed
        (the daemon's metrics)."""
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.clock = clock
        self.backoff = backoff or Backoff()
        self.on_enqueued = on_enqueued
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None,
                                   timeout=30)
        self._db.execute("PRAGMA journal_mode=WAL")
        # FULL: a committed event survives power loss, not only a crash of the process.
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(SCHEMA)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    # --- writers -------------------------------------------------------------------------

    def enqueue(self, events: Iterable[NewEvent]) -> int:
        """Store events in one transaction; returns how many were new."""
        now = self.clock()
        added: Counter[str] = Counter()
        with self._tx() as db:
            for ev in events:
                added[ev.kind] += self._enqueue_one(db, ev, now)
        if self.on_enqueued:
            for kind, count in added.items():
                if count:
                    self.on_enqueued(kind, count)
        return added.total()

    def _enqueue_one(self, db: sqlite3.Connection, ev: NewEvent, now: float) -> int:
        payload = ev.payload
        if ev.kind == "nodestate":  # only the newest state of a cluster matters
            db.execute("DELETE FROM events WHERE kind = 'nodestate' AND cluster = ? "
                       "AND status != 'delivered'", (ev.cluster,))
        if ev.kind == "stop":
            row = db.execute(
                "SELECT payload FROM events WHERE cluster = ? AND job_id = ? AND start_time = ? "
                "AND kind = 'start' AND payload != ''",
                (ev.cluster, ev.job_id, ev.start_time)).fetchone()
            if row:  # the start captured at first sight is the richest we will ever have
                payload = {**payload, "start": json.loads(row[0])}
        cur = db.execute(
            "INSERT OR IGNORE INTO events (cluster, job_id, start_time, kind, payload, rich, "
            "created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (ev.cluster, ev.job_id, ev.start_time, ev.kind, _dumps(payload), int(ev.rich), now))
        if cur.rowcount:
            return 1
        if ev.kind == "start" and ev.rich:
            db.execute(
                "UPDATE events SET payload = ?, rich = 1 WHERE cluster = ? AND job_id = ? "
                "AND start_time = ? AND kind = 'start' AND status = 'pending' AND rich = 0",
                (_dumps(payload), ev.cluster, ev.job_id, ev.start_time))
        return 0

    def due(self, limit: int = 256) -> list[Event]:
        with self._lock:
            rows = self._db.execute(_DUE, {"now": self.clock(), "limit": limit}).fetchall()
        return [Event(r[0], r[1], r[2], r[3], r[4], json.loads(r[5]), r[6], r[7]) for r in rows]

    def record(self, results: Iterable[Result]) -> None:
        """Apply delivery results in one transaction."""
        now = self.clock()
        with self._tx() as db:
            for res in results:
                if res.status == DELIVERED:
                    db.execute("UPDATE events SET status = 'delivered', delivered_at = ?, "
                               "attempts = attempts + 1, last_error = NULL WHERE id = ?",
                               (now, res.event_id))
                elif res.status == REJECTED:
                    db.execute("UPDATE events SET status = 'rejected', attempts = attempts + 1, "
                               "last_error = ? WHERE id = ?", (res.error, res.event_id))
                else:
                    row = db.execute("SELECT attempts FROM events WHERE id = ?",
                                     (res.event_id,)).fetchone()
                    if row is None:  # a newer nodestate replaced it while in flight
                        continue
                    attempts = row[0]
                    db.execute("UPDATE events SET attempts = ?, next_attempt_at = ?, "
                               "last_error = ? WHERE id = ?",
                               (attempts + 1, now + self.backoff.delay(attempts), res.error,
                                res.event_id))

    def retry_now(self) -> None:
        """Make every waiting event due (cc-backend is back, or the operator says so)."""
        with self._tx() as db:
            db.execute("UPDATE events SET next_attempt_at = 0 WHERE status = 'pending'")

    def compact(self, keep_seconds: float) -> int:
        """Forget delivered events older than ``keep_seconds`` (the idempotency horizon:
        slurmQueryMaxSpan) and drop the payloads of delivered events after an hour."""
        now = self.clock()
        with self._tx() as db:
            gone = db.execute("DELETE FROM events WHERE status = 'delivered' AND "
                              "delivered_at < ?", (now - keep_seconds,)).rowcount
            gone += db.execute("DELETE FROM events WHERE kind = 'nodestate' AND status = "
                               "'delivered' AND delivered_at < ?", (now - 3600,)).rowcount
            db.execute("UPDATE events SET payload = '' WHERE status = 'delivered' AND "
                       "kind != 'start' AND payload != '' AND delivered_at < ?", (now - 3600,))
        return gone

    def snapshot(self, target: str | Path) -> Outbox:
        """A copy to experiment on (``sync --dry-run``): same state, separate file."""
        with self._lock:
            dest = sqlite3.connect(target)
            self._db.backup(dest)
            dest.close()
        return Outbox(target, self.clock, self.backoff)

    # --- readers -------------------------------------------------------------------------

    def open_runs(self, cluster: str) -> list[tuple[int, int]]:
        """(jobId, startTime) of runs whose start is queued or delivered and whose stop is
        not known yet: what cc-backend shows (or will show) as running."""
        with self._lock:
            rows = self._db.execute(
                "SELECT job_id, start_time FROM events e WHERE cluster = ? AND kind = 'start' "
                "AND status != 'rejected' AND NOT EXISTS (SELECT 1 FROM events s WHERE "
                "s.cluster = e.cluster AND s.job_id = e.job_id AND s.start_time = e.start_time "
                "AND s.kind = 'stop')", (cluster,)).fetchall()
        return [(r[0], r[1]) for r in rows]

    def reopen_start(self, cluster: str, job_id: int, start_time: int) -> bool:
        """cc-backend lost a run we delivered: send its start again."""
        with self._tx() as db:
            return bool(db.execute(
                "UPDATE events SET status = 'pending', next_attempt_at = 0 WHERE cluster = ? "
                "AND job_id = ? AND start_time = ? AND kind = 'start' AND status = 'delivered' "
                "AND payload != ''", (cluster, job_id, start_time)).rowcount)

    def stats(self) -> dict[str, Any]:
        with self._lock:
            counts = dict(self._db.execute(
                "SELECT kind || ':' || status, count(*) FROM events GROUP BY 1").fetchall())
            oldest = self._db.execute("SELECT min(created_at) FROM events WHERE "
                                      "status = 'pending'").fetchone()[0]
        return {"counts": counts,
                "pending": sum(v for k, v in counts.items() if k.endswith(":pending")),
                "rejected": sum(v for k, v in counts.items() if k.endswith(":rejected")),
                "oldest_pending_age": (self.clock() - oldest) if oldest else 0.0}

    def rejected(self, limit: int = 100) -> list[dict[str, Any]]:
        with self._lock:
            rows = self._db.execute(
                "SELECT id, cluster, job_id, start_time, kind, attempts, last_error FROM events "
                "WHERE status = 'rejected' ORDER BY id LIMIT ?", (limit,)).fetchall()
        keys = ("id", "cluster", "jobId", "startTime", "kind", "attempts", "error")
        return [dict(zip(keys, r, strict=True)) for r in rows]

    def get_state(self, key: str) -> str | None:
        with self._lock:
            row = self._db.execute("SELECT value FROM state WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    def del_state(self, key: str) -> None:
        with self._tx() as db:
            db.execute("DELETE FROM state WHERE key = ?", (key,))

    def set_state(self, key: str, value: str) -> None:
        with self._tx() as db:
            db.execute("INSERT INTO state (key, value) VALUES (?, ?) ON CONFLICT (key) "
                       "DO UPDATE SET value = excluded.value", (key, value))


def _dumps(payload: dict[str, Any]) -> str:
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False)
