"""The durable outbox: every start, stop, nodestate and energy event is on disk before anyone
may count it as handled, and leaves only when cc-backend took it.

SQLite in WAL mode in the state directory. An event is identified by (cluster, jobId,
startTime, kind): enqueueing it twice is a no-op, so overlapping Slurm windows, restarts and
hook-plus-poll double sightings never become double deliveries. Per job the order is kept by
what :meth:`Outbox.due` hands out: a stop only after the start of the same run was delivered
(or rejected), a run's energy only after its stop, and the start of a requeued job's new run
only after the old run's events.

With NATS notifications on (REST and NATS both), an event cc-backend took gets a row in
``notify`` in the same transaction that records the delivery, so a notification survives a
crash like the event did; :class:`NotifyQueue` drains those rows (same ordering rule).

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
from collections.abc import Callable, Collection, Iterable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ccadapter.errors import OutboxError

# The events table, by name: an outbox made before 'energy' events existed has it with a
# narrower CHECK on kind and is rebuilt once from this (see _widen_kinds).
_EVENTS = """
CREATE TABLE IF NOT EXISTS {table} (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    cluster         TEXT    NOT NULL,
    job_id          INTEGER NOT NULL,
    start_time      INTEGER NOT NULL,
    kind            TEXT    NOT NULL CHECK (kind IN ('start', 'stop', 'nodestate', 'energy')),
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
"""
_EVENTS_INDEXES = """
CREATE INDEX IF NOT EXISTS events_due ON events (status, next_attempt_at);
-- pending events in id order: due() reads the first few due ones without sorting them all
CREATE INDEX IF NOT EXISTS events_pending ON events (status, id);
-- delivered events by age: compaction reads the old ones only, not the whole history
CREATE INDEX IF NOT EXISTS events_delivered ON events (status, delivered_at);
"""
SCHEMA = _EVENTS.format(table="events") + _EVENTS_INDEXES + """
CREATE TABLE IF NOT EXISTS state (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS notify (
    event_id        INTEGER PRIMARY KEY,
    status          TEXT    NOT NULL DEFAULT 'pending'
                    CHECK (status IN ('pending', 'delivered', 'rejected')),
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at REAL    NOT NULL DEFAULT 0,
    last_error      TEXT,
    delivered_at    REAL
);
CREATE INDEX IF NOT EXISTS notify_due ON notify (status, next_attempt_at);
CREATE INDEX IF NOT EXISTS notify_pending ON notify (status, event_id);
-- runs whose start is stored and whose stop is not: what cc-backend shows as running. Kept
-- by enqueue, so that stale-jobs and nodestate cost what runs, not what ever ran (a week of
-- history at 5 jobs/s is six million events).
CREATE TABLE IF NOT EXISTS runs (
    cluster         TEXT    NOT NULL,
    job_id          INTEGER NOT NULL,
    start_time      INTEGER NOT NULL,
    hosts           TEXT    NOT NULL DEFAULT '',
    PRIMARY KEY (cluster, job_id, start_time)
) WITHOUT ROWID;
"""

# An outbox written before the runs table existed gets it filled once, from its events.
_FILL_RUNS = """
INSERT OR IGNORE INTO runs (cluster, job_id, start_time, hosts)
SELECT e.cluster, e.job_id, e.start_time, coalesce((SELECT group_concat(
           json_extract(r.value, '$.hostname'), ',') FROM json_each(e.payload, '$.resources') r),
       '')
FROM events e WHERE e.kind = 'start' AND e.payload != '' AND NOT EXISTS (
    SELECT 1 FROM events s WHERE s.cluster = e.cluster AND s.job_id = e.job_id
      AND s.start_time = e.start_time AND s.kind = 'stop')
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
SELECT id, cluster, job_id, start_time, kind, payload, attempts, created_at
FROM events e INDEXED BY events_pending
WHERE status = 'pending' AND next_attempt_at <= :now
  AND NOT (kind = 'stop' AND EXISTS (
        SELECT 1 FROM events s WHERE s.cluster = e.cluster AND s.job_id = e.job_id
          AND s.start_time = e.start_time AND s.kind = 'start' AND s.status = 'pending'))
  AND NOT (kind = 'start' AND EXISTS (
        SELECT 1 FROM events p WHERE p.cluster = e.cluster AND p.job_id = e.job_id
          AND p.start_time < e.start_time AND p.kind IN ('start', 'stop')
          AND p.status = 'pending'))
  AND NOT (kind = 'energy' AND EXISTS (
        SELECT 1 FROM events s WHERE s.cluster = e.cluster AND s.job_id = e.job_id
          AND s.start_time = e.start_time AND s.kind = 'stop' AND s.status = 'pending'))
ORDER BY id LIMIT :limit
"""

# Whether anything is due at all: during an outage the whole backlog waits, and walking it
# in id order only to find nothing would cost tens of milliseconds per second.
_ANY_DUE = ("SELECT 1 FROM {table} INDEXED BY {index} WHERE status = 'pending' "
            "AND next_attempt_at <= ? LIMIT 1")

_NOTIFY_DUE = """
SELECT e.id, e.cluster, e.job_id, e.start_time, e.kind, e.payload, n.attempts, e.created_at
FROM notify n INDEXED BY notify_pending JOIN events e ON e.id = n.event_id
WHERE n.status = 'pending' AND n.next_attempt_at <= :now
  AND NOT (e.kind = 'stop' AND EXISTS (
        SELECT 1 FROM events s JOIN notify ns ON ns.event_id = s.id
        WHERE s.cluster = e.cluster AND s.job_id = e.job_id AND s.start_time = e.start_time
          AND s.kind = 'start' AND ns.status = 'pending'))
ORDER BY n.event_id LIMIT :limit
"""


class Outbox:
    """Thread-safe: one connection, one lock; writes are batched by the callers."""

    def __init__(self, path: str | Path, clock: Callable[[], float] = time.time,
                 backoff: Backoff | None = None, notify: bool = False,
                 on_enqueued: Callable[[str, int], None] | None = None) -> None:
        """``on_enqueued(kind, count)`` hears of new events once they are committed
        (the daemon's metrics)."""
        self.path = Path(path)
        self.notify = notify  # queue a NATS notification for every delivered start/stop
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
        with self._tx() as db:
            if db.execute("SELECT 1 FROM state WHERE key = 'schema.runs'").fetchone() is None:
                db.execute(_FILL_RUNS)
                db.execute("INSERT INTO state (key, value) VALUES ('schema.runs', '1')")
            _widen_kinds(db)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        """One write transaction. A failing COMMIT (disk full) is rolled back too: a
        transaction left open would make every later BEGIN fail, for good."""
        with self._lock:
            try:
                self._db.execute("BEGIN IMMEDIATE")
                try:
                    yield self._db
                    self._db.execute("COMMIT")
                except BaseException:
                    if self._db.in_transaction:
                        with suppress(sqlite3.Error):
                            self._db.execute("ROLLBACK")
                    raise
            except sqlite3.Error as exc:
                raise OutboxError(str(self.path), str(exc)) from None

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
        run = (ev.cluster, ev.job_id, ev.start_time)
        if ev.kind == "nodestate":  # only the newest state of a cluster matters
            db.execute("DELETE FROM events WHERE kind = 'nodestate' AND cluster = ? "
                       "AND status != 'delivered'", (ev.cluster,))
        if ev.kind == "stop":
            row = db.execute(
                "SELECT payload FROM events WHERE cluster = ? AND job_id = ? AND start_time = ? "
                "AND kind = 'start' AND payload != ''", run).fetchone()
            if row:  # the start captured at first sight is the richest we will ever have
                payload = {**payload, "start": json.loads(row[0])}
            db.execute("DELETE FROM runs WHERE cluster = ? AND job_id = ? AND start_time = ?",
                       run)
        cur = db.execute(
            "INSERT OR IGNORE INTO events (cluster, job_id, start_time, kind, payload, rich, "
            "created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (*run, ev.kind, _dumps(payload), int(ev.rich), now))
        if ev.kind == "start" and cur.rowcount:
            db.execute(
                "INSERT OR IGNORE INTO runs (cluster, job_id, start_time, hosts) SELECT ?, ?, ?, ? "
                "WHERE NOT EXISTS (SELECT 1 FROM events WHERE cluster = ? AND job_id = ? "
                "AND start_time = ? AND kind = 'stop')",
                (*run, _hosts(payload), *run))
        if cur.rowcount:
            return 1
        if ev.kind == "start" and ev.rich:
            row = db.execute(
                "SELECT payload FROM events WHERE cluster = ? AND job_id = ? AND start_time = ? "
                "AND kind = 'start' AND status = 'pending' AND rich = 0", run).fetchone()
            if row:
                db.execute(
                    "UPDATE events SET payload = ?, rich = 1 WHERE cluster = ? AND job_id = ? "
                    "AND start_time = ? AND kind = 'start'",
                    (_dumps(_keep_script(payload, json.loads(row[0]))), *run))
        return 0

    def due(self, limit: int = 256) -> list[Event]:
        return self._due(_DUE, "events", "events_due", limit)

    def _due(self, query: str, table: str, index: str, limit: int) -> list[Event]:
        now = self.clock()
        with self._lock:
            if self._db.execute(_ANY_DUE.format(table=table, index=index), (now,)).fetchone():
                rows = self._db.execute(query, {"now": now, "limit": limit}).fetchall()
            else:
                rows = []
        return [Event(r[0], r[1], r[2], r[3], r[4], json.loads(r[5]), r[6], r[7]) for r in rows]

    def record(self, results: Iterable[Result]) -> None:
        """Apply delivery results in one transaction."""
        now = self.clock()
        with self._tx() as db:
            for res in results:
                _apply(db, "events", res, now, self.backoff)
                if self.notify and res.status == DELIVERED:
                    db.execute("INSERT OR IGNORE INTO notify (event_id) SELECT id FROM events "
                               "WHERE id = ? AND kind IN ('start', 'stop')", (res.event_id,))

    def notifications(self) -> NotifyQueue:
        """The NATS notifications owed for delivered events, as a queue to drain."""
        return NotifyQueue(self)

    def retry_now(self) -> None:
        """Make every waiting event due (cc-backend is back, or the operator says so)."""
        with self._tx() as db:
            db.execute("UPDATE events SET next_attempt_at = 0 WHERE status = 'pending'")

    def compact(self, keep_seconds: float) -> int:
        """Forget delivered events older than ``keep_seconds`` (the idempotency horizon:
        slurmQueryMaxSpan) and drop the payloads of delivered events after an hour. The start
        of a run that is still open is kept however old: its stop needs its body (a stop
        answered 404 delivers the start first) and stale-jobs needs to know it runs. Reads
        only the events old enough to change (index on status, delivered_at)."""
        now = self.clock()
        with self._tx() as db:
            gone = db.execute(
                "DELETE FROM events WHERE status = 'delivered' AND delivered_at < ? "
                "AND id NOT IN (SELECT event_id FROM notify WHERE status != 'delivered') "
                "AND NOT (kind = 'start' AND EXISTS (SELECT 1 FROM runs r WHERE "
                "r.cluster = events.cluster AND r.job_id = events.job_id "
                "AND r.start_time = events.start_time))",
                (now - keep_seconds,)).rowcount
            gone += db.execute("DELETE FROM events WHERE kind = 'nodestate' AND status = "
                               "'delivered' AND delivered_at < ?", (now - 3600,)).rowcount
            mark = float(self._get(db, _PAYLOADS_DROPPED) or 0.0)
            db.execute("UPDATE events SET payload = '' WHERE status = 'delivered' AND "
                       "delivered_at >= ? AND delivered_at < ? AND kind != 'start' AND "
                       "payload != '' AND id NOT IN (SELECT event_id FROM notify WHERE "
                       "status != 'delivered')", (mark - 3600, now - 3600))
            self._put(db, _PAYLOADS_DROPPED, repr(now - 3600))
            db.execute("DELETE FROM notify WHERE event_id NOT IN (SELECT id FROM events)")
        return gone

    @classmethod
    def copy_of(cls, source: str | Path, target: str | Path) -> Outbox:
        """A copy to experiment on (``sync --dry-run``), made through a read-only
        connection: the source is neither changed nor created (a missing one is an
        error)."""
        src = sqlite3.connect(f"{Path(source).resolve().as_uri()}?mode=ro", uri=True)
        try:
            dest = sqlite3.connect(target)
            src.backup(dest)
            dest.close()
        finally:
            src.close()
        return cls(target)

    def track_changes(self) -> None:
        """From now on, note every event added or changed (a new event, a start replaced
        by a richer one, a delivered start opened again), for :meth:`changed`. The notes
        live in this connection only (TEMP), never in the file."""
        with self._lock:
            self._db.execute("CREATE TEMP TABLE IF NOT EXISTS changed "
                             "(id INTEGER PRIMARY KEY)")
            self._db.execute("CREATE TEMP TRIGGER IF NOT EXISTS changed_added AFTER INSERT "
                             "ON main.events BEGIN INSERT OR IGNORE INTO changed VALUES "
                             "(new.id); END")
            self._db.execute("CREATE TEMP TRIGGER IF NOT EXISTS changed_updated AFTER UPDATE "
                             "OF payload, status ON main.events BEGIN INSERT OR IGNORE INTO "
                             "changed VALUES (new.id); END")

    def changed(self) -> list[Event]:
        """The events added or changed since :meth:`track_changes` that wait to be sent,
        in id order: what a delivery would send that it would not have sent before. Read
        from the table, not through :meth:`due`, which holds a stop back while its start
        waits."""
        with self._lock:
            rows = self._db.execute(
                "SELECT id, cluster, job_id, start_time, kind, payload, attempts, created_at "
                "FROM events WHERE status = 'pending' AND id IN (SELECT id FROM temp.changed) "
                "ORDER BY id").fetchall()
        return [Event(r[0], r[1], r[2], r[3], r[4], json.loads(r[5]), r[6], r[7]) for r in rows]

    # --- readers -------------------------------------------------------------------------

    def known_starts(self, runs: list[tuple[int, int]], cluster: str | None = None
                     ) -> set[tuple[int, int]]:
        """Of these runs (jobId, startTime), the ones whose start is stored already (of
        ``cluster``, if given: two clusters of one slurmdbd count job ids each on its own)."""
        found: set[tuple[int, int]] = set()
        where = "" if cluster is None else " AND cluster = ?"
        with self._lock:
            for i in range(0, len(runs), 500):  # SQLite's variable limit
                chunk = runs[i:i + 500]
                marks = ",".join("?" * len(chunk))
                found.update(self._db.execute(
                    f"SELECT job_id, start_time FROM events WHERE kind = 'start' AND job_id IN "
                    f"({marks}){where}",
                    [*(j for j, _ in chunk), *([] if cluster is None else [cluster])]
                ).fetchall())
        return found & set(runs)

    def open_runs(self, cluster: str) -> list[tuple[int, int]]:
        """(jobId, startTime) of runs whose start is queued or delivered and whose stop is
        not known yet: what cc-backend shows (or will show) as running."""
        with self._lock:
            rows = self._db.execute(_OPEN + " ORDER BY r.job_id", (cluster,)).fetchall()
        return [(r[0], r[1]) for r in rows]

    def open_hosts(self, cluster: str) -> Counter[str]:
        """How many open runs each host carries (nodestate's ``jobsRunning``)."""
        counts: Counter[str] = Counter()
        with self._lock:
            for (hosts,) in self._db.execute(_OPEN_HOSTS, (cluster,)):
                counts.update(h for h in hosts.split(",") if h)
        return counts

    def needs(self, cluster: str, runs: Iterable[tuple[int, int, bool]], *,
              energy: Collection[tuple[int, int]] = ()) -> tuple[set[int], set[int]]:
        """Of listed runs (jobId, startTime, finished), which the outbox cannot answer yet:
        returns (ids to read in detail, ids among them whose start may be needed). A run
        needs reading when its start is not stored, when it finished and its stop is not
        stored, or when its start waits undelivered without allocation details (a richer
        one may be had while slurmctld holds the job). Runs named in ``energy`` (finished
        runs whose energy may still come) need reading while no energy event is stored for
        them: their stop came from slurmctld (the hook's fast path cannot see energy) or
        from a slurmdbd record read before the energy reached it."""
        wanted = list(runs)
        stored: dict[tuple[int, int], dict[str, tuple[str, int]]] = {}
        with self._lock:
            for chunk in _batches(sorted({j for j, _, _ in wanted})):
                for job_id, start, kind, status, rich in self._db.execute(
                        "SELECT job_id, start_time, kind, status, rich FROM events WHERE "
                        f"cluster = ? AND job_id IN ({_marks(chunk)}) AND kind != 'nodestate'",
                        (cluster, *chunk)):
                    stored.setdefault((job_id, start), {})[kind] = (status, rich)
        details: set[int] = set()
        starts: set[int] = set()
        for job_id, start, finished in wanted:
            have = stored.get((job_id, start), {})
            first = have.get("start")
            if first is None or (first == (PENDING, 0)):
                details.add(job_id)
                starts.add(job_id)
            elif finished and ("stop" not in have or (
                    "energy" not in have and (job_id, start) in energy)):
                details.add(job_id)
        return details, starts

    def start_deliveries(self, cluster: str, runs: Iterable[tuple[int, int]]
                         ) -> dict[tuple[int, int], tuple[str, float | None]]:
        """(status, delivered_at) of the stored starts of these runs (cc-cache)."""
        wanted = set(runs)
        out: dict[tuple[int, int], tuple[str, float | None]] = {}
        with self._lock:
            for chunk in _batches(sorted({j for j, _ in wanted})):
                for job_id, start, status, at in self._db.execute(
                        "SELECT job_id, start_time, status, delivered_at FROM events WHERE "
                        f"cluster = ? AND kind = 'start' AND job_id IN ({_marks(chunk)})",
                        (cluster, *chunk)):
                    if (job_id, start) in wanted:
                        out[(job_id, start)] = (status, at)
        return out

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
            notify = dict(self._db.execute(
                "SELECT status, count(*) FROM notify GROUP BY 1").fetchall())
        return {"counts": counts, "notify": notify,
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
            return self._get(self._db, key)

    def del_state(self, key: str) -> None:
        with self._tx() as db:
            db.execute("DELETE FROM state WHERE key = ?", (key,))

    def set_state(self, key: str, value: str) -> None:
        with self._tx() as db:
            self._put(db, key, value)

    @staticmethod
    def _get(db: sqlite3.Connection, key: str) -> str | None:
        row = db.execute("SELECT value FROM state WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    @staticmethod
    def _put(db: sqlite3.Connection, key: str, value: str) -> None:
        db.execute("INSERT INTO state (key, value) VALUES (?, ?) ON CONFLICT (key) "
                   "DO UPDATE SET value = excluded.value", (key, value))

    # --- operator tools (``ccadapter status|queue|backfill``) ------------------------------

    def list_events(self, status: str | None = None, kind: str | None = None,
                    limit: int = 100) -> list[dict[str, Any]]:
        """Events without their payloads, oldest first; ``None`` means any status/kind."""
        where, args = _filters(status=status, kind=kind)
        with self._lock:
            rows = self._db.execute(
                "SELECT id, cluster, job_id, start_time, kind, status, attempts, "
                f"next_attempt_at, created_at, delivered_at, last_error FROM events {where} "
                "ORDER BY id LIMIT ?", (*args, limit)).fetchall()
        return [dict(zip(_LISTED, r, strict=True)) for r in rows]

    def events_by_id(self, ids: Iterable[int]) -> list[dict[str, Any]]:
        """Like :meth:`list_events`, for the given ids (unknown ones are left out)."""
        rows: list[tuple[Any, ...]] = []
        with self._lock:
            for chunk in _batches(sorted(set(ids))):
                rows += self._db.execute(
                    "SELECT id, cluster, job_id, start_time, kind, status, attempts, "
                    "next_attempt_at, created_at, delivered_at, last_error FROM events "
                    f"WHERE id IN ({_marks(chunk)}) ORDER BY id", chunk).fetchall()
        return [dict(zip(_LISTED, r, strict=True)) for r in rows]

    def requeue(self, ids: Iterable[int] | None = None) -> list[int]:
        """Make events due now: the given pending or rejected ones, or (``None``) every
        rejected one. Returns the ids changed; delivered events are left alone (a resend is
        ``backfill --resend``'s business, with a fresh body from Slurm)."""
        with self._tx() as db:
            if ids is None:
                found = [r[0] for r in db.execute(
                    "SELECT id FROM events WHERE status = 'rejected' ORDER BY id")]
            else:
                found = _existing(db, ids, "status IN ('pending', 'rejected')")
            for chunk in _batches(found):
                db.execute("UPDATE events SET status = 'pending', next_attempt_at = 0 "
                           f"WHERE id IN ({_marks(chunk)})", chunk)
        return found

    def drop(self, ids: Iterable[int]) -> list[int]:
        """Give up on undelivered events: they are marked delivered (never sent) with a
        note, and their body is forgotten. They keep their place in the table so that the
        next overlapping Slurm window does not enqueue them again; ``compact`` forgets them
        with the delivered ones. Returns the ids changed."""
        now = self.clock()
        with self._tx() as db:
            found = _existing(db, ids, "status != 'delivered'")
            for chunk in _batches(found):
                db.execute("UPDATE events SET status = 'delivered', delivered_at = ?, "
                           "payload = '', last_error = 'dropped by operator' "
                           f"WHERE id IN ({_marks(chunk)})", (now, *chunk))
        return found

    def resend(self, events: Iterable[NewEvent]) -> int:
        """Open delivered events again with the given (fresh) bodies: cc-backend lost
        them. Events not in the table or not delivered are left alone; returns how many
        were opened."""
        opened = 0
        with self._tx() as db:
            for ev in events:
                opened += db.execute(
                    "UPDATE events SET status = 'pending', next_attempt_at = 0, payload = ?, "
                    "last_error = NULL, delivered_at = NULL WHERE cluster = ? AND job_id = ? "
                    "AND start_time = ? AND kind = ? AND status = 'delivered'",
                    (_dumps(ev.payload), ev.cluster, ev.job_id, ev.start_time, ev.kind),
                ).rowcount
        return opened

    def state_items(self, prefix: str) -> dict[str, str]:
        """Every state entry whose key starts with ``prefix``."""
        with self._lock:
            rows = self._db.execute("SELECT key, value FROM state WHERE substr(key, 1, ?) = ? "
                                    "ORDER BY key", (len(prefix), prefix)).fetchall()
        return dict(rows)


_OPEN = ("SELECT r.job_id, r.start_time FROM runs r JOIN events e ON e.cluster = r.cluster "
         "AND e.job_id = r.job_id AND e.start_time = r.start_time AND e.kind = 'start' "
         "WHERE r.cluster = ? AND e.status != 'rejected'")
_OPEN_HOSTS = _OPEN.replace("SELECT r.job_id, r.start_time", "SELECT r.hosts")
_PAYLOADS_DROPPED = "compact.payloads_dropped_before"

_LISTED = ("id", "cluster", "jobId", "startTime", "kind", "status", "attempts",
           "nextAttemptAt", "createdAt", "deliveredAt", "error")


def _filters(**columns: str | None) -> tuple[str, tuple[str, ...]]:
    """A WHERE clause for the columns given a value (names are ours, values are bound)."""
    given = {k: v for k, v in columns.items() if v is not None}
    if not given:
        return "", ()
    return "WHERE " + " AND ".join(f"{k} = ?" for k in given), tuple(given.values())


def _batches(ids: list[int], size: int = 500) -> Iterator[list[int]]:
    """SQLite limits the parameters of one statement; a few hundred ids at a time."""
    for i in range(0, len(ids), size):
        yield ids[i:i + size]


def _marks(ids: list[int]) -> str:
    return ", ".join("?" * len(ids))


def _existing(db: sqlite3.Connection, ids: Iterable[int], condition: str) -> list[int]:
    """Which of ``ids`` exist and meet ``condition`` (a fixed SQL fragment of ours)."""
    found: list[int] = []
    for chunk in _batches(sorted(set(ids))):
        found += [r[0] for r in db.execute(
            f"SELECT id FROM events WHERE id IN ({_marks(chunk)}) AND {condition} ORDER BY id",
            chunk)]
    return found


class NotifyQueue:
    """The ``notify`` rows as a queue: due/record like the outbox, same per-run order."""

    def __init__(self, outbox: Outbox) -> None:
        self.outbox = outbox

    def due(self, limit: int = 256) -> list[Event]:
        return self.outbox._due(_NOTIFY_DUE, "notify", "notify_due", limit)

    def record(self, results: Iterable[Result]) -> None:
        box = self.outbox
        now = box.clock()
        with box._tx() as db:
            for res in results:
                _apply(db, "notify", res, now, box.backoff)

    def retry_now(self) -> None:
        with self.outbox._tx() as db:
            db.execute("UPDATE notify SET next_attempt_at = 0 WHERE status = 'pending'")


def _apply(db: sqlite3.Connection, table: str, res: Result, now: float,
           backoff: Backoff) -> None:
    """One delivery result into ``events`` or ``notify`` (same status columns)."""
    key = "id" if table == "events" else "event_id"
    if res.status == DELIVERED:
        db.execute(f"UPDATE {table} SET status = 'delivered', delivered_at = ?, "
                   f"attempts = attempts + 1, last_error = NULL WHERE {key} = ?",
                   (now, res.event_id))
    elif res.status == REJECTED:
        db.execute(f"UPDATE {table} SET status = 'rejected', attempts = attempts + 1, "
                   f"last_error = ? WHERE {key} = ?", (res.error, res.event_id))
    else:
        row = db.execute(f"SELECT attempts FROM {table} WHERE {key} = ?",
                         (res.event_id,)).fetchone()
        if row is None:  # a newer nodestate replaced it while in flight
            return
        db.execute(f"UPDATE {table} SET attempts = ?, next_attempt_at = ?, last_error = ? "
                   f"WHERE {key} = ?",
                   (row[0] + 1, now + backoff.delay(row[0]), res.error, res.event_id))


def _widen_kinds(db: sqlite3.Connection) -> None:
    """An outbox made before 'energy' events existed refuses them (a CHECK on kind), and
    SQLite cannot alter a CHECK: the events table is copied once into one made from
    :data:`_EVENTS`, in the caller's transaction (seconds for millions of events), keeping
    every row and id and the AUTOINCREMENT counter (ids are never reused: notify rows name
    events by id)."""
    (sql,) = db.execute("SELECT sql FROM sqlite_master WHERE type = 'table' "
                        "AND name = 'events'").fetchone()
    if "'energy'" in sql:
        return
    row = db.execute("SELECT seq FROM sqlite_sequence WHERE name = 'events'").fetchone()
    db.execute(_EVENTS.format(table="events_widened"))
    db.execute("INSERT INTO events_widened SELECT * FROM events")
    db.execute("DROP TABLE events")
    db.execute("ALTER TABLE events_widened RENAME TO events")
    for statement in _EVENTS_INDEXES.split(";"):
        if "CREATE" in statement:
            db.execute(statement)
    if row is not None:  # the copy has no counter if it copied no row
        db.execute("INSERT INTO sqlite_sequence (name, seq) SELECT 'events', 0 WHERE NOT "
                   "EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'events')")
        db.execute("UPDATE sqlite_sequence SET seq = max(seq, ?) WHERE name = 'events'", row)


def _keep_script(new: dict[str, Any], old: dict[str, Any]) -> dict[str, Any]:
    """A richer start replaces a stored one; the batch script the stored one carried stays
    (the window does not fetch a script again for a run it has seen)."""
    script = (old.get("metaData") or {}).get("jobScript")
    meta = new.get("metaData") or {}
    if not script or meta.get("jobScript"):
        return new
    return {**new, "metaData": {**meta, "jobScript": script}}


def _hosts(start_body: dict[str, Any]) -> str:
    return ",".join(r.get("hostname", "") for r in start_body.get("resources") or ())


def _dumps(payload: dict[str, Any]) -> str:
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False)
