"""How long the outbox keeps what, so that its file stays within a bound whatever a site runs
for months (:func:`compact`, hourly in the daemon; :meth:`ccadapter.outbox.Outbox.compact`).

- every event of the last ``slurmQueryMaxSpan`` (7 days) as a small row, so overlapping
  windows never send one twice; a run still open keeps its start however old;
- the body of a start (kilobytes: the batch script, ``slurmInfo``; in the bodies table)
  while its run is open, and for an hour after its stop went out: a stop answered 404 sends
  it first, cc-cache a start of a run still running; then its pages are freed;
- the body of a stop as long as its event: a stop cc-backend lost is sent again from it
  (``Outbox.reopen_start``, cc-cache and lost-stops);
- rejected events and NATS notifications for :data:`REJECTED_KEEP` (30 days), then said
  and forgotten: an operator had a month to retry them;
- node states for an hour; an energy edit's body for an hour after its delivery.
A body still owed to NATS (its notification pending or rejected) is kept until it is not.
The store gives freed pages back to the file system (incremental vacuum). At 50,000 jobs a
day that is a week of small rows and an hour of bodies: BENCHMARKS.md, "Outbox size over a
month", gives the size measured.
"""

from __future__ import annotations

import logging
import sqlite3

from ccadapter.outbox.store import Store, batches, get_state, marks, put_state

log = logging.getLogger(__name__)

# How long a rejected event (or NATS notification) is kept for the operator to retry it.
REJECTED_KEEP = 30 * 86400
_PAYLOADS_DROPPED = "compact.payloads_dropped_before"


def compact(store: Store, keep_seconds: float) -> int:
    """Keep the outbox to what a site needs of it, within a bound (see the module
    docstring); returns how many events were forgotten. Reads only the events old
    enough to change (index on status, delivered_at)."""
    now = store.clock()
    with store.tx() as db:
        gone = _prune_rejected(db, now)
        gone += db.execute(
            "DELETE FROM events WHERE status = 'delivered' AND delivered_at < ? "
            "AND id NOT IN (SELECT event_id FROM notify WHERE status != 'delivered') "
            "AND NOT (kind = 'start' AND EXISTS (SELECT 1 FROM runs r WHERE "
            "r.cluster = events.cluster AND r.job_id = events.job_id "
            "AND r.start_time = events.start_time))",
            (now - keep_seconds,)).rowcount
        gone += db.execute("DELETE FROM events WHERE kind = 'nodestate' AND status = "
                           "'delivered' AND delivered_at < ?", (now - 3600,)).rowcount
        mark = float(get_state(db, _PAYLOADS_DROPPED) or 0.0)
        span = (mark - 3600, now - 3600)  # delivered in the hour that just passed 1 h
        # a run whose stop went out over an hour ago: its start body (scripts,
        # slurmInfo) is needed no more (a stop answered 404 sends it, and cc-cache a
        # start of a run still running); the stop's own body stays as long as the event,
        # to be sent again if lost. Kept while a NATS notification of the start or the
        # stop is owed: its message is made from them.
        db.execute("DELETE FROM bodies WHERE event_id IN (SELECT s.id FROM events t "
                   "INDEXED BY events_delivered JOIN events s ON s.cluster = t.cluster "
                   "AND s.job_id = t.job_id AND s.start_time = t.start_time AND "
                   "s.kind = 'start' WHERE t.status = 'delivered' AND t.delivered_at >= ? "
                   "AND t.delivered_at < ? AND t.kind = 'stop' AND s.status = 'delivered' "
                   "AND s.id NOT IN (SELECT event_id FROM notify WHERE status != "
                   "'delivered') AND t.id NOT IN (SELECT event_id FROM notify WHERE "
                   "status != 'delivered'))", span)
        db.execute("UPDATE events SET payload = json_remove(payload, '$.start') WHERE "
                   "status = 'delivered' AND delivered_at >= ? AND delivered_at < ? AND "
                   "kind = 'stop' AND json_type(payload, '$.start') IS NOT NULL", span)
        db.execute("UPDATE events SET payload = '' WHERE status = 'delivered' AND "
                   "delivered_at >= ? AND delivered_at < ? AND kind = 'energy' AND "
                   "payload != ''", span)
        put_state(db, _PAYLOADS_DROPPED, repr(now - 3600))
        db.execute("DELETE FROM notify WHERE event_id NOT IN (SELECT id FROM events)")
    return gone

def _prune_rejected(db: sqlite3.Connection, now: float) -> int:
    """Rejected events and rejected NATS notifications older than
    :data:`REJECTED_KEEP` (an operator had a month to retry them): forgotten, and said."""
    horizon = now - REJECTED_KEEP
    notes = db.execute("DELETE FROM notify WHERE status = 'rejected' AND event_id IN ("
                       "SELECT id FROM events WHERE delivered_at < ?)", (horizon,)).rowcount
    rows = db.execute("SELECT id, cluster, job_id, kind FROM events WHERE status = "
                      "'rejected' AND created_at < ? ORDER BY id", (horizon,)).fetchall()
    for chunk in batches([r[0] for r in rows]):
        db.execute(f"DELETE FROM events WHERE id IN ({marks(chunk)})", chunk)
    if rows or notes:
        log.warning("outbox: %d rejected event(s) and %d rejected NATS notification(s) "
                    "older than %d days forgotten (never delivered; e.g. %s)", len(rows),
                    notes, REJECTED_KEEP // 86400, ", ".join(
                        f"{kind} of job {job} ({cluster})" for _, cluster, job, kind
                        in rows[:3]) or "notifications only")
    return len(rows)
