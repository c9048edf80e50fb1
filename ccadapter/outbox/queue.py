"""A queue to drain: the events for cc-backend, and the NATS notifications owed for the
delivered ones. Both hand out what is due in id order, hold an event back while an earlier
one of its run waits, and take delivery results with the same backoff; they differ only in
their table and their ordering query, so one class serves both.

Per job the order is kept by what :meth:`DeliveryQueue.due` hands out: a stop only after
the start of the same run was delivered (or rejected), a run's energy only after its stop,
and the start of a requeued job's new run only after the old run's events.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from ccadapter.model import EventKind
from ccadapter.outbox.store import Store, batches, marks
from ccadapter.retry import RetryPolicy

# The note a delivered start carries when cc-backend holds another run of its job id instead
# (cc-backend 1.5.4 refuses a run of a job id within a day of an earlier one): cc-cache does
# not send it again, and ``status`` counts these runs (``notHeld``).
NOT_HELD = "not held: "
# Those starts, as a WHERE clause the partial index events_not_held (store.py) answers.
NOT_HELD_ROWS = "kind = 'start' AND last_error LIKE 'not held: %'"
# Rows of any kind but those: what cc-backend took (a refused run's stop is noted so too).
HELD_ROWS = "coalesce(last_error, '') NOT LIKE 'not held: %'"


class DeliveryStatus(StrEnum):
    """Where an outbox row stands (the ``status`` column of ``events`` and ``notify``) and
    what a delivery attempt made of it (:class:`Result`). A StrEnum: its values are what
    the file stores and what ``queue list`` and ``status`` print. The schema's CHECK and the
    SQL of the outbox spell them as literals; a unit test holds those to this enum."""

    PENDING = "pending"  # to be sent, now or after its backoff
    DELIVERED = "delivered"  # the target took it (or already had it); or dropped by hand
    REJECTED = "rejected"  # refused for good; parked until the operator retries it


@dataclass(frozen=True)
class Event:
    id: int
    cluster: str
    job_id: int
    start_time: int
    kind: EventKind
    payload: dict[str, Any]
    attempts: int
    created_at: float
    # when the event it waited for was delivered (an energy edit: its stop), if it waited
    # for one: from then on the target can take it
    after: float | None = None

    @classmethod
    def from_row(cls, r: tuple[Any, ...]) -> Event:
        """From (id, cluster, job_id, start_time, kind, payload, attempts, created_at
        [, after])."""
        return cls(r[0], r[1], r[2], r[3], EventKind(r[4]), json.loads(r[5]), r[6], r[7],
                   r[8] if len(r) > 8 else None)


@dataclass(frozen=True)
class Result:
    """What became of one delivery attempt."""

    event_id: int
    status: DeliveryStatus  # PENDING: retry later
    error: str = ""
    # PENDING because the target answered that it cannot take this event yet (an energy
    # edit before the job is archived), not because it is down: its backoff is its own, and
    # it says nothing of whether the target is up
    waiting: bool = False


@dataclass(frozen=True)
class QueueTable:
    """Where a queue keeps its rows: the table, its key column, its two indexes (pending
    rows by due time, by id) and the query for the due ones in order."""

    table: str
    key: str
    due_index: str
    due_query: str


# An event's body as delivery sends it: a start's from the bodies table; a stop's own with
# its run's start body beside it as "start" (a stop answered 404 delivers the start first,
# and NATS takes its partition from it; the one it came with where none is stored); the
# others' row. Read with the event table as ``e``.
PAYLOAD = """CASE e.kind
  WHEN 'start' THEN (SELECT b.body FROM bodies b WHERE b.event_id = e.id)
  WHEN 'stop' THEN coalesce((
        SELECT json_set(e.payload, '$.start', json(b.body)) FROM events s
        JOIN bodies b ON b.event_id = s.id
        WHERE s.cluster = e.cluster AND s.job_id = e.job_id AND s.start_time = e.start_time
          AND s.kind = 'start'), e.payload)
  ELSE e.payload END"""

EVENTS = QueueTable("events", "id", "events_due", f"""
SELECT id, cluster, job_id, start_time, kind, {PAYLOAD}, attempts, created_at,
  CASE WHEN kind = 'energy' THEN (
        SELECT s.delivered_at FROM events s WHERE s.cluster = e.cluster
          AND s.job_id = e.job_id AND s.start_time = e.start_time AND s.kind = 'stop') END
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
""")

NOTIFY = QueueTable("notify", "event_id", "notify_due", f"""
SELECT e.id, e.cluster, e.job_id, e.start_time, e.kind, {PAYLOAD}, n.attempts, e.created_at
FROM notify n INDEXED BY notify_pending JOIN events e ON e.id = n.event_id
WHERE n.status = 'pending' AND n.next_attempt_at <= :now
  AND NOT (e.kind = 'stop' AND EXISTS (
        SELECT 1 FROM events s JOIN notify ns ON ns.event_id = s.id
        WHERE s.cluster = e.cluster AND s.job_id = e.job_id AND s.start_time = e.start_time
          AND s.kind = 'start' AND ns.status = 'pending'))
ORDER BY n.event_id LIMIT :limit
""")

# Whether anything is due at all: during an outage the whole backlog waits, and walking it
# in id order only to find nothing would cost a walk of the whole backlog every second.
_ANY_DUE = ("SELECT 1 FROM {table} INDEXED BY {index} WHERE status = 'pending' "
            "AND next_attempt_at <= ? LIMIT 1")


class DeliveryQueue:
    """The rows of one :class:`QueueTable` as a queue for
    :class:`ccadapter.daemon.deliverer.Deliverer`.
    ``on_delivered(db, event_id)`` runs in the transaction that records a delivery (the
    events queue owes a NATS notification there)."""

    def __init__(self, store: Store, spec: QueueTable, backoff: RetryPolicy | None = None,
                 on_delivered: Callable[[sqlite3.Connection, int], None] | None = None
                 ) -> None:
        self.store, self.spec = store, spec
        self.backoff = backoff or RetryPolicy()
        self.on_delivered = on_delivered

    def due(self, limit: int = 256) -> list[Event]:
        now = self.store.clock()
        spec = self.spec
        with self.store.read() as db:
            if db.execute(_ANY_DUE.format(table=spec.table, index=spec.due_index),
                          (now,)).fetchone():
                rows = db.execute(spec.due_query, {"now": now, "limit": limit}).fetchall()
            else:
                rows = []
        return [Event.from_row(r) for r in rows]

    def record(self, results: Iterable[Result]) -> None:
        """Apply delivery results in one transaction."""
        now = self.store.clock()
        with self.store.tx() as db:
            for res in results:
                self._apply(db, res, now)
                if self.on_delivered and res.status == DeliveryStatus.DELIVERED:
                    self.on_delivered(db, res.event_id)

    def retry_now(self, ids: Iterable[int] | None = None) -> None:
        """Make waiting rows due: ``ids`` (those an outage held back: the target is back),
        or every one (the operator says so)."""
        table, key = self.spec.table, self.spec.key
        with self.store.tx() as db:
            if ids is None:
                db.execute(f"UPDATE {table} SET next_attempt_at = 0 WHERE status = 'pending'")
                return
            for chunk in batches(sorted(set(ids))):
                db.execute(f"UPDATE {table} SET next_attempt_at = 0 WHERE status = 'pending' "
                           f"AND {key} IN ({marks(chunk)})", chunk)

    def _apply(self, db: sqlite3.Connection, res: Result, now: float) -> None:
        table, key = self.spec.table, self.spec.key
        if res.status == DeliveryStatus.DELIVERED:
            # a delivered event keeps a problem cc-backend showed in its answer, if any
            db.execute(f"UPDATE {table} SET status = 'delivered', delivered_at = ?, "
                       f"attempts = attempts + 1, last_error = ? WHERE {key} = ?",
                       (now, res.error or None, res.event_id))
        elif res.status == DeliveryStatus.REJECTED:
            db.execute(f"UPDATE {table} SET status = 'rejected', attempts = attempts + 1, "
                       f"last_error = ? WHERE {key} = ?", (res.error, res.event_id))
        else:
            row = db.execute(f"SELECT attempts FROM {table} WHERE {key} = ?",
                             (res.event_id,)).fetchone()
            if row is None:  # a newer nodestate replaced it while in flight
                return
            db.execute(f"UPDATE {table} SET attempts = ?, next_attempt_at = ?, last_error = ? "
                       f"WHERE {key} = ?",
                       (row[0] + 1, now + self.backoff.delay(row[0] + 1), res.error,
                        res.event_id))
