"""The operator's view of the outbox and its hands on it: ``ccadapter status``,
``queue list|retry|drop``, ``backfill --resend`` and the daemon's metrics. Functions of
the :class:`~ccadapter.outbox.store.Store`, never used by the delivery path."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ccadapter.model import EventKind
from ccadapter.outbox.events import NewEvent, dumps
from ccadapter.outbox.queue import NOT_HELD_ROWS, PAYLOAD, DeliveryStatus, Event
from ccadapter.outbox.store import Store, batches, existing, marks

_LISTED = ("id", "cluster", "jobId", "startTime", "kind", "status", "attempts",
           "nextAttemptAt", "createdAt", "deliveredAt", "error")


def stats(store: Store) -> dict[str, Any]:
    with store.read() as db:
        counts = dict(db.execute(
            "SELECT kind || ':' || status, count(*) FROM events GROUP BY 1").fetchall())
        oldest = db.execute("SELECT min(created_at) FROM events WHERE "
                                  "status = 'pending'").fetchone()[0]
        notify = dict(db.execute(
            "SELECT status, count(*) FROM notify GROUP BY 1").fetchall())
        not_held = db.execute(f"SELECT count(*) FROM events WHERE {NOT_HELD_ROWS}"
                              ).fetchone()[0]
    return {"counts": counts, "notify": notify,
            "pending": _count(counts, DeliveryStatus.PENDING),
            "rejected": _count(counts, DeliveryStatus.REJECTED),
            "not_held": not_held,
            "oldest_pending_age": (store.clock() - oldest) if oldest else 0.0}


def _count(counts: dict[str, int], status: DeliveryStatus) -> int:
    """The events of any kind in ``status``, from ``{"kind:status": count}``."""
    return sum(v for k, v in counts.items() if k.endswith(f":{status}"))


def rejected(store: Store, limit: int = 100) -> list[dict[str, Any]]:
    with store.read() as db:
        rows = db.execute(
            "SELECT id, cluster, job_id, start_time, kind, attempts, last_error FROM events "
            "WHERE status = 'rejected' ORDER BY id LIMIT ?", (limit,)).fetchall()
    keys = ("id", "cluster", "jobId", "startTime", "kind", "attempts", "error")
    return [dict(zip(keys, r, strict=True)) for r in rows]


def list_events(store: Store, status: DeliveryStatus | None = None, kind: str | None = None,
                limit: int = 100) -> list[dict[str, Any]]:
    """Events without their payloads, oldest first; ``None`` means any status/kind."""
    where, args = _filters(status=status, kind=kind)
    with store.read() as db:
        rows = db.execute(
            "SELECT id, cluster, job_id, start_time, kind, status, attempts, "
            f"next_attempt_at, created_at, delivered_at, last_error FROM events {where} "
            "ORDER BY id LIMIT ?", (*args, limit)).fetchall()
    return [dict(zip(_LISTED, r, strict=True)) for r in rows]


def events_by_id(store: Store, ids: Iterable[int]) -> list[dict[str, Any]]:
    """Like :meth:`list_events`, for the given ids (unknown ones are left out)."""
    rows: list[tuple[Any, ...]] = []
    with store.read() as db:
        for chunk in batches(sorted(set(ids))):
            rows += db.execute(
                "SELECT id, cluster, job_id, start_time, kind, status, attempts, "
                "next_attempt_at, created_at, delivered_at, last_error FROM events "
                f"WHERE id IN ({marks(chunk)}) ORDER BY id", chunk).fetchall()
    return [dict(zip(_LISTED, r, strict=True)) for r in rows]


def requeue(store: Store, ids: Iterable[int] | None = None) -> list[int]:
    """Make events due now: the given pending or rejected ones, or (``None``) every
    rejected one. Returns the ids changed; delivered events are left alone (a resend is
    ``backfill --resend``'s business, with a fresh body from Slurm)."""
    with store.tx() as db:
        if ids is None:
            found = [r[0] for r in db.execute(
                "SELECT id FROM events WHERE status = 'rejected' ORDER BY id")]
        else:
            found = existing(db, ids, "status IN ('pending', 'rejected')")
        for chunk in batches(found):
            db.execute("UPDATE events SET status = 'pending', next_attempt_at = 0 "
                       f"WHERE id IN ({marks(chunk)})", chunk)
    return found


def drop(store: Store, ids: Iterable[int]) -> list[int]:
    """Give up on undelivered events: they are marked delivered (never sent) with a
    note, and their body is forgotten. They keep their place in the table so that the
    next overlapping Slurm window does not enqueue them again; ``compact`` forgets them
    with the delivered ones. Returns the ids changed."""
    now = store.clock()
    with store.tx() as db:
        found = existing(db, ids, "status != 'delivered'")
        for chunk in batches(found):
            db.execute("UPDATE events SET status = 'delivered', delivered_at = ?, "
                       "payload = '', last_error = 'dropped by operator' "
                       f"WHERE id IN ({marks(chunk)})", (now, *chunk))
            db.execute(f"DELETE FROM bodies WHERE event_id IN ({marks(chunk)})", chunk)
    return found


def resend(store: Store, events: Iterable[NewEvent]) -> int:
    """Open delivered events again with the given (fresh) bodies: cc-backend lost
    them. Events not in the table or not delivered are left alone; returns how many
    were opened."""
    opened = 0
    with store.tx() as db:
        for ev in events:
            row = ("" if ev.kind == EventKind.START else
                   dumps({"stop": ev.payload["stop"]}) if ev.kind == EventKind.STOP else
                   dumps(ev.payload))
            found = db.execute(
                "SELECT id FROM events WHERE cluster = ? AND job_id = ? AND start_time = ? "
                "AND kind = ? AND status = 'delivered'",
                (ev.cluster, ev.job_id, ev.start_time, ev.kind)).fetchone()
            if found is None:
                continue
            db.execute("UPDATE events SET status = 'pending', next_attempt_at = 0, "
                       "payload = ?, last_error = NULL, delivered_at = NULL WHERE id = ?",
                       (row, found[0]))
            if ev.kind == EventKind.START:
                db.execute("INSERT OR REPLACE INTO bodies (event_id, body) VALUES (?, ?)",
                           (found[0], dumps(ev.payload)))
            opened += 1
    return opened


def track_changes(store: Store) -> None:
    """From now on, note every event added or changed (a new event, a start replaced
    by a richer one, a delivered start opened again), for :func:`changed`. The notes
    live in this connection only (TEMP), never in the file."""
    with store.read() as db:
        db.execute("CREATE TEMP TABLE IF NOT EXISTS changed (id INTEGER PRIMARY KEY)")
        db.execute("CREATE TEMP TRIGGER IF NOT EXISTS changed_added AFTER INSERT "
                   "ON main.events BEGIN INSERT OR IGNORE INTO changed VALUES (new.id); END")
        db.execute("CREATE TEMP TRIGGER IF NOT EXISTS changed_updated AFTER UPDATE "
                   "OF payload, status ON main.events BEGIN INSERT OR IGNORE INTO "
                   "changed VALUES (new.id); END")
        db.execute("CREATE TEMP TRIGGER IF NOT EXISTS changed_body AFTER UPDATE "
                   "ON main.bodies BEGIN INSERT OR IGNORE INTO changed VALUES "
                   "(new.event_id); END")


def changed(store: Store) -> list[Event]:
    """The events added or changed since :func:`track_changes` that wait to be sent, in
    id order: what a delivery would send that it would not have sent before. Read from the
    table, not through the queue's ``due``, which holds a stop back while its start waits."""
    with store.read() as db:
        rows = db.execute(
            f"SELECT id, cluster, job_id, start_time, kind, {PAYLOAD}, attempts, created_at "
            "FROM events e WHERE status = 'pending' AND id IN (SELECT id FROM temp.changed) "
            "ORDER BY id").fetchall()
    return [Event.from_row(r) for r in rows]


def _filters(**columns: str | None) -> tuple[str, tuple[str, ...]]:
    """A WHERE clause for the columns given a value (names are ours, values are bound)."""
    given = {k: v for k, v in columns.items() if v is not None}
    if not given:
        return "", ()
    return "WHERE " + " AND ".join(f"{k} = ?" for k in given), tuple(given.values())
